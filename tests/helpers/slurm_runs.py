"""The runs tests/workflow/test_slurm.py checks: a tiny project run locally, then on a local
single-node SLURM (slurm_cluster.py) through the repository's SLURM profile, with a model whose
weights are damaged and one job cancelled mid-run.

The SLURM run mostly waits (the executor plugin polls squeue every 1 s, 11 s, 21 s... while no
job has finished), so conftest.py starts these runs in a background thread as the session
starts, when the SLURM tests are selected: the rest of the suite runs meanwhile, and the SLURM
tests read the finished runs (early.py)."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import waits
from early import Early
from fake_gpu import fake_nvidia_smi
from harness import (
    ROOT,
    make_tiny_project,
    read_config,
    snakemake_command,
    snakemake_env,
    write_config,
)
from slurm_cluster import ForeignConfig, LocalSlurm, missing_binaries

TARGETS = [
    "results/metrics/gpt/mini/r2.parquet",
    "results/metrics/gpt/mini/prediction.parquet",
    "results/metrics/gpt/mini/parameters.parquet",
    "results/metrics/gpt/mini/submodules.parquet",
]
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


def make_project(folder: Path) -> Path:
    """A tiny model, a small text corpus and a config using them."""
    return make_tiny_project(
        folder,
        models=("gpt",),
        sentences=150,
        seed=1,
        sizes={"train": 40, "validation": 16},
        methods=["id", "mat", "njtc", "tuned_lens"],  # fit_map: mat; train_map: njtc, the lens
        training={m: {"max_epochs": 2, "batch_size": 8} for m in ("njtc", "tuned_lens")},
        submodules={"models": ["gpt"], "variants": ["mat_attn"], "jump_layers": [1]},
    )


def copy_project(project: Path, workdir: Path) -> Path:
    workdir.mkdir()
    write_config(workdir, read_config(project))
    return workdir


def cancel_first_running(slurm: LocalSlurm, prefix: str, done: dict, stop: threading.Event):
    """Cancel the first job whose rule and wildcards begin with `prefix` seen running, once."""
    while not stop.is_set():
        for job in slurm.jobs():
            if job["state"] == "RUNNING" and job["comment"].startswith(f"rule_{prefix}"):
                slurm.cancel(job["id"])
                done["cancelled"] = job
                return
        time.sleep(0.2)


def start(root: Path) -> Early:
    """The runs, started in the background (early.py); the cluster stops with the session."""
    cluster: list[LocalSlurm] = []

    def stop(_early):
        for slurm in cluster:
            slurm.stop()

    return Early("slurm", lambda early: runs(early, Path(root), cluster), stop).start()


def start_cluster(root: Path) -> LocalSlurm:
    missing = missing_binaries()
    if missing:
        pytest.skip(
            f"SLURM is not installed here (missing {', '.join(missing)}); "
            "tests/install_slurm.sh installs it from Debian's packages (root and apt-get needed)"
        )
    slurm = LocalSlurm(root)
    try:
        slurm.start()
    except (OSError, subprocess.CalledProcessError, RuntimeError, ForeignConfig) as exc:
        slurm.stop()
        pytest.skip(f"a local SLURM could not be started here: {exc}")
    return slurm


def snakemake(early: Early, workdir, *args, env=None, cores=None) -> subprocess.Popen:
    """Snakemake started on `workdir` (no --cores unless given: the SLURM profile sets it),
    its output and errors in one pipe."""
    return early.popen(
        snakemake_command(workdir, *args, cores=cores),
        env=snakemake_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def runs(early: Early, root: Path, cluster: list) -> dict:
    """The same config run locally and on SLURM. The SLURM run also has a model whose
    weights are damaged (its resolve_model job fails on every attempt), and its first
    running extract_hidden job is cancelled with scancel: the profile's retries must carry
    it through."""
    cluster.append(start_cluster(root / "slurm"))
    slurm = cluster[0]
    project = make_project(root / "project")
    local = copy_project(project, root / "local")
    started = time.monotonic()
    out, _ = waits.finish(
        snakemake(early, local, *TARGETS, cores=2), LOCAL_S, "the local run of the project"
    )
    assert all((local / t).exists() for t in TARGETS), out[-3000:]
    local_s = time.monotonic() - started

    remote = copy_project(project, root / "slurm-run")
    broken = remote / "broken-model"
    shutil.copytree(project / "tiny-gpt2", broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")  # fails loading
    config = read_config(remote)
    config["models"]["broken"] = {"source": str(broken)}
    write_config(remote, config)
    targets = [*TARGETS, "results/metrics/broken/mini/r2.parquet"]
    # Snakemake itself sees a GPU (nvidia-smi faked): the jobs, on SLURM's nodes, take no
    # share of it (gpu_memory_percent 0)
    gpu = fake_nvidia_smi(root / "fake-bin", memory_mib=1000)
    proc = snakemake(early, remote, *SLURM_FLAGS, *targets, env={**slurm.env, **gpu})
    done, stop = {}, threading.Event()
    watcher = threading.Thread(
        target=cancel_first_running, args=(slurm, "extract_hidden_wildcards_gpt", done, stop)
    )
    watcher.start()
    try:
        # the same jobs and more (the retries, the broken model's three attempts), each
        # waiting for the plugin's squeue polls: a multiple of the local run, measured on
        # this machine now
        seconds = max(SLURM_MIN_S, SLURM_TIMES_LOCAL * local_s)
        what = (
            f"the SLURM run ({SLURM_TIMES_LOCAL} times the local run's {local_s:.0f} s, at "
            f"least {SLURM_MIN_S} s)"
        )
        try:
            out, _ = waits.finish(proc, seconds, what)
        except AssertionError as waited:
            raise AssertionError(f"{waited}\nthe cluster's jobs: {slurm.jobs()}") from None
    finally:
        stop.set()
        watcher.join()
    return {
        "local": local,
        "slurm": remote,
        "out": out,
        "rc": proc.returncode,
        "jobs": slurm.jobs(),
        "local_seconds": local_s,
        **done,
    }
