"""The files of a folder output (a cached model, a states folder, a pruned checkpoint), each
recorded in the folder's stamp.json as it is written: its size, its mtime_ns and the sha256 of
its bytes (jtc.files.stamps.write_folder_stamp). Two checks read the record:

- `quick` (while the workflow plans, and as a job that reads the folder starts): every file's
  size; the sha256 of a JSON file (small: what planning reads of a folder) and of any file whose
  mtime differs from the record (written since, or copied without its times: hashed, and
  when the bytes are the same given the recorded mtime back, as `cp -a` would have kept it, so
  that the next check does not read it again), each once a process. A no-op planning reads no
  weights.
- `full` (what reads the whole folder anyway, such as `snakemake pruned` handing over its
  checkpoints): the sha256 of every file, whatever its mtime.

So a byte changed by an ordinary write (which sets the mtime) is found while planning; one
changed with its mtime put back (`touch -r`) by the first full check. Standard library only:
the workflow imports it while it plans.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SIZE, MTIME, SHA256 = "bytes", "mtime_ns", "sha256"
ALWAYS_HASHED = ".json"  # small files that planning reads: hashed by every check

# sha256 already computed in this process, by (path, inode, size, mtime_ns): a folder copied
# without its times is hashed once per snakemake call, not once per check
_hashed: dict[tuple[str, int, int, int], str] = {}


def file_sha256(path: str | Path) -> str:
    """The sha256 of a whole file, read 1 MiB at a time into one buffer."""
    digest = hashlib.sha256()
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while n := handle.readinto(buffer):
            digest.update(view[:n])
    return digest.hexdigest()


def _sha256(path: Path, stat: os.stat_result, fresh: bool) -> str:
    """A file's sha256; `fresh`: read now, else possibly the one read earlier in this process
    for the same file, size and mtime."""
    key = (str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if fresh or key not in _hashed:
        _hashed[key] = file_sha256(path)
    return _hashed[key]


def record(folder: str | Path, leave_out: str) -> dict[str, dict[str, Any]]:
    """{path relative to the folder: {bytes, mtime_ns, sha256}} of every file under `folder`
    but `leave_out` (the stamp itself)."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != leave_out)
    recorded = {}
    for path in files:
        stat = path.stat()
        recorded[path.relative_to(folder).as_posix()] = {
            SIZE: stat.st_size,
            MTIME: stat.st_mtime_ns,
            SHA256: _sha256(path, stat, fresh=True),
        }
    return recorded


def difference(path: Path, entry: Mapping[str, Any] | str, full: bool) -> str | None:
    """How a file differs from its record (`entry`; a plain sha256 string in the stamps of an
    older jtc, which recorded its JSON files only), or None where it does not."""
    entry = {SHA256: entry} if isinstance(entry, str) else entry
    try:
        stat = path.stat()
    except OSError:
        return "it is missing"
    if not path.is_file():
        return "it is not a file"
    if SIZE in entry and stat.st_size != entry[SIZE]:
        return f"it has {stat.st_size} bytes, {entry[SIZE]} when its job wrote it"
    moved = entry.get(MTIME) is not None and entry[MTIME] != stat.st_mtime_ns
    hashed = full or moved or path.suffix == ALWAYS_HASHED
    if hashed and _sha256(path, stat, fresh=full) != entry.get(SHA256):
        said = "its sha256 differs from the one recorded when its job wrote it"
        if entry.get(MTIME) is None:
            return said
        same = entry[MTIME] == stat.st_mtime_ns
        return said + (" (its size and mtime are those recorded)" if same else " (its mtime too)")
    if moved:  # the same bytes (a copy without its times): the mtime recorded, not read again
        with contextlib.suppress(OSError):  # a folder of someone else's: read at every check
            os.utime(path, ns=(stat.st_atime_ns, entry[MTIME]))
    return None


def differences(
    folder: str | Path, files: Mapping[str, Any], full: bool = False
) -> list[tuple[Path, str]]:
    """(file, how it differs) for each recorded file of `folder` that is not as recorded:
    `full` hashes every file, else only those `quick` does (see the module's docstring)."""
    found = []
    for name, entry in sorted(files.items()):
        path = Path(folder, name)
        why = difference(path, entry, full)
        if why:
            found.append((path, why))
    return found
