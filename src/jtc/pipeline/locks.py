"""Stale Snakemake locks: a run killed with SIGKILL (or a lost node) cannot remove its locks,
and the next run would refuse to start until `snakemake --unlock`. The workflow removes them
while it plans when no other Snakemake process or job on this machine works in the same folder.
When some do (a run still going, or the jobs of a killed run that go on by themselves),
`held_lock_message` says which, and how to stop them, instead of Snakemake's advice to
`--unlock` (which would let them write into the new run's files).

Two runs started in the same folder at the same moment both find no lock (Snakemake checks for
its locks, then writes them, after planning), so the loser would get only Snakemake's advice to
`--unlock`. jtc's own run lock closes that gap: `take_run_lock`, called while the Snakefile is
read, takes an exclusive flock on .snakemake/jtc-run.lock, held until the process ends (the
kernel releases it however the process ends, SIGKILL included, so it is never stale); a second
run finds it taken and stops at once with `running_message` (the run that holds it, its jobs,
the `kill` command), before Snakemake's lock is ever tried.

Linux only (it reads /proc); elsewhere nothing is removed and Snakemake's own message stands.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

try:
    import fcntl
except ImportError:  # not POSIX: no run lock, Snakemake's own lock alone
    fcntl = None  # type: ignore[assignment]

RUN_LOCK = Path(".snakemake", "jtc-run.lock")  # under the run's folder
_HELD: list[IO[str]] = []  # the run lock this process holds, open for its life

# a job's script as Snakemake runs it (a copy, .snakemake/scripts/tmpXXXXXXXX.NAME.py) or as a
# user would (workflow/scripts/NAME.py); in jtc NAME is the rule's name
_SCRIPT = re.compile(r"(?:\.snakemake/scripts/tmp[A-Za-z0-9_]+\.|workflow/scripts/)([^/]+)\.py$")
_SHELLS = {"sh", "bash", "dash", "zsh"}


def _ancestors() -> set[int]:
    """This process and its parents (a `snakemake` command may be a wrapper around us)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return pids


def _others() -> Iterator[tuple[int, bytes, Path]]:
    """Every other process (not this one or its parents): PID, command line, working folder."""
    mine = _ancestors()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        yield int(entry.name), cmdline, cwd


def other_snakemake_in(folder: Path) -> list[int]:
    """PIDs of other Snakemake processes whose working folder is `folder`."""
    folder = folder.resolve()
    return [pid for pid, cmdline, cwd in _others() if b"snakemake" in cmdline and cwd == folder]


@dataclass(frozen=True)
class Worker:
    """A process of a Snakemake run working in a folder."""

    pid: int
    kind: str  # "run": a Snakemake run; "job": a job's script, or Snakemake running one job
    name: str  # a job's rule (its script's name); "snakemake" for a run
    command: str  # its command line
    log: str | None  # a job's log file (under the folder's logs/), if it has one open
    parent: int | None  # the run it belongs to, while that run is alive


