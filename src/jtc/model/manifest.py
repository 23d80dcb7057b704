"""A cached model folder's manifest: every file with its size and checksum, checked before the
folder is used (standard library only, so that jobs which read only the head need no
transformers)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

from jtc.files.io import CorruptFileError, read_json

MANIFEST = "manifest.json"  # {file: {"bytes": size, "crc32": checksum}} of a cached model


def _crc32(path: Path) -> str:
    value = 0
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 24):
            value = zlib.crc32(chunk, value)
    return f"{value:08x}"


def write_manifest(folder: Path) -> None:
    """List every file of a cached model with its size and checksum, in manifest.json."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != MANIFEST)
    manifest = {p.name: {"bytes": p.stat().st_size, "crc32": _crc32(p)} for p in files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def check_manifest(folder: str | Path) -> None:
    """Refuse a cached model whose files differ from its manifest (damaged, truncated, edited),
    naming the file and the command that rebuilds the cache."""
    folder = Path(folder)
    rebuild = (
        f"delete the folder {folder} and rerun the same snakemake command to cache the model "
        f"again (rm -r {folder})"
    )
    if not (folder / MANIFEST).is_file():
        raise CorruptFileError(
            f"{folder}: no {MANIFEST} (damaged, or cached by an older jtc): {rebuild}"
        )
    for name, want in read_json(folder / MANIFEST).items():
        path = folder / name
        if not path.is_file():
            raise CorruptFileError(f"{path} is missing: {rebuild}")
        if path.stat().st_size != want["bytes"] or _crc32(path) != want["crc32"]:
            raise CorruptFileError(
                f"{path} is damaged (its size or checksum differs from {MANIFEST}): {rebuild}"
            )
