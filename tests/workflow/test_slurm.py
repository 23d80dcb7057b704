"""The workflow on a real (single-node) SLURM, through Snakemake's executor plugin and the
repository's SLURM profile: the same tables as a local run, a job cancelled mid-run is retried,
and a job that always fails stops the run naming its rule."""

import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import waits
from fake_gpu import fake_nvidia_smi
from harness import ROOT, make_tiny_project, read_config, start_snakemake, write_config
from safetensors.numpy import load_file
from slurm_cluster import ForeignConfig, LocalSlurm, missing_binaries

pytestmark = pytest.mark.workflow
TARGETS = [
    "results/metrics/gpt/mini/r2.parquet",
    "results/metrics/gpt/mini/prediction.parquet",
    "results/metrics/gpt/mini/parameters.parquet",
    "results/metrics/gpt/mini/submodules.parquet",
]
GPU_RULES = (
    "extract_hidden",
    "decode_predictions",
    "fit_map",
    "train_map",
    "record_parts",
    "replace_parts",
)
# how long the runs may take on an idle machine (waits.py stretches them on a busy one): the
# local run (a few jobs of one tiny model: under a minute on 2 cores) and the SLURM run, a
# multiple of the local run as measured, at least SLURM_MIN_S
LOCAL_S = 600
SLURM_TIMES_LOCAL = 10
SLURM_MIN_S = 600
# executor settings for a cluster without accounting (the profile keeps the plugin's defaults)
SLURM_FLAGS = [
    "--workflow-profile",
    str(ROOT / "workflow/profiles/slurm"),
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--slurm-no-account",
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    missing = missing_binaries()
    if missing:
        pytest.skip(
            f"SLURM is not installed here (missing {', '.join(missing)}); "
            "tests/install_slurm.sh installs it from Debian's packages (root and apt-get needed)"
        )
    slurm = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        slurm.start()
    except (OSError, subprocess.CalledProcessError, RuntimeError, ForeignConfig) as exc:
        slurm.stop()
        pytest.skip(f"a local SLURM could not be started here: {exc}")
    yield slurm
    slurm.stop()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A tiny model, a small text corpus and a config using them."""
    return make_tiny_project(
        tmp_path_factory.mktemp("slurm-project"),
        models=("gpt",),
        sentences=150,
        seed=1,
        sizes={"train": 40, "validation": 16},
        methods=["id", "mat", "njtc", "tuned_lens"],  # fit_map: mat, njtc; train_map: the lens
        training={m: {"max_epochs": 2, "batch_size": 8} for m in ("njtc", "tuned_lens")},
        submodules={"models": ["gpt"], "variants": ["mat_attn"], "jump_layers": [1]},
    )


def snakemake(workdir, *args, env=None, cores=None):
    """Snakemake started on `workdir` (no --cores unless given: the SLURM profile sets it),
    its output and errors in one pipe."""
    return start_snakemake(
        workdir,
        *args,
        env=env,
        cores=cores,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc, seconds, what) -> str:
    """The output of the Snakemake run `proc` once it has ended; at most `seconds` on an idle
    machine, stretched on a busy one (waits.py)."""
    out, _ = waits.finish(proc, seconds, what)
    return out


def copy_project(project, workdir):
    workdir.mkdir()
    write_config(workdir, read_config(project))
    return workdir


def same_outputs(a: Path, b: Path) -> None:
    for target in TARGETS:
        assert pq.read_table(a / target).equals(pq.read_table(b / target)), target
    for name in ("mat", "njtc", "tuned_lens"):
        x = load_file(a / f"results/maps/gpt/mini/{name}.safetensors")
        y = load_file(b / f"results/maps/gpt/mini/{name}.safetensors")
        assert sorted(x) == sorted(y) and all(np.array_equal(x[k], y[k]) for k in x), name


def cancel_first_running(slurm: LocalSlurm, prefix: str, done: dict, stop: threading.Event):
    """Cancel the first job whose rule and wildcards begin with `prefix` seen running, once."""
    while not stop.is_set():
        for job in slurm.jobs():
            if job["state"] == "RUNNING" and job["comment"].startswith(f"rule_{prefix}"):
                slurm.cancel(job["id"])
                done["cancelled"] = job
                return
        time.sleep(0.2)


@pytest.fixture(scope="module")
def runs(cluster, project, tmp_path_factory):
    """The same config run locally and on SLURM. The SLURM run also has a model whose weights
    are damaged (its resolve_model job fails on every attempt), and its first running
    extract_hidden job is cancelled with scancel: the profile's retries must carry it through."""
    root = tmp_path_factory.mktemp("runs")
    local = copy_project(project, root / "local")
    started = time.monotonic()
    out = finish(snakemake(local, *TARGETS, cores=2), LOCAL_S, "the local run of the project")
    assert all((local / t).exists() for t in TARGETS), out[-3000:]
    local_s = time.monotonic() - started

    remote = copy_project(project, root / "slurm")
    broken = remote / "broken-model"
    shutil.copytree(project / "tiny-gpt2", broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")  # fails when loaded
    config = read_config(remote)
    config["models"]["broken"] = {"source": str(broken)}
    write_config(remote, config)
    targets = [*TARGETS, "results/metrics/broken/mini/r2.parquet"]
    # Snakemake itself sees a GPU (nvidia-smi faked): the jobs, on SLURM's nodes, take no share
    # of it (gpu_memory_percent 0)
    gpu = fake_nvidia_smi(root / "fake-bin", memory_mib=1000)
    proc = snakemake(remote, *SLURM_FLAGS, *targets, env={**cluster.env, **gpu})
    done, stop = {}, threading.Event()
    watcher = threading.Thread(
        target=cancel_first_running, args=(cluster, "extract_hidden_wildcards_gpt", done, stop)
    )
    watcher.start()
    try:
        # the same jobs and more (the retries, the broken model's three attempts), each waiting
        # for the plugin's squeue polls (every 1 s, 11 s, 21 s... while none has finished): a
        # multiple of the local run, measured on this machine now
        seconds = max(SLURM_MIN_S, SLURM_TIMES_LOCAL * local_s)
        what = (
            f"the SLURM run ({SLURM_TIMES_LOCAL} times the local run's {local_s:.0f} s, at "
            f"least {SLURM_MIN_S} s)"
        )
        try:
            out = finish(proc, seconds, what)
        except AssertionError as waited:
            raise AssertionError(f"{waited}\nthe cluster's jobs: {cluster.jobs()}") from None
    finally:
        stop.set()
        watcher.join()
    jobs = cluster.jobs()
    return {
        "local": local,
        "slurm": remote,
        "out": out,
        "rc": proc.returncode,
        "jobs": jobs,
        **done,
    }


def test_slurm_run_equals_a_local_run_and_survives_a_cancelled_job(runs):
    out = runs["out"]
    assert "cancelled" in runs, "no extract_hidden job was seen running"
    assert "CANCELLED" in out and "Trying to restart job" in out, out[-5000:]
    # every job went through SLURM, one submission each (extract_hidden: twice for the cancel)
    submitted = [line for line in out.splitlines() if "has been submitted with SLURM" in line]
    assert sum("slurm_logs/rule_extract_hidden/gpt_" in line for line in submitted) == 3
    for rule in ("fit_map", "train_map", "r2_table", "parameter_table", "decode_predictions"):
        assert sum(f"slurm_logs/rule_{rule}/gpt_" in line for line in submitted) >= 1, rule
    # the profile's GPU requests reach SLURM: a GPU in the gpu partition for the GPU rules only
    for job in runs["jobs"]:
        gpu_rules = tuple(f"rule_{r}" for r in GPU_RULES)
        gpu_rule = job["comment"].startswith(gpu_rules)
        assert (job["partition"] == "gpu" and "gpu:1" in job["gpus"]) == gpu_rule, runs["jobs"]
    shares = re.findall(r"\bgpu_memory_percent=(\d+)", out)
    assert shares and set(shares) == {"0"}, shares  # the submitting machine's GPU is not theirs
    same_outputs(runs["local"], runs["slurm"])


def test_a_job_that_always_fails_stops_the_run_naming_its_rule(runs):
    out = runs["out"]
    assert runs["rc"] != 0
    assert "Error in rule resolve_model" in out and "wildcards: model=broken" in out, out[-4000:]
    # tried three times (the profile's retries: 2), then given up, the other jobs finished
    assert (
        sum(
            "slurm_logs/rule_resolve_model/broken/" in line
            for line in out.splitlines()
            if "has been submitted with SLURM" in line
        )
        == 3
    )
    assert not (runs["slurm"] / "results/models/broken").exists()
