"""The runs tests/workflow/test_slurm.py checks: a tiny project run locally, then on a local
single-node SLURM (slurm_cluster.py) through the repository's SLURM profile, with a model whose
weights are damaged and one job cancelled mid-run.

The SLURM run mostly waits (the executor plugin polls squeue every 1 s, 11 s, 21 s... while no
job has finished), so conftest.py starts these runs in a background thread as the session
starts, when the SLURM tests are selected: the rest of the suite runs meanwhile, and the SLURM
tests read the finished runs (SlurmRuns.result)."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import waits
from fake_gpu import fake_nvidia_smi
from harness import ROOT, make_tiny_project, read_config, start_snakemake, write_config
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
        methods=["id", "mat", "njtc", "tuned_lens"],  # fit_map: mat, njtc; train_map: the lens
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


class SlurmRuns:
    """The local and the SLURM run, made in a background thread from `start()` on; `result()`
    waits for them and returns what they left (or raises what stopped them: a skip where SLURM
    cannot run here); `close()` stops whatever still runs and the cluster."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.cluster: LocalSlurm | None = None
        self.procs: list[subprocess.Popen] = []
        self.stopping = threading.Event()
        self._outcome: tuple[dict | None, BaseException | None] = (None, None)
        self._thread = threading.Thread(target=self._run, name="slurm-runs", daemon=True)

    def start(self) -> SlurmRuns:
        self._thread.start()
        return self

    def result(self) -> dict:
        self._thread.join()
        found, raised = self._outcome
        if raised is not None:
            raise raised
        return found

    def close(self) -> None:
        self.stopping.set()
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        self._thread.join()
        if self.cluster is not None:
            self.cluster.stop()

    def _run(self) -> None:
        try:
            self._outcome = (self._runs(), None)
        except BaseException as raised:  # (pytest's skip too) handed to result()
            self._outcome = (None, raised)

    def _snakemake(self, workdir, *args, env=None, cores=None) -> subprocess.Popen:
        """Snakemake started on `workdir` (no --cores unless given: the SLURM profile sets it),
        its output and errors in one pipe."""
        if self.stopping.is_set():
            raise RuntimeError("the session ended before the SLURM runs")
        proc = start_snakemake(
            workdir,
            *args,
            env=env,
            cores=cores,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def _start_cluster(self) -> LocalSlurm:
        missing = missing_binaries()
        if missing:
            pytest.skip(
                f"SLURM is not installed here (missing {', '.join(missing)}); "
                "tests/install_slurm.sh installs it from Debian's packages (root and apt-get "
                "needed)"
            )
        self.cluster = LocalSlurm(self.root / "slurm")
        try:
            self.cluster.start()
        except (OSError, subprocess.CalledProcessError, RuntimeError, ForeignConfig) as exc:
            self.cluster.stop()
            self.cluster = None
            pytest.skip(f"a local SLURM could not be started here: {exc}")
        return self.cluster

    def _runs(self) -> dict:
        """The same config run locally and on SLURM. The SLURM run also has a model whose
        weights are damaged (its resolve_model job fails on every attempt), and its first
        running extract_hidden job is cancelled with scancel: the profile's retries must carry
        it through."""
        cluster = self._start_cluster()
        project = make_project(self.root / "project")
        local = copy_project(project, self.root / "local")
        started = time.monotonic()
        out, _ = waits.finish(
            self._snakemake(local, *TARGETS, cores=2), LOCAL_S, "the local run of the project"
        )
        assert all((local / t).exists() for t in TARGETS), out[-3000:]
        local_s = time.monotonic() - started

        remote = copy_project(project, self.root / "slurm-run")
        broken = remote / "broken-model"
        shutil.copytree(project / "tiny-gpt2", broken)
        (broken / "model.safetensors").write_bytes(b"not a safetensors file")  # fails loading
        config = read_config(remote)
        config["models"]["broken"] = {"source": str(broken)}
        write_config(remote, config)
        targets = [*TARGETS, "results/metrics/broken/mini/r2.parquet"]
        # Snakemake itself sees a GPU (nvidia-smi faked): the jobs, on SLURM's nodes, take no
        # share of it (gpu_memory_percent 0)
        gpu = fake_nvidia_smi(self.root / "fake-bin", memory_mib=1000)
        proc = self._snakemake(remote, *SLURM_FLAGS, *targets, env={**cluster.env, **gpu})
        done, stop = {}, threading.Event()
        watcher = threading.Thread(
            target=cancel_first_running, args=(cluster, "extract_hidden_wildcards_gpt", done, stop)
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
                raise AssertionError(f"{waited}\nthe cluster's jobs: {cluster.jobs()}") from None
        finally:
            stop.set()
            watcher.join()
        return {
            "local": local,
            "slurm": remote,
            "out": out,
            "rc": proc.returncode,
            "jobs": cluster.jobs(),
            "local_seconds": local_s,
            **done,
        }
