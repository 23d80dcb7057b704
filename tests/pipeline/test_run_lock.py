"""One run at a time in a folder (jtc.pipeline.locks.take_run_lock, run_start): a run lock held by
another process refuses the next one with that process's PID and the `kill` command, and goes
with the process; locks that jobs of a killed run still hold refuse a run (not a dry run) with
their names, never with Snakemake's advice to --unlock. Plain processes, no Snakemake."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import waits

from jtc.pipeline import locks

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="reads /proc (Linux only)"
)

# a process that takes the run lock of the folder argv[1], says so in argv[2] and waits
HOLDER = """
import sys, time
from pathlib import Path
from jtc.pipeline.locks import take_run_lock
assert take_run_lock(sys.argv[1]) is None
Path(sys.argv[2]).write_text("held")
time.sleep(60)
"""
SLEEP = "import time; time.sleep(60)"


def wait_for(condition, seconds=30.0, what="the helper process"):
    """Until `condition()` holds: `seconds` on an idle machine, stretched (waits.py)."""
    waits.wait_for(condition, seconds, what, step=0.02)


@pytest.fixture
def folder(tmp_path):
    yield tmp_path
    locks.release_run_lock()


def test_a_held_run_lock_refuses_the_next_run_until_its_process_ends(folder):
    ready = folder / "ready"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), str(ready)])
    try:
        wait_for(ready.exists, what="the holder to take the run lock")
        message = locks.take_run_lock(folder)
        assert message.startswith("jtc: another run works in this folder")
        assert f"PID {holder.pid}: the run that holds the lock" in message
        assert f"  kill {holder.pid}\n" in message and "--unlock" not in message
        notes, refused = locks.run_start(folder, dry_run=False)
        assert notes == [] and refused == message
        assert locks.run_start(folder, dry_run=True) == ([], None)  # a dry run plans
    finally:
        holder.kill()
        holder.wait()
    assert locks.take_run_lock(folder) is None  # the lock went with its process
    assert (folder / locks.RUN_LOCK).read_text().split("\n")[0] == str(os.getpid())
    assert locks.take_run_lock(folder) is None  # held already: taken once


def test_locks_that_jobs_of_a_killed_run_hold_refuse_a_run_not_a_dry_run(folder):
    (folder / ".snakemake" / "locks").mkdir(parents=True)
    (folder / ".snakemake" / "locks" / "0.output.lock").write_text("results/x\n")
    job = subprocess.Popen(
        [sys.executable, "-c", SLEEP, str(folder / "workflow/scripts/fit_map.py")], cwd=folder
    )
    try:
        wait_for(lambda: locks.workers_in(folder), what="the job to be seen working")
        notes, held = locks.run_start(folder, dry_run=True)
        assert held is None and f"PID {job.pid}: job fit_map" in notes[-1]
        notes, held = locks.run_start(folder, dry_run=False)
        assert notes == [] and f"PID {job.pid}: job fit_map" in held
        assert f"  kill {job.pid}\n" in held
    finally:
        job.kill()
        job.wait()
    notes, held = locks.run_start(folder, dry_run=False)  # nothing works here: lock removed
    lock = folder / ".snakemake" / "locks" / "0.output.lock"
    assert held is None and notes == [
        f"jtc: removed a stale lock left by an interrupted run: {lock}"
    ]


def test_a_pid_left_by_an_earlier_holder_that_is_gone_is_not_named(folder):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], text=True,
                          capture_output=True, check=True).stdout.strip()  # fmt: skip
    path = folder / "lock"
    path.write_text(f"{gone}\nsnakemake all\n")
    with open(path) as handle:
        assert locks._holder(handle, wait=0.2) is None
    path.write_text(f"{os.getpid()}\n")
    with open(path) as handle:
        assert locks._holder(handle, wait=0.2) == os.getpid()
