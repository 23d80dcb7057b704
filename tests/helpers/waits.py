"""Waits that a busy machine cannot cross: every limit on how long a test waits for something
(a process to end, a file to appear, a job to start) is a number of seconds on an idle machine,
stretched by how busy the machine is while it waits, and a wait that still runs out names what
it waited for, how long it waited and what it allowed.

How busy: the 1-minute load average per CPU (at least 1), the largest seen while waiting, so
that a machine that gets busy during a long wait (another workflow starting beside the tests)
stretches it too. Where a test has a measured baseline of the work it waits for (the same
workflow run locally, a reference run), it passes a multiple of that as `seconds`."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
POLL_S = 5.0  # how often a long wait reads the load again


def busy() -> float:
    """How many times over this machine's CPUs are asked for now: the 1-minute load average
    per CPU, at least 1 (1 on a machine where it cannot be read)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


class Patience:
    """A wait of `seconds` on an idle machine for `what`, stretched by the busiest load seen
    since it began (busy())."""

    def __init__(self, seconds: float, what: str):
        self.seconds, self.what = float(seconds), what
        self.start = time.monotonic()
        self.load = busy()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def allowed(self) -> float:
        return self.seconds * self.load

    def left(self) -> float:
        """Seconds left (the load read again first); 0 or less: the wait ran out."""
        self.load = max(self.load, busy())
        return self.allowed() - self.elapsed()

    def message(self) -> str:
        return (
            f"waited {self.elapsed():.0f} s for {self.what}; allowed {self.allowed():.0f} s: "
            f"{self.seconds:.0f} s on an idle machine x {self.load:.1f}, the busiest load per CPU "
            "seen while waiting"
        )


def scaled(seconds: float) -> float:
    """`seconds` on an idle machine, stretched by how busy this one is now (for a limit given
    once, such as subprocess.run's timeout)."""
    return seconds * busy()


def wait_for(condition: Callable[[], T], seconds: float, what: str, step: float = 0.1) -> T:
    """Call `condition` every `step` seconds until it returns something true, and return that;
    an AssertionError naming `what` once `seconds` (stretched, Patience) have passed."""
    patience = Patience(seconds, what)
    while not (result := condition()):
        if patience.left() <= 0:
            raise AssertionError(patience.message())
        time.sleep(step)
    return result


def _text(output) -> str:
    if output is None:
        return ""
    return output.decode(errors="replace") if isinstance(output, bytes) else output


def finish(proc: subprocess.Popen, seconds: float, what: str, tail: int = 4000):
    """proc.communicate(): (stdout, stderr) once `proc` has ended. Once `seconds` (stretched,
    Patience) have passed, the process is killed and an AssertionError names `what` and shows
    the tails of what it wrote."""
    patience = Patience(seconds, what)
    while True:
        try:
            return proc.communicate(timeout=max(0.1, min(POLL_S, patience.left())))
        except subprocess.TimeoutExpired:
            if patience.left() > 0:
                continue
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(
            f"{patience.message()}; killed it\n--- stdout (tail) ---\n{_text(out)[-tail:]}\n"
            f"--- stderr (tail) ---\n{_text(err)[-tail:]}"
        )


def run(cmd: list[str], seconds: float, what: str | None = None, start=subprocess.Popen, **popen):
    """subprocess.run(cmd, capture_output=True, **popen) with finish()'s limit: the
    CompletedProcess. `start` starts the process (subprocess.Popen, or early.Early.popen)."""
    proc = start(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
    out, err = finish(proc, seconds, what or " ".join(map(str, cmd)))
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
