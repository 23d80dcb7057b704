"""Stale Snakemake locks: a run killed with SIGKILL (or a lost node) cannot remove its locks,
and the next run would refuse to start until `snakemake --unlock`. The workflow removes them
while it plans when no other Snakemake process on this machine works in the same folder.

Linux only (it reads /proc); elsewhere nothing is removed and Snakemake's own message stands.
"""

from __future__ import annotations

import os
from pathlib import Path


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


def other_snakemake_in(folder: Path) -> list[int]:
    """PIDs of other Snakemake processes whose working folder is `folder`."""
    folder = folder.resolve()
    mine = _ancestors()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if b"snakemake" in cmdline and cwd == folder:
            found.append(int(entry.name))
    return found


def clear_stale_locks(folder: str | os.PathLike = ".") -> list[Path]:
    """Remove `.snakemake/locks/*.lock` in `folder` if no other Snakemake process works there;
    return what was removed."""
    folder = Path(folder)
    locks = sorted((folder / ".snakemake" / "locks").glob("*.lock"))
    if not locks or not Path("/proc/self").exists() or other_snakemake_in(folder):
        return []
    for lock in locks:
        lock.unlink(missing_ok=True)
    return locks
