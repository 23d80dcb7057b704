"""Jobs that end with their run: a Snakemake process killed with SIGKILL (or by the OOM killer)
cannot stop its jobs, and they would go on writing into the workflow folder while a rerun is
refused (its lock is still held) or, after `--unlock`, while the rerun makes the same files.

The main Snakemake process marks the run in its environment (`mark_run`, at `onstart`, for jobs
that run on this machine); every job inherits the mark and, at its start, calls
`end_with_parent_run`: a daemon thread checks twice a second that the marked process is still
alive, and when it is gone the job says so in its log, kills the processes it started and exits.

The mark names the process by its PID, its start time (a PID reused by a new process has
another) and its host and PID namespace (a job that runs elsewhere, on a cluster node or in a
container with its own PIDs, never takes a PID of another machine for the run's). Where the mark
is missing, names another host or namespace, or on a system without /proc, nothing is done.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

ENV = "JTC_RUN"  # "host=NAME pid=PID start=TICKS pidns=pid:[INODE]"
POLL_S = 0.5
EXIT_CODE = 1

_started: list[threading.Thread] = []
_lock = threading.Lock()


@dataclass(frozen=True)
class Run:
    """The process that started a run, as `mark_run` wrote it."""

    host: str
    pid: int
    start: int
    pidns: str

    def __str__(self) -> str:
        return f"host={self.host} pid={self.pid} start={self.start} pidns={self.pidns}"

    @classmethod
    def parse(cls, text: str) -> Run | None:
        try:
            fields = dict(item.split("=", 1) for item in text.split())
            return cls(fields["host"], int(fields["pid"]), int(fields["start"]), fields["pidns"])
        except (KeyError, ValueError):
            return None


def _linux() -> bool:
    return sys.platform.startswith("linux") and Path("/proc/self/stat").exists()


def _stat(pid: int | str) -> tuple[str, int, int] | None:
    """A process's state letter, parent PID and start time (clock ticks after boot), or None
    when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text.rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
    return fields[0], int(fields[1]), int(fields[19])


def _pidns() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def this_run() -> Run | None:
    """This process as the run of its jobs; None where it cannot be named (no /proc)."""
    if not _linux():
        return None
    stat, pidns = _stat("self"), _pidns()
    if stat is None or pidns is None:
        return None
    return Run(os.uname().nodename, os.getpid(), stat[2], pidns)


def mark_run(environ: MutableMapping[str, str] | None = None) -> Run | None:
    """Mark this process as the run its jobs end with: set JTC_RUN in `environ` (os.environ by
    default, which the jobs inherit). Where the process cannot be named, any mark inherited from
    elsewhere is removed (jobs must not watch another run) and None is returned."""
    environ = os.environ if environ is None else environ
    run = this_run()
    if run is None:
        environ.pop(ENV, None)
    else:
        environ[ENV] = str(run)
    return run


def alive(run: Run) -> bool:
    """Whether the run's process still runs (a zombie, killed but not yet reaped, does not)."""
    stat = _stat(run.pid)
    return stat is not None and stat[2] == run.start and stat[0] not in "ZX"


def watched_run(environ: MutableMapping[str, str] | None = None) -> Run | None:
    """The run this process should end with: the mark in `environ`, if it names a process that
    this process could see (same host, same PID namespace); else None."""
    environ = os.environ if environ is None else environ
    run = Run.parse(environ.get(ENV, ""))
    if run is None or not _linux():
        return None
    if run.host != os.uname().nodename or run.pidns != _pidns() or run.pid == os.getpid():
        return None
    return run


def _descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs, children first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(entry.name)
            if stat is not None:
                children.setdefault(stat[1], []).append(int(entry.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def _end(run: Run) -> None:
    """Say why in the job's log, kill what the job started, and exit without cleaning up (as a
    killed job would: a partial output is only ever a temporary file)."""
    message = (
        f"the Snakemake process that started this job (PID {run.pid} on {run.host}) is gone "
        f"(killed?): ending this job (PID {os.getpid()}) so that it does not go on writing into "
        "the workflow folder; rerun the same command to resume"
    )
    root = logging.getLogger()
    if root.handlers:  # the job's log (jtc.logs.job_log)
        logging.getLogger("jtc.pipeline.watchdog").error(message)
        for handler in root.handlers:
            handler.flush()
    else:
        print(f"jtc: {message}", file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    for child in _descendants(os.getpid()):
        try:
            os.kill(child, signal.SIGKILL)
        except OSError:
            pass
    os._exit(EXIT_CODE)


def _watch(run: Run, poll_s: float) -> None:
    while alive(run):
        time.sleep(poll_s)
    _end(run)


def end_with_parent_run(
    environ: MutableMapping[str, str] | None = None, poll_s: float = POLL_S
) -> threading.Thread | None:
    """Called by a job at its start: end this process (and what it started) within about
    `poll_s` seconds once the run that started it is gone. Does nothing without a mark this
    process can check (see `watched_run`) and when already watching; returns the watching
    thread, or None."""
    run = watched_run(environ)
    if run is None:
        return None
    with _lock:
        if _started and _started[0].is_alive():
            return None
        if not alive(run):  # gone before the job began
            _end(run)
        thread = threading.Thread(
            target=_watch, args=(run, poll_s), name="jtc-watchdog", daemon=True
        )
        thread.start()
        _started[:] = [thread]
    return thread
