"""Two runs in one folder: the second, whether started later or at the same moment, stops at
once with jtc's message (the other run's PID, the `kill` command), never Snakemake's advice to
--unlock; a dry run beside a working run plans as usual. Each run that must keep working waits
for a file the test never writes (Snakemake's --wait-for-files, after the Snakefile is read and
the run lock taken), so which run holds the lock never depends on timing."""

import os
import signal
import subprocess

import pytest
import waits
from harness import link_inputs, read_config, run_snakemake, start_snakemake, write_config

from jtc.pipeline.locks import RUN_LOCK

pytestmark = pytest.mark.workflow

UNLOCK = "--unlock"


def waiting(work):
    """A run that holds the folder's run lock and waits (for a file nobody writes)."""
    never = work / "never-written"
    return start_snakemake(
        work,
        "all",
        "--wait-for-files",
        never,
        "--latency-wait",
        "600",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )


def lock_holder(work, proc, seconds=120.0):
    """The PID written into the run lock, once `proc` has taken it (Snakemake started and the
    Snakefile read: `seconds` on an idle machine, stretched on a busy one: waits.py)."""

    def taken():
        assert proc.poll() is None, proc.communicate()
        text = (work / RUN_LOCK).read_text() if (work / RUN_LOCK).exists() else ""
        return text.split("\n")[0] == str(proc.pid)

    waits.wait_for(taken, seconds, "the first run to take the run lock")
    return proc.pid


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.communicate()


def refused(output, holder):
    """`output` is jtc's refusal naming `holder`, without Snakemake's --unlock advice."""
    assert "jtc: another run works in this folder" in output, output[-3000:]
    assert f"PID {holder}" in output and f"kill {holder}" in output
    assert UNLOCK not in output


@pytest.fixture
def work(tiny_project, tmp_path):
    folder = link_inputs(tiny_project, tmp_path / "work")
    write_config(folder, read_config(tiny_project))
    return folder


def test_a_run_started_while_another_works_gets_jtcs_message(work):
    first = waiting(work)
    try:
        holder = lock_holder(work, first)
        second = run_snakemake(work, "all", check=False)
        assert second.returncode != 0
        refused(second.stdout + second.stderr, holder)
        assert not (work / "results").exists()  # it started nothing
        planned = run_snakemake(work, "all", "-n", check=False)  # a dry run plans as usual
        assert planned.returncode == 0, planned.stderr[-3000:]
        assert first.poll() is None  # the first run still waits
    finally:
        stop(first)
    # once it is gone, a run starts (the lock went with it): a dry run is enough to show it
    again = run_snakemake(work, "all", "--list-target-rules", check=False)
    assert again.returncode == 0, again.stderr[-3000:]


def test_two_runs_started_at_once_one_works_the_other_gets_jtcs_message(work):
    runs = [waiting(work), waiting(work)]
    try:
        # the loser ends by itself, the winner waits
        waits.wait_for(
            lambda: any(p.poll() is not None for p in runs), 120, "one of the two runs to end"
        )
        (loser,) = [p for p in runs if p.poll() is not None]
        (winner,) = [p for p in runs if p is not loser]
        out, err = loser.communicate()
        assert loser.returncode != 0
        refused(out + err, winner.pid)
        assert winner.poll() is None
    finally:
        for proc in runs:
            stop(proc)