def _classify(argv: list[str]) -> tuple[str, str] | None:
    """(kind, name) of a command line; None for a process that is neither a Snakemake process
    nor a job's script (a shell that only starts one is not counted: its child is)."""
    if not argv or (Path(argv[0]).name in _SHELLS and argv[1:2] == ["-c"]):
        return None
    pairs = list(zip(argv, argv[1:] + [""], strict=True))
    if any(Path(a).name == "snakemake" or (a, b) == ("-m", "snakemake") for a, b in pairs):
        options = dict(pairs)
        if options.get("--mode") in ("subprocess", "remote"):  # Snakemake running one job
            return "job", options.get("--target-jobs", "").split(":", 1)[0] or "?"
        return "run", "snakemake"
    for arg in argv:
        match = _SCRIPT.search(arg)
        if match:
            return "job", match.group(1)
    return None


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _open_log(pid: int, logs: Path) -> str | None:
    """The log file under `logs` that the process has open (a jtc job writes its own)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return None
    for fd in fds:
        try:
            target = Path(os.readlink(fd))
        except OSError:
            continue
        if target.suffix == ".log" and target.is_relative_to(logs):
            return str(target.relative_to(logs.parent))
    return None


def workers_in(folder: str | os.PathLike = ".") -> list[Worker]:
    """Other Snakemake runs and job processes working in `folder` (their working folder is
    `folder`, or a shadow folder in its .snakemake/), by PID; a job's `parent` is the run it
    belongs to when that run is among them (None: its run is gone)."""
    if not Path("/proc/self").exists():
        return []
    folder = Path(folder).resolve()
    shadow = folder / ".snakemake"
    found = []
    for pid, cmdline, cwd in _others():
        if cwd != folder and not cwd.is_relative_to(shadow):
            continue
        argv = [a.decode(errors="replace") for a in cmdline.split(b"\0") if a]
        kind_name = _classify(argv)
        if kind_name is not None:
            found.append((pid, *kind_name, " ".join(argv)))
    runs = {pid for pid, kind, _, _ in found if kind == "run"}
    workers = []
    for pid, kind, name, command in sorted(found):
        parent, ancestor = None, _parent_of(pid)
        seen = {pid}
        while kind == "job" and ancestor and ancestor > 1 and ancestor not in seen:
            if ancestor in runs:
                parent = ancestor
                break
            seen.add(ancestor)
            ancestor = _parent_of(ancestor)
        log = _open_log(pid, folder / "logs") if kind == "job" else None
        workers.append(Worker(pid, kind, name, command, log, parent))
    return workers


def _line(worker: Worker, indent: str = "  ") -> str:
    if worker.kind == "run":
        return f"{indent}PID {worker.pid}: a Snakemake run: {worker.command}"
    log = f" (log {worker.log})" if worker.log else ""
    return f"{indent}PID {worker.pid}: job {worker.name}{log}"


def held_lock_message(folder: str | os.PathLike = ".") -> str | None:
    """What keeps `folder` locked, when it is locked and other Snakemake runs or jobs of an
    earlier run still work in it: which processes (PID, rule, log), and the `kill` command that
    stops them, to wait for or use instead of `--unlock`; None when nothing is locked or no
    such process is found (then Snakemake's own message stands)."""
    locks = Path(folder).resolve() / ".snakemake" / "locks"
    if not any(locks.glob("*.lock")):
        return None
    workers = workers_in(folder)
    if not workers:
        return None
    lines = [f"jtc: this folder is locked ({locks}) and these processes still work in it:"]
    for run in (w for w in workers if w.kind == "run"):
        lines.append(_line(run))
        lines += [_line(w, "    ") for w in workers if w.parent == run.pid]
    orphans = [w for w in workers if w.kind == "job" and w.parent is None]
    if orphans:
        lines.append("  jobs of an earlier run that is gone (killed?), still running:")
        lines += [_line(w, "    ") for w in orphans]
    lines += [
        "Snakemake refuses to start a run here while the lock stays, and removing it with "
        "--unlock while they run would let them go on writing into the new run's files. Wait "
        "for them to end (a run removes its lock; the lock of a run that is gone is removed "
        "at the next start), or stop them:",
        "  kill " + " ".join(str(w.pid) for w in workers),
        "then run the same command again.",
    ]
    return "\n".join(lines)


def clear_stale_locks(folder: str | os.PathLike = ".") -> list[Path]:
    """Remove `.snakemake/locks/*.lock` in `folder` if no other Snakemake process or job works
    there; return what was removed."""
    folder = Path(folder)
    locks = sorted((folder / ".snakemake" / "locks").glob("*.lock"))
    if (
        not locks
        or not Path("/proc/self").exists()
        or other_snakemake_in(folder)
        or workers_in(folder)
    ):
        return []
    for lock in locks:
        lock.unlink(missing_ok=True)
    return locks


def lock_notes(folder: str | os.PathLike = ".") -> list[str]:
    """As a run starts: remove the locks a run killed with SIGKILL left, when no other Snakemake
    works here (a plain rerun then resumes), each said in a line; and name the processes that
    keep the locks still held and how to stop them (held_lock_message), before Snakemake's own
    advice to --unlock (unsafe while they run)."""
    notes = [
        f"jtc: removed a stale lock left by an interrupted run: {lock}"
        for lock in clear_stale_locks(folder)
    ]
    held = held_lock_message(folder)
    return notes + ([held] if held else [])


def take_run_lock(folder: str | os.PathLike = ".") -> str | None:
    """Take the folder's run lock (an exclusive flock on RUN_LOCK, non-blocking) and hold it
    until this process ends, writing this process's PID and command line into it; None when
    taken (or held already, or not POSIX). When another process holds it: jtc's message naming
    that run (running_message), and nothing is taken."""
    if fcntl is None:
        return None
    path = Path(folder) / RUN_LOCK
    if any(Path(h.name).resolve() == path.resolve() for h in _HELD):
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held open for the life of the process
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _holder(handle)
        handle.close()
        return running_message(folder, holder)
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n{' '.join(sys.argv)}\n")
    handle.flush()
    _HELD.append(handle)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def release_run_lock() -> None:
    """Let go of the run lock this process holds (it goes with the process anyway)."""
    while _HELD:
        _HELD.pop().close()


def _holder(handle: IO[str], wait: float = 2.0) -> int | None:
    """The PID the run lock's holder wrote into it (None if none within `wait` seconds: it
    writes it right after taking the lock; until then the file may still name an earlier
    holder, gone since)."""
    deadline = time.monotonic() + wait
    while True:
        handle.seek(0)
        first = handle.readline().strip()
        if first.isdigit() and _alive(int(first)):
            return int(first)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def running_message(folder: str | os.PathLike, holder: int | None) -> str:
    """Why a run cannot start in `folder`: another run holds its run lock (PID `holder`, None:
    unknown); that run and its jobs by PID, and how to go on (wait, or the `kill` command)."""
    workers = workers_in(folder)
    runs = [w for w in workers if w.kind == "run"]
    mine = [w for w in runs if w.pid == holder] or runs
    lines = [
        f"jtc: another run works in this folder ({Path(folder).resolve()}): it holds "
        f"{RUN_LOCK} and would write into the same files as this one, so this run does not "
        "start. It:"
    ]
    if holder is not None and holder not in {w.pid for w in mine}:
        lines.append(f"  PID {holder}: the run that holds the lock")
    for run in mine:
        lines.append(_line(run))
        lines += [_line(w, "    ") for w in workers if w.parent == run.pid]
    pids = [holder] if holder is not None else []
    pids += [w.pid for w in mine if w.pid != holder]
    pids += [w.pid for w in workers if w.parent in {r.pid for r in mine}]
    lines += [
        "Wait for it to end (its lock goes with it), then run the same command again; or stop "
        "it and its jobs:",
        "  kill " + " ".join(str(p) for p in pids) if pids else "  (its PID is unknown)",
        "then run the same command again (a run stopped mid-job resumes where it was).",
    ]
    return "\n".join(lines)


def run_start(folder: str | os.PathLike = ".", *, dry_run: bool) -> tuple[list[str], str | None]:
    """As a run starts (while the Snakefile is read): (notes to print, why it must not start).
    A run takes the folder's run lock (take_run_lock; refused while another run holds it),
    then the locks a killed run left are removed (lock_notes); locks that processes still
    working here hold refuse the run with their names and the `kill` command
    (held_lock_message), never Snakemake's advice to --unlock. A dry run writes nothing: it
    takes no lock and is refused nothing, the processes are only named."""
    if not dry_run:
        running = take_run_lock(folder)
        if running:
            return [], running
    notes = [
        f"jtc: removed a stale lock left by an interrupted run: {lock}"
        for lock in clear_stale_locks(folder)
    ]
    held = held_lock_message(folder)
    if held and not dry_run:
        return notes, held
    return notes + ([held] if held else []), None
