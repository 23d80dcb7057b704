"""jtc's tensor files: safetensors files written one tensor at a time, with a sha256 of every
tensor in their metadata (safetensors itself has no checksum) that every read checks, and the
workflow job's stamp (jtc.files.stamps). The shortcut maps (jtc.shortcuts.maps) and the
shortlist factorisation (jtc.evaluation.shortlist) are such files, each with a format name of
its own."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
from safetensors import SafetensorError, safe_open

from jtc.files import stamps
from jtc.files.io import CorruptFileError, atomic_path

# metadata key: {tensor name: sha256 of its name, dtype, shape and bytes}; safetensors itself has
# no checksum, so every reader verifies the tensors it reads against these
CHECKSUMS = "checksums"


def _digest(name: str, value: np.ndarray) -> str:
    value = np.ascontiguousarray(value)
    digest = hashlib.sha256(f"{name}|{value.dtype.str}|{value.shape}|".encode())
    digest.update(value.tobytes())
    return digest.hexdigest()


class TensorWriter:
    """A safetensors file written one tensor at a time: the tensors' bytes go to a scratch file
    beside the result, and `close` writes the header (with every tensor's checksum) and copies
    them after it, atomically. Memory holds one tensor at a time, whatever the file's size."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._data = tempfile.TemporaryFile(dir=self.path.parent)
        self._header: dict[str, dict] = {}
        self._digests: dict[str, str] = {}
        self._size = 0

    def add(self, name: str, value: np.ndarray) -> None:
        if name in self._header:
            raise ValueError(f"{self.path}: tensor '{name}' written twice")
        value = np.ascontiguousarray(value, dtype=np.float32)
        data = value.tobytes()
        self._header[name] = {
            "dtype": "F32",
            "shape": list(value.shape),
            "data_offsets": [self._size, self._size + len(data)],
        }
        self._digests[name] = _digest(name, value)
        self._data.write(data)
        self._size += len(data)

    def close(self, metadata: Mapping[str, str]) -> None:
        """Write the file: header, then the tensors in the order they were added."""
        meta = {**metadata, CHECKSUMS: json.dumps(dict(sorted(self._digests.items())))}
        stamp = stamps.stamp_for(self.path)  # in a workflow job: which output this is
        if stamp is not None:
            meta[stamps.KEY] = stamp
        header = json.dumps({"__metadata__": meta, **self._header}).encode()
        header += b" " * (-len(header) % 8)  # the data starts 8-byte aligned
        with atomic_path(self.path) as tmp, open(tmp, "wb") as out:
            out.write(struct.pack("<Q", len(header)))
            out.write(header)
            self._data.seek(0)
            shutil.copyfileobj(self._data, out, 16 << 20)
        self._data.close()

    def discard(self) -> None:
        self._data.close()


def _verified(
    path: str | Path, name: str, value: np.ndarray, meta: Mapping[str, str]
) -> np.ndarray:
    """A tensor read from `path`, checked against the checksum its file stores for it."""
    try:
        expected = json.loads(meta[CHECKSUMS])[name]
    except (KeyError, TypeError, ValueError):
        raise CorruptFileError(
            f"{path}: no checksum for tensor '{name}' (damaged, or written by an older jtc); "
            f"{stamps.rebuild_hint(path)}"
        ) from None
    if _digest(name, value) != expected:
        raise CorruptFileError(
            f"{path}: tensor '{name}' does not match its checksum (the file is damaged); "
            f"{stamps.rebuild_hint(path)}"
        )
    return value


def read_tensor_file(
    path: str | Path, fmt: str, what: str, wanted: Callable[[str], bool] | None = None
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The tensors of a jtc tensor file of format `fmt` (a `what`): every one, or those whose
    name `wanted` accepts (the others are not read), each checked against the checksum the
    file stores for it; and the file's metadata."""
    try:
        with safe_open(str(path), framework="numpy") as handle:
            meta = handle.metadata() or {}
            if meta.get("format") != fmt:
                raise CorruptFileError(
                    f"{path}: not a jtc {what} file (format {meta.get('format')!r}, expected "
                    f"{fmt!r}); {stamps.rebuild_hint(path)}"
                )
            stamps.check(path, stamps.parse(meta.get(stamps.KEY)))
            tensors = {
                name: _verified(path, name, handle.get_tensor(name), meta)
                for name in handle.keys()
                if wanted is None or wanted(name)
            }
    except (SafetensorError, OSError, ValueError) as exc:
        raise CorruptFileError(
            f"cannot read {what} file {path}: {exc}; {stamps.rebuild_hint(path)}"
        ) from exc
    return tensors, meta
