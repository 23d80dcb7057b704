"""What a GGUF file's header says of its model (architecture, depth, width, vocabulary,
parameters), read without loading a tensor, from a file or from the chunks it was split into.

Standard library only: the workflow reads it while it plans (memory requests of resolve_model)
and resolve_model before loading (is there memory enough).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# GGUF value types: fixed-size ones as struct formats; 8 is a string, 9 an array
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING, _ARRAY = 8, 9
# beyond these a header is malformed (a real one's longest string is a chat template, its largest
# array a tokenizer's 150k-odd tokens or merges)
MAX_STRING = 1 << 24
MAX_ITEMS = 1 << 24


class GGUFHeaderError(ValueError):
    """Not a GGUF file, or a header cut short."""


@dataclass(frozen=True)
class GGUFShape:
    architecture: str
    layers: int
    width: int
    vocab: int
    parameters: int  # every tensor's elements (the head counted once if it is tied)


class _Chain:
    """Sequential reads across files, as if they were one (a GGUF split into parts)."""

    def __init__(self, paths: Iterable[Path]):
        self._paths = list(paths)
        self._file: BinaryIO | None = None

    def read(self, size: int) -> bytes:
        if size > MAX_STRING * 8:
            raise GGUFHeaderError(f"malformed header (a field of {size:,} bytes)")
        out = bytearray()
        while len(out) < size:
            if self._file is None:
                if not self._paths:
                    break
                self._file = open(self._paths.pop(0), "rb")  # noqa: SIM115 - closed below
            chunk = self._file.read(size - len(out))
            if not chunk:
                self._file.close()
                self._file = None
                continue
            out += chunk
        if len(out) < size:
            raise GGUFHeaderError("the file ends inside its header (truncated?)")
        return bytes(out)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def unpack(self, fmt: str):
        return struct.unpack("<" + fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        size = self.unpack("Q")
        if size > MAX_STRING:
            raise GGUFHeaderError(f"malformed header (a string of {size:,} bytes)")
        return self.read(size).decode("utf-8", errors="replace")

    def value(self, kind: int, keep: bool = True):
        """One value of GGUF type `kind`; an array's items are kept only with `keep` (its
        length is returned otherwise: the tokenizer's arrays run to 150k strings)."""
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.unpack("I"), self.unpack("Q")
            if count > MAX_ITEMS:
                raise GGUFHeaderError(f"malformed header (an array of {count:,} items)")
            if item in _SCALARS and not keep:
                self.read(count * struct.calcsize(_SCALARS[item]))
                return count
            items = [self.value(item, keep) for _ in range(count)]
            return items if keep else count
        raise GGUFHeaderError(f"unknown GGUF value type {kind}")


def read_shape(paths: Path | Iterable[Path]) -> GGUFShape:
    """The shape a GGUF file's header declares; `paths`: the file, or its parts in order."""
    chain = _Chain([paths] if isinstance(paths, Path) else paths)
    try:
        if chain.read(4) != b"GGUF":
            raise GGUFHeaderError("no GGUF magic number at the start")
        version = chain.unpack("I")
        if version < 2:
            raise GGUFHeaderError(f"GGUF version {version} (jtc reads 2 and later)")
        tensors, entries = chain.unpack("Q"), chain.unpack("Q")
        if tensors > MAX_ITEMS or entries > MAX_ITEMS:
            raise GGUFHeaderError(f"malformed header ({tensors:,} tensors, {entries:,} entries)")
        meta: dict[str, object] = {}
        for _ in range(entries):
            key = chain.string()
            meta[key] = chain.value(chain.unpack("I"), keep=False)
        parameters = 0
        for _ in range(tensors):
            chain.string()
            rank = chain.unpack("I")
            if rank > 8:
                raise GGUFHeaderError(f"malformed header (a tensor of {rank} dimensions)")
            dims = [chain.unpack("Q") for _ in range(rank)]
            chain.unpack("I")  # quantisation type
            chain.unpack("Q")  # offset
            count = 1
            for dim in dims:
                count *= dim
            parameters += count
    except struct.error as err:
        raise GGUFHeaderError(f"malformed header ({err})") from None
    finally:
        chain.close()
    arch = str(meta.get("general.architecture", ""))
    try:
        return GGUFShape(
            architecture=arch,
            layers=int(meta[f"{arch}.block_count"]),  # type: ignore[arg-type]
            width=int(meta[f"{arch}.embedding_length"]),  # type: ignore[arg-type]
            vocab=int(meta.get(f"{arch}.vocab_size") or meta["tokenizer.ggml.tokens"]),  # type: ignore[arg-type]
            parameters=parameters,
        )
    except KeyError as err:
        raise GGUFHeaderError(f"the header has no {err} entry") from None
