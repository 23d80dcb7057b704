"""Logging for workflow jobs: everything a job prints goes to its Snakemake log file."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator

# the two lines every job's log ends with, read by bench/bench_run.py: the process's CPU time
# when the stage was ready to work (interpreter, imports, model or state loading) and in all
READY = "ready after %.3f CPU-s (interpreter, imports, loading)"
CPU = "job CPU %.3f s"
_ready_at: list[float] = []


class Progress:
    """Progress of a long loop as plain log lines, for a log file (no carriage returns): how far,
    how long so far and about how long is left, at most one line every `every` seconds, and one
    at the end."""

    def __init__(self, total: int, what: str, unit: str, every: float = 30.0):
        self.total, self.what, self.unit, self.every = total, what, unit, every
        self.done = 0
        self.started = self.logged = time.perf_counter()

    def update(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        if self.done >= self.total or now - self.logged >= self.every:
            self.logged = now
            elapsed = now - self.started
            left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
            logging.getLogger("jtc").info(
                "%s: %d/%d %s (%.0f%%), %.0f s, about %.0f s left",
                self.what,
                self.done,
                self.total,
                self.unit,
                100 * self.done / max(1, self.total),
                elapsed,
                left,
            )


def ready() -> None:
    """Mark the end of a job's fixed cost: what comes after is the stage's own work. Called by
    the stage functions once their imports and inputs are loaded (the first call counts)."""
    if not _ready_at:
        _ready_at.append(time.process_time())
        logging.getLogger("jtc").info(READY, _ready_at[0])


@contextlib.contextmanager
def job_log(path: str | None) -> Iterator[None]:
    """Send logging records and stderr (warnings) to `path` for the block. Third-party
    progress bars (transformers' weight loading and GGUF conversion) are switched off: in a log
    file they are carriage-return noise; jobs log their own progress (Progress)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if not path:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        yield
        return
    entered = time.process_time()
    _ready_at.clear()
    with open(path, "a", buffering=1) as handle:
        handler = logging.StreamHandler(handle)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        old_stderr, sys.stderr = sys.stderr, handle
        try:
            yield
            log = logging.getLogger("jtc")
            if not _ready_at:  # a stage with no marked loading: its start-up is its fixed cost
                log.info(READY, entered)
            log.info(CPU, time.process_time())
            loaded = sorted(m for m in sys.modules if m == "jtc" or m.startswith("jtc."))
            log.info("jtc modules loaded: %s", " ".join(loaded))
        except BaseException:
            logging.getLogger("jtc").exception("job failed")
            raise
        finally:
            sys.stderr = old_stderr
            root.removeHandler(handler)
