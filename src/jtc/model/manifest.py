"""A cached model folder's manifest: every file with its size and checksum, checked before the
folder is used (standard library only, so that jobs which read only the head need no
transformers).

A job that loads the whole model checks every file whole (`check_manifest`). A job that reads
only a few tensors of the weights (the decoder head, a few hundred MB of a 7B model's 13 GB)
checks the other files whole, the weights file's size and header, and then only the tensors it
reads, each against the checksum recorded for it when the model was cached (`Manifest`).

The manifest is the model's own: written by every cache_model (in a workflow job or not) and
checked by every load, so it answers "are the bytes read the ones cached?". A workflow job also
writes the folder's stamp.json (jtc.files.stamps, jtc.files.digests: each file's size, mtime and
sha256), which answers "is this the folder the workflow wrote?" while a run plans, without
reading the weights (their size always, their bytes where their mtime changed). A change that
keeps the size and mtime (a byte flipped, the mtime put back) passes planning and is refused
by the first job that loads the model, here.

A model cached with `models.NAME.cache: reference` holds no weights of its own: its manifest
lists the weights files of its source folder under their names, each with its absolute "path"
(and a "sha256" of the whole file, the file's identity), and every check reads them there, with
the same checks as a cached file's. Such a file moved, deleted or changed is refused, naming it,
what differs and how to recover (put it back, or cache the model again).
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from jtc.files.io import CorruptFileError, read_json
from jtc.files.stamps import rebuild_command

MANIFEST = "manifest.json"  # {file: {"bytes": size, "crc32": checksum, ...}} of a cached model
INFO = "info.json"  # what jtc.model.cache.model_info says of the model
PRUNED_DESCRIPTION = "pruning.json"  # in a pruned checkpoint (jtc.pruning.checkpoint)
EXPECTED = (
    "a cached model folder: results/models/NAME of a finished workflow run (made by its "
    "resolve_model job, e.g. `snakemake results/models/NAME`)"
)
WEIGHTS_SUFFIX = ".safetensors"  # these also get "header_crc32" and "tensors": {name: crc32}
_CHUNK = 1 << 24
HEADER_LIMIT = 100_000_000  # safetensors refuses longer headers


def _chunks(handle: BinaryIO, length: int | None) -> Iterator[bytes]:
    """The next `length` bytes of an open file (None: to the end), in bounded chunks."""
    left = length
    while left is None or left > 0:
        chunk = handle.read(_CHUNK if left is None else min(_CHUNK, left))
        if not chunk:
            return
        yield chunk
        left = None if left is None else left - len(chunk)


def _crc32(path: Path, start: int = 0, length: int | None = None) -> str:
    """The crc32 of `length` bytes of a file from `start` (None: to the end)."""
    value = 0
    with path.open("rb") as handle:
        handle.seek(start)
        for chunk in _chunks(handle, length):
            value = zlib.crc32(chunk, value)
    return f"{value:08x}"


def safetensors_header(path: Path, metadata: bool = False) -> tuple[int, dict]:
    """(the byte where a safetensors file's tensor data starts, its header: {name: {dtype,
    shape, data_offsets}}, with "__metadata__" if `metadata`); CorruptFileError where the
    header cannot be read."""
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise CorruptFileError(f"{path}: too short for a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        if length > path.stat().st_size - 8:
            raise CorruptFileError(f"{path}: its header length runs past the end of the file")
        if length > HEADER_LIMIT:
            raise CorruptFileError(f"{path}: its header length {length} is over safetensors' limit")
        try:
            header = json.loads(handle.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptFileError(f"{path}: its header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise CorruptFileError(f"{path}: its header is not a JSON object")
    if not metadata:
        header.pop("__metadata__", None)
    return 8 + length, header


_header = safetensors_header  # (its name in jtc before jtc.pruning.export_inputs read it too)


def _weights_entry(path: Path, sha256: bool = False) -> dict:
    """The size and checksum of a weights file, of its header, and of each tensor's bytes, in
    one pass over the file (and the whole file's sha256 if `sha256`)."""
    start, header = safetensors_header(path)
    spans = sorted((spec["data_offsets"], name) for name, spec in header.items())
    tensors, whole, at = {}, 0, 0
    digest = hashlib.sha256() if sha256 else None
    with path.open("rb") as handle:

        def feed(length: int | None) -> int:
            """crc32 of the next `length` bytes (None: to the end), fed to the whole's too."""
            nonlocal whole, at
            value = 0
            for chunk in _chunks(handle, length):
                value, whole = zlib.crc32(chunk, value), zlib.crc32(chunk, whole)
                if digest is not None:
                    digest.update(chunk)
                at += len(chunk)
            return value

        header_crc = feed(start)
        for (first, last), name in spans:
            feed(start + first - at)  # a gap between tensors, if any
            tensors[name] = f"{feed(last - first):08x}"
        feed(None)  # anything after the last tensor
    entry = {
        "bytes": path.stat().st_size,
        "crc32": f"{whole:08x}",
        "header_crc32": f"{header_crc:08x}",
        "tensors": dict(sorted(tensors.items())),
    }
    if digest is not None:
        entry["sha256"] = digest.hexdigest()
    return entry


def _referenced_entry(path: Path) -> dict:
    """The entry of a file a cache references in its source folder: a cached file's, with the
    file's absolute path (as the model's loader opens it: a link is not followed, so a hub
    snapshot's file keeps its name) and the whole file's sha256."""
    path = path.absolute()
    if path.suffix == WEIGHTS_SUFFIX:
        entry = _weights_entry(path, sha256=True)
    else:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for chunk in _chunks(handle, None):
                digest.update(chunk)
        entry = {"bytes": path.stat().st_size, "crc32": _crc32(path), "sha256": digest.hexdigest()}
    return {**entry, "path": str(path)}


def write_manifest(folder: Path, referenced: Iterable[Path] = ()) -> None:
    """List every file of a cached model with its size and checksum, in manifest.json; a
    weights file also with the checksums of its header and of each tensor. `referenced`: files
    of the model's source folder that the cache reads in place (models.NAME.cache: reference),
    listed under their names with their absolute paths and sha256."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != MANIFEST)
    manifest = {
        p.name: (
            _weights_entry(p)
            if p.suffix == WEIGHTS_SUFFIX
            else {"bytes": p.stat().st_size, "crc32": _crc32(p)}
        )
        for p in files
    }
    for path in referenced:
        if path.name in manifest:
            raise ValueError(f"{path.name} is both in {folder} and referenced from {path.parent}")
        manifest[path.name] = _referenced_entry(path)
    manifest = dict(sorted(manifest.items()))
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def rebuild_text(folder: str | Path) -> str:
    """How to cache a damaged model again: delete its folder, then the snakemake command that
    makes that folder (the folder of a workflow run's results/models/NAME)."""
    command = rebuild_command(folder)
    how = (
        f"then `{command}` in the folder of its workflow run (with the run's --configfile, if "
        "it had one) caches it again, as does the run's own snakemake command"
        if command
        else "then cache it again as it was made: `snakemake results/models/NAME` in its "
        "workflow run, or jtc.model.cache.cache_model"
    )
    return f"delete the folder {folder} and rerun to cache the model again (rm -r {folder}; {how})"


def _looks_like(names: set[str]) -> str:
    """What a folder that is no jtc model cache seems to hold, from its files' names."""
    if not names:
        return "it is empty"
    if any(n.endswith(".gguf") for n in names):
        return "it holds a GGUF model: a model's source, not its cache"
    if "config.json" in names:
        return "it holds config.json: a Hugging Face model folder, a model's source, not its cache"
    shown = ", ".join(sorted(names)[:5])
    return f"it holds {shown}" + (" and more" if len(names) > 5 else "")


def cache_problem(folder: str | Path, label: str = "the model folder") -> str | None:
    """Why `folder` cannot be read as a jtc model cache (jtc.model.cache.cache_model): it does
    not exist, it is no model cache (a model's source folder, a pruned checkpoint: what to pass
    instead), or it is a damaged one (a file missing, of another size, or a small file whose
    checksum differs: how to cache it again). The weights' bytes are checked as they are loaded
    (check_manifest). None when it is a cache."""
    folder = Path(folder)
    if not folder.exists():
        return f"{label} {folder} does not exist; pass {EXPECTED}"
    if not folder.is_dir():
        return f"{label} {folder} is a file, not a folder; pass {EXPECTED}"
    names = {p.name for p in folder.iterdir() if not p.name.startswith(".")}
    if PRUNED_DESCRIPTION in names:
        return (
            f"{label} {folder} is a pruned checkpoint ({PRUNED_DESCRIPTION}: written by jtc "
            f"prune or `snakemake pruned`), not a model cache; pass the cache of the model to "
            f"prune, {EXPECTED}"
        )
    if MANIFEST not in names and INFO not in names:
        return (
            f"{label} {folder} is not a jtc model cache (it has no {INFO} or {MANIFEST}; "
            f"{_looks_like(names)}); pass {EXPECTED}. To prune a model of your own, add "
            f"it to the config's models (models.NAME.source: {folder}), run `snakemake "
            f"results/models/NAME` and pass that folder"
        )
    if MANIFEST not in names or INFO not in names:
        missing = INFO if MANIFEST in names else MANIFEST
        return (
            f"{label} {folder} is a damaged jtc model cache (it has no {missing}, or was cached "
            f"by an older jtc): {rebuild_text(folder)}"
        )
    try:
        Manifest(folder).check_but_tensors()
    except CorruptFileError as exc:
        return f"{label} {folder} is a damaged jtc model cache: {exc}"
    return None


class Manifest:
    """A cached model folder's manifest, read once, for the checks of a job."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.rebuild = rebuild_text(self.folder)
        if not (self.folder / MANIFEST).is_file():
            raise CorruptFileError(
                f"{self.folder}: no {MANIFEST} (damaged, or cached by an older jtc): {self.rebuild}"
            )
        try:
            self.entries: dict[str, dict] = read_json(self.folder / MANIFEST)
        except CorruptFileError:
            self.entries = None  # type: ignore[assignment]
        if not isinstance(self.entries, dict):
            raise CorruptFileError(f"{self.folder / MANIFEST} is damaged: {self.rebuild}")
        self._checked: set[tuple[str, str]] = set()
        self._headers: dict[str, tuple[int, dict]] = {}  # parsed once a job, by file

    def path(self, name: str) -> Path:
        """Where a listed file is read: in the folder, or where a referenced file's entry says."""
        entry = self.entries.get(name) or {}
        return Path(entry["path"]) if "path" in entry else self.folder / name

    def weights_files(self) -> list[tuple[str, Path]]:
        """(name in the manifest, path) of every weights file, cached or referenced."""
        return [(n, self.path(n)) for n in sorted(self.entries) if n.endswith(WEIGHTS_SUFFIX)]

    def _header(self, name: str) -> tuple[int, dict]:
        if name not in self._headers:
            self._headers[name] = safetensors_header(self.path(name))
        return self._headers[name]

    def _damaged(
        self, name: str, what: str = "its size or checksum", detail: str = ""
    ) -> CorruptFileError:
        """`name`'s file differs from its entry in `what` (`detail`: by how much)."""
        path = self.path(name)
        if "path" in self.entries[name]:
            return CorruptFileError(
                f"{path} has changed since the model was cached ({what} differs from "
                f"{self.folder / MANIFEST}{detail}): {self._referenced(path)}"
            )
        return CorruptFileError(
            f"{path} is damaged ({what} differs from {MANIFEST}): {self.rebuild}"
        )

    def _referenced(self, path: Path) -> str:
        """What a referenced file is and how to recover when it is not as cached."""
        return (
            f"the model cache {self.folder} reads it in place (cache: reference) instead of a "
            "copy of its own; put the original file back at that path, or, to use the source "
            f"folder as it is now, {self.rebuild}"
        )

    def _present(self, name: str, want: dict) -> Path:
        path = self.path(name)
        if not path.is_file():
            if "path" in want:
                raise CorruptFileError(
                    f"{path} is missing (moved or deleted since the model was cached): "
                    f"{self._referenced(path)}"
                )
            raise CorruptFileError(f"{path} is missing: {self.rebuild}")
        size = path.stat().st_size
        if size != want["bytes"]:
            raise self._damaged(name, "its size", f": {size} bytes, {want['bytes']} when cached")
        return path

    def check_all(self) -> None:
        """Every file whole."""
        for name, want in self.entries.items():
            path = self._present(name, want)
            if _crc32(path) != want["crc32"]:
                raise self._damaged(name)

    def check_but_tensors(self) -> None:
        """Every file whole but the weights files, of which the size and the header (the
        tensors are checked as they are read: `check_tensors`). A manifest written before
        tensors had checksums of their own: every file whole."""
        for name, want in self.entries.items():
            path = self._present(name, want)
            if "tensors" in want:
                if _crc32(path, 0, self._header(name)[0]) != want["header_crc32"]:
                    raise self._damaged(name, "its header")
            elif _crc32(path) != want["crc32"]:
                raise self._damaged(name)

    def check_tensors(self, file: str, names: Iterable[str]) -> None:
        """The bytes of these tensors of a weights file, each against its own checksum (the
        header's offsets were checked by check_but_tensors)."""
        want = self.entries.get(file)
        if want is None:
            raise CorruptFileError(f"{self.folder / file} is not in {MANIFEST}: {self.rebuild}")
        if "tensors" not in want:
            return  # an older manifest: the whole file was checked
        path = self.path(file)
        start, header = self._header(file)
        for name in names:
            if (file, name) in self._checked:
                continue
            if name not in header or name not in want["tensors"]:
                raise CorruptFileError(f"{path} lacks the tensor {name}: {self.rebuild}")
            first, last = header[name]["data_offsets"]
            if _crc32(path, start + first, last - first) != want["tensors"][name]:
                raise self._damaged(file, f"the checksum of tensor {name}")
            self._checked.add((file, name))


def model_fingerprint(folder: str | Path) -> str:
    """A cached model's identity, from its manifest (nothing is reread): the sha256 (first 16
    hex digits) of the checksums of its weights files. Two models of the same architecture and
    width differ in it; the same weights cached again do not."""
    entries = Manifest(folder).entries
    named = {
        name: entry["crc32"]
        for name, entry in sorted(entries.items())
        if name.endswith(WEIGHTS_SUFFIX)
    }
    text = json.dumps(named, sort_keys=True).encode()
    return hashlib.sha256(text).hexdigest()[:16]


def check_manifest(folder: str | Path) -> None:
    """Refuse a cached model whose files differ from its manifest (damaged, truncated, edited),
    naming the file and the command that rebuilds the cache."""
    Manifest(folder).check_all()
