"""The workflow on a machine with a GPU, with nvidia-smi faked so that this runs anywhere (the
jobs themselves see no GPU): what the machine cannot run is refused before any job, leaving a
finished run as it was; the jobs that use the GPU run side by side only while their estimated
shares of its memory add up to at most 100 (the `gpu_memory_percent` resource, whose limit
workflow/profiles/default sets)."""

import json
import re
from pathlib import Path

import pytest
from fake_gpu import fake_nvidia_smi
from harness import JOB_LINE, copy_run, read_config, run_snakemake, snapshot

from jtc import paths
from jtc.pipeline.gpus import MIB
from jtc.pipeline.job_shape import Shape
from jtc.pipeline.resources import gpu_memory_percent

pytestmark = pytest.mark.workflow

SPLITS = ("train", "validation")


def _extract_both_splits(workdir: Path, gpu_mib: int):
    """Rerun the tiny gpt model's two extraction jobs on a fake GPU of `gpu_mib` MiB: each job's
    share of it, and whether the second job started before the first had finished."""
    targets = [paths.HIDDEN.format(model="gpt", corpus="mini", split=s) for s in SPLITS]
    env = fake_nvidia_smi(workdir / "fake-bin", memory_mib=gpu_mib)
    proc = run_snakemake(workdir, *targets, "--forcerun", "extract_hidden", env=env)
    events, shares = [], []
    for line in (proc.stdout + proc.stderr).splitlines():
        start = JOB_LINE.match(line)
        if start and start.group(1) == "extract_hidden":
            events.append("start")
        elif re.match(r"Finished jobid: \d+ \(Rule: extract_hidden\)", line):
            events.append("finish")
        elif events and (share := re.search(r"\bgpu_memory_percent=(\d+)", line)):
            shares.append(int(share.group(1)))
    assert events.count("start") == 2 and events.count("finish") == 2, proc.stderr[-3000:]
    return sorted(shares), events.index("finish") < events.index("start", 1)


def _expected_shares(workdir: Path, gpu_mib: int) -> list[int]:
    """What jtc.pipeline.resources gives each split's job for the cached model, in order."""
    config = read_config(workdir)
    model = workdir / paths.MODEL.format(model="gpt")
    shapes = [Shape.of(model, config["sizes"][s], config["max_tokens"]) for s in SPLITS]
    return sorted(gpu_memory_percent("extract_hidden", s, gpu_mib * MIB) for s in shapes)


def test_gpu_jobs_that_together_overfill_the_gpu_run_one_after_the_other(tiny_run, tmp_path):
    workdir = copy_run(tiny_run, tmp_path)
    small_gpu = 1000  # MiB: each extraction job takes more than half of it
    expected = _expected_shares(workdir, small_gpu)
    assert 50 < expected[0] and expected[1] <= 100
    shares, one_after_the_other = _extract_both_splits(workdir, small_gpu)
    assert shares == expected
    assert one_after_the_other  # though two cores were free for both


def test_gpu_jobs_that_fit_together_run_side_by_side(tiny_run, tmp_path):
    workdir = copy_run(tiny_run, tmp_path)
    large_gpu = 1_000_000  # MiB
    shares, one_after_the_other = _extract_both_splits(workdir, large_gpu)
    assert shares == [1, 1]
    assert not one_after_the_other


@pytest.mark.parametrize(
    ("setting", "gpu", "message"),
    [
        (
            {"dtype": "bfloat16"},
            {"capability": "7.0", "name": "Tesla V100-SXM2-16GB"},
            "models.gpt.dtype bfloat16 is not supported by this GPU (Tesla V100-SXM2-16GB, "
            "compute capability 7.0",
        ),
        (
            {"device_map": "auto"},
            None,  # CUDA_VISIBLE_DEVICES="": every GPU hidden from the jobs
            "models.gpt.device_map 'auto' spreads the model over GPUs, but this machine's jobs "
            "see no CUDA device",
        ),
    ],
)
def test_what_this_machine_cannot_run_is_refused_before_any_job(
    tiny_run, tmp_path, setting, gpu, message
):
    config = read_config(tiny_run)
    config["models"]["gpt"].update(setting)
    workdir = copy_run(tiny_run, tmp_path, config)
    before = snapshot(workdir)
    env = fake_nvidia_smi(tmp_path / "fake-bin", **(gpu or {}))
    if gpu is None:
        env["CUDA_VISIBLE_DEVICES"] = ""
    proc = run_snakemake(workdir, "all", env=env, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and message in output, output[-2000:]
    assert "invalid configuration for this machine: model 'gpt'" in output
    assert snapshot(workdir) == before
    # on a GPU that can (Ampere), the same setting runs: here, caching the model in bfloat16
    if gpu is not None:
        env = fake_nvidia_smi(tmp_path / "ampere", capability="8.0")
        run_snakemake(workdir, paths.MODEL.format(model="gpt"), env=env)
        info = workdir / paths.MODEL.format(model="gpt") / "info.json"
        assert json.loads(info.read_text())["dtype"] == "bfloat16"
