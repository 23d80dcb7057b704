"""jtc's tensor files: safetensors files written one tensor at a time, with a sha256 of every
tensor in their metadata (safetensors itself has no checksum) that every read checks, and the
workflow job's stamp (jtc.files.stamps). The shortcut maps (jtc.shortcuts.maps) and the
shortlist factorisation (jtc.evaluation.shortlist) are such files, each with a format name of
its own. A file's tensors are stored in float32, or in 16 bits where its writer asks
(STORED_DTYPES: float16, or bfloat16, which numpy lacks: stored as its bits and read back as the
float32 values they are)."""

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

# the types a tensor can be stored in: numpy's type of the stored array, safetensors' name
STORED_DTYPES = {
    "float32": (np.float32, "F32"),
    "float16": (np.float16, "F16"),
    "bfloat16": (np.uint16, "BF16"),
}

# metadata key: {tensor name: sha256 of its name, dtype, shape and bytes}; safetensors itself has
# no checksum, so every reader verifies the tensors it reads against these
CHECKSUMS = "checksums"


def _digest(name: str, value: np.ndarray) -> str:
    value = np.ascontiguousarray(value)
    digest = hashlib.sha256(f"{name}|{value.dtype.str}|{value.shape}|".encode())
    digest.update(value.tobytes())
    return digest.hexdigest()


def _bfloat16_bits(value: np.ndarray) -> np.ndarray:
    """The bits of the bfloat16 numbers nearest to `value` (rounded to nearest, ties to even),
    as uint16: the upper half of each float32."""
    bits = np.ascontiguousarray(value, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bits (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def stored(value: np.ndarray, dtype: str) -> np.ndarray:
    """`value` as a tensor file stores it in `dtype` (STORED_DTYPES): float32 or float16 as
    such, bfloat16 as its bits (uint16). Refuses a value that the type cannot hold (an
    overflow to infinity: float16's largest number is 65,504)."""
    kind, _ = STORED_DTYPES[dtype]
    if dtype == "bfloat16":
        result = _bfloat16_bits(value)
        finite = np.isfinite(_from_bfloat16_bits(result))
    else:
        with np.errstate(over="ignore"):
            result = np.ascontiguousarray(value, dtype=kind)
        finite = np.isfinite(result)
    if not finite.all() and np.isfinite(np.asarray(value)).all():
        biggest = float(np.abs(np.asarray(value, dtype=np.float64)).max())
        raise OverflowError(
            f"{dtype} cannot hold a value of magnitude {biggest:.3g} (it overflows to "
            f"infinity); store float32{' or bfloat16' if dtype == 'float16' else ''}"
        )
    return result


def as_float(value: np.ndarray) -> np.ndarray:
    """A stored tensor (stored) as the floating-point values it holds: bfloat16's bits made
    float32, float32 and float16 as they are."""
    return _from_bfloat16_bits(value) if value.dtype == np.uint16 else value


def rounded(value: np.ndarray, dtype: str) -> np.ndarray:
    """`value` rounded to `dtype` as a tensor file stores it, as float32 (what a reader gets,
    widened)."""
    return np.asarray(as_float(stored(value, dtype)), dtype=np.float32)


class TensorWriter:
    """A safetensors file written one tensor at a time: the tensors' bytes go to a scratch file
    beside the result, and `close` writes the header (with every tensor's checksum) and copies
    them after it, atomically. Memory holds one tensor at a time, whatever the file's size.
    Every tensor is stored in `dtype` (STORED_DTYPES)."""

    def __init__(self, path: str | Path, dtype: str = "float32"):
        if dtype not in STORED_DTYPES:
            raise ValueError(f"tensors cannot be stored as {dtype!r}: {', '.join(STORED_DTYPES)}")
        self.dtype = dtype
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._data = tempfile.TemporaryFile(dir=self.path.parent)
        self._header: dict[str, dict] = {}
        self._digests: dict[str, str] = {}
        self._size = 0

    def add(self, name: str, value: np.ndarray) -> None:
        if name in self._header:
            raise ValueError(f"{self.path}: tensor '{name}' written twice")
        value = stored(value, self.dtype)
        data = value.tobytes()
        self._header[name] = {
            "dtype": STORED_DTYPES[self.dtype][1],
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


def _bfloat16_tensor(path: str | Path, name: str) -> np.ndarray:
    """A bfloat16 tensor's bits (uint16), read straight from the file (safetensors' numpy
    reader has no bfloat16)."""
    with open(path, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        entry = json.loads(handle.read(size))[name]
        start, end = entry["data_offsets"]
        handle.seek(8 + size + start)
        data = handle.read(end - start)
    bits = np.frombuffer(data, dtype="<u2")
    if bits.size != int(np.prod(entry["shape"])):
        raise ValueError(f"tensor '{name}' holds {bits.size} values, not {entry['shape']}")
    return bits.reshape(entry["shape"])


def _tensor(handle, path: str | Path, name: str) -> np.ndarray:
    """A tensor as stored (bfloat16 as its bits)."""
    if handle.get_slice(name).get_dtype() == "BF16":
        return _bfloat16_tensor(path, name)
    return handle.get_tensor(name)


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
                name: as_float(_verified(path, name, _tensor(handle, path, name), meta))
                for name in handle.keys()
                if wanted is None or wanted(name)
            }
    except (SafetensorError, OSError, ValueError, KeyError) as exc:
        raise CorruptFileError(
            f"cannot read {what} file {path}: {exc}; {stamps.rebuild_hint(path)}"
        ) from exc
    return tensors, meta
