"""Workflow runs started in a background thread as the session starts (conftest.py's
`early_runs`), for the tests that only read them once they have finished: the SLURM runs
(slurm_runs.py), which mostly wait for squeue polls, and the smoke experiment (one long chain
of jobs on real models, about one core busy). The rest of the suite runs meanwhile on the
cores they leave idle; a test that needs one waits for it (Early.result).

Each run is a function `work(early)` that starts its processes with `early.popen` (so that the
session's end can stop them) and returns what the tests read; what it raises (a failed
assertion, a skip) is raised again by result()."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from typing import Any


class Early:
    """`work(self)` run in a background thread from start() on."""

    def __init__(self, name: str, work: Callable[[Early], Any], on_close=None):
        self.name, self.work, self.on_close = name, work, on_close
        self.procs: list[subprocess.Popen] = []
        self.stopping = threading.Event()
        self._outcome: tuple[Any, BaseException | None] = (None, None)
        self._thread = threading.Thread(target=self._run, name=f"early-{name}", daemon=True)

    def start(self) -> Early:
        self._thread.start()
        return self

    def result(self):
        """What the work returned, once it has (or what it raised, raised again)."""
        self._thread.join()
        value, raised = self._outcome
        if raised is not None:
            raise raised
        return value

    def popen(self, cmd, **popen) -> subprocess.Popen:
        """subprocess.Popen, the process stopped with the session if it still runs then."""
        if self.stopping.is_set():
            raise RuntimeError(f"the session ended before {self.name} started")
        proc = subprocess.Popen(cmd, **popen)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        """Kill what still runs, wait for the thread, then `on_close(self)`."""
        self.stopping.set()
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        self._thread.join()
        if self.on_close is not None:
            self.on_close(self)

    def _run(self) -> None:
        try:
            self._outcome = (self.work(self), None)
        except BaseException as raised:  # (pytest's skip too) handed to result()
            self._outcome = (None, raised)


def start_smoke(root) -> Early:
    """The smoke experiment's `snakemake all` (.test/config/config.yaml, real packaged models:
    tests/workflow/test_smoke_experiment.py) in the folder `root`: (root, the finished run)."""
    from harness import ROOT, run_snakemake

    smoke = ROOT / ".test/config/config.yaml"

    def work(early: Early):
        return root, run_snakemake(root, "all", configfile=smoke, timeout=1800, start=early.popen)

    return Early("smoke", work).start()
