"""The tests' own waits (tests/helpers/waits.py): a limit is seconds on an idle machine stretched
by the load per CPU, and a wait that runs out names what it waited for and what it allowed."""

import subprocess
import sys

import pytest
import waits


def test_the_load_stretches_a_wait_and_never_shortens_it(monkeypatch):
    monkeypatch.setattr(waits.os, "getloadavg", lambda: (6.0, 1.0, 1.0))
    monkeypatch.setattr(waits.os, "cpu_count", lambda: 2)
    assert waits.busy() == 3.0
    assert waits.scaled(10) == 30.0
    patience = waits.Patience(10, "x")
    monkeypatch.setattr(waits.os, "getloadavg", lambda: (0.5, 1.0, 1.0))  # quieter later
    assert waits.busy() == 1.0
    assert patience.left() > 29  # the busiest load seen while waiting counts
    monkeypatch.setattr(waits.os, "getloadavg", lambda: (10.0, 1.0, 1.0))  # busier later
    assert patience.left() > 49
    monkeypatch.setattr(waits.os, "getloadavg", lambda: (_ for _ in ()).throw(OSError()))
    assert waits.busy() == 1.0  # unknown: idle


def test_a_wait_returns_what_it_waited_for_or_names_it(monkeypatch):
    monkeypatch.setattr(waits, "busy", lambda: 1.0)
    values = iter([0, None, "ready"])
    assert waits.wait_for(lambda: next(values), 5, "a value", step=0.01) == "ready"
    with pytest.raises(AssertionError, match=r"waited 0 s for the flag; allowed 0 s: 0 s on an"):
        waits.wait_for(lambda: False, 0.05, "the flag", step=0.01)


def test_a_process_that_outlives_its_wait_is_killed_and_named(monkeypatch):
    monkeypatch.setattr(waits, "busy", lambda: 1.0)
    done = waits.run([sys.executable, "-c", "print('out')"], 60, text=True)
    assert (done.returncode, done.stdout) == (0, "out\n")
    code = "import sys, time; print('started', flush=True); time.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    with pytest.raises(
        AssertionError, match=r"(?s)for the sleeper; allowed 1 s.*killed it.*started"
    ):
        waits.finish(proc, 1, "the sleeper")
    assert proc.returncode is not None
