"""On a machine with a GPU, the jobs that use it run side by side only while their estimated
shares of its memory add up to at most 100 (the `gpu_memory_percent` resource, whose limit
workflow/profiles/default sets). nvidia-smi is faked, so this runs anywhere: the jobs
themselves see no GPU, but the shares and the scheduling are the workflow's own."""

import os
import re
from pathlib import Path

import pytest
from harness import JOB_LINE, copy_run, read_config, run_snakemake

from jtc import paths
from jtc.resources import MIB, Shape, gpu_memory_percent

pytestmark = pytest.mark.workflow

SPLITS = ("train", "validation")


def _extract_both_splits(workdir: Path, gpu_mib: int):
    """Rerun the tiny gpt model's two extraction jobs on a fake GPU of `gpu_mib` MiB: each job's
    share of it, and whether the second job started before the first had finished."""
    bin_dir = workdir / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '0, GPU-00000000-fake, {gpu_mib}'\n")
    smi.chmod(0o755)
    targets = [paths.HIDDEN.format(model="gpt", corpus="mini", split=s) for s in SPLITS]
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "0"}
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
    """What jtc.resources gives each split's job for the cached model, in order."""
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
