"""Damage a Parquet file where a test means to: one byte flipped inside a data page's payload.

Parquet's column-chunk metadata gives where a chunk starts (`dictionary_page_offset` when it has
a dictionary page, else `data_page_offset`) and its `total_compressed_size` (page headers
included, counted from that start). Flipping a byte at `data_page_offset + total_compressed_size
// 2` can land past the chunk (in the next column or the footer) when there is a dictionary page,
and where it lands then depends on the compressed sizes, so on the stored values' last bits
(which differ between CPUs). Here the page headers are read (Thrift compact protocol, as the
format stores them), so the byte flipped is always inside a data page's payload: the bytes the
page's CRC covers, past its header. `flip_byte` flips one byte of any file, its mtime put back
if asked (what a planning check that trusts size and mtime cannot see)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

# PageHeader (parquet.thrift): 1: type, 2: uncompressed_page_size, 3: compressed_page_size
PAGE_TYPES = {0: "data", 1: "index", 2: "dictionary", 3: "data_v2"}


@dataclass(frozen=True)
class Page:
    kind: str  # data, data_v2, dictionary, index
    header: int  # offset of its header in the file
    start: int  # offset of its payload (past the header)
    end: int  # one past its payload's last byte


@dataclass(frozen=True)
class Chunk:
    path: str  # the column's path in the schema (state.list.element)
    start: int  # the dictionary page's offset if it has one, else the first data page's
    end: int  # start + total_compressed_size
    pages: tuple[Page, ...]


class _Reader:
    """Just enough of Thrift's compact protocol to read a page header and skip what it holds."""

    def __init__(self, raw: bytes, pos: int):
        self.raw, self.pos = raw, pos

    def byte(self) -> int:
        value = self.raw[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = value = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, kind: int) -> None:
        if kind in (1, 2):  # booleans: the value is the type (in a list, one byte each)
            return
        if kind == 3:
            self.pos += 1
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.pos += 8
        elif kind == 8:
            length = self.varint()  # (read before moving on: `pos += varint()` loses it)
            self.pos += length
        elif kind in (9, 10):
            head = self.byte()
            size, element = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            for _ in range(size):
                if element in (1, 2):
                    self.pos += 1
                else:
                    self.skip(element)
        elif kind == 11:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4)
                    self.skip(types & 0x0F)
        elif kind == 12:
            self.struct()
        else:
            raise ValueError(f"not a Thrift compact type: {kind} at byte {self.pos}")

    def struct(self, wanted=()) -> dict[int, int]:
        """Read a struct; return the integer fields named in `wanted` ({field id: value})."""
        found, field = {}, 0
        while True:
            head = self.byte()
            if head == 0:
                return found
            kind, delta = head & 0x0F, head >> 4
            field = field + delta if delta else self.zigzag()
            if field in wanted and kind in (4, 5, 6):
                found[field] = self.zigzag()
            else:
                self.skip(kind)


def column_chunk(path, column: str | int, row_group: int = 0) -> Chunk:
    """The extent and pages of one column chunk; `column` is a leaf's index or its top-level
    name (state for state.list.element). Checks that the pages read fill the chunk exactly."""
    meta = pq.ParquetFile(path).metadata.row_group(row_group)
    leaves = [meta.column(i) for i in range(meta.num_columns)]
    if isinstance(column, int):
        chunk = leaves[column]
    else:
        named = [c for c in leaves if c.path_in_schema.split(".")[0] == column]
        assert len(named) == 1, f"{path}: {len(named)} leaf columns under {column!r}"
        chunk = named[0]
    start = chunk.data_page_offset
    if chunk.has_dictionary_page and chunk.dictionary_page_offset:
        start = min(start, chunk.dictionary_page_offset)
    end = start + chunk.total_compressed_size
    raw = Path(path).read_bytes()
    assert 4 <= start < end <= len(raw) - 8, (path, chunk.path_in_schema, start, end, len(raw))
    pages, pos = [], start
    while pos < end:
        reader = _Reader(raw, pos)
        fields = reader.struct(wanted=(1, 3))
        kind = PAGE_TYPES.get(fields.get(1), f"unknown {fields.get(1)}")
        payload = fields[3]  # compressed_page_size: the bytes after the header
        pages.append(Page(kind, pos, reader.pos, reader.pos + payload))
        pos = reader.pos + payload
    assert pos == end, f"{path}: pages of {chunk.path_in_schema} end at {pos}, not at {end}"
    return Chunk(chunk.path_in_schema, start, end, tuple(pages))


def flip_data_page_byte(path, column: str | int, row_group: int = 0, mask: int = 0x04) -> int:
    """Flip bits (`mask`) of the middle byte of the first data page's payload of one column
    chunk, in place; return the byte's offset. The byte is checked to lie inside the chunk and
    inside that payload, so the damage is where it is meant to be whatever the sizes."""
    chunk = column_chunk(path, column, row_group)
    page = next(p for p in chunk.pages if p.kind.startswith("data"))
    offset = page.start + (page.end - page.start) // 2
    assert chunk.start <= page.start <= offset < page.end <= chunk.end, (chunk, page, offset)
    raw = bytearray(Path(path).read_bytes())
    raw[offset] ^= mask
    Path(path).write_bytes(bytes(raw))
    return offset


def flip_byte(path, offset: int, keep_mtime: bool = False, mask: int = 0x01) -> None:
    """Flip bits (`mask`) of one byte of a file, in place; with `keep_mtime` its mtime is put
    back as it was (as `touch -r` would), so that only its bytes tell."""
    path = Path(path)
    before = path.stat()
    raw = bytearray(path.read_bytes())
    raw[offset] ^= mask
    path.write_bytes(bytes(raw))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
