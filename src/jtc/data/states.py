"""The hidden-state format: one Parquet file per site (a layer's output h_l, or a block part's
input or output) in a states folder, with one row per (sentence, drawn position):
`sentence_id`, `position` and the d-dimensional `state` (a fixed-size list of float32 or
float16), rows in the same order in every file; zstd, page checksums and column digests
(jtc.files.io). A folder also holds positions.parquet (the tokens at each row's position) and
info.json (the model's depth and width, the split, the sentences and rows)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jtc.files import stamps
from jtc.files.io import ColumnDigests, CorruptFileError, parquet_metadata, read_json, read_table

STATE_DTYPES = {"float32": np.float32, "float16": np.float16}


KEEP_BYTES = 8 << 30  # LayerStates: layers kept in memory, at most this much in all


def states_table(sentence_ids: np.ndarray, positions: np.ndarray, states: np.ndarray) -> pa.Table:
    """One row per (sentence, position): the sentence's id, the position, and the state."""
    n, d = states.shape
    values = pa.array(np.ascontiguousarray(states).reshape(-1))
    return pa.table(
        {
            "sentence_id": pa.array(sentence_ids, pa.int64()),
            "position": pa.array(positions, pa.int32()),
            "state": pa.FixedSizeListArray.from_arrays(values, d),
        }
    )


class StateWriter:
    """Streams rows of one site (layer) to a Parquet file in bounded row groups."""

    def __init__(self, path: Path, width: int, dtype: str, rows_per_group: int):
        value_type = pa.float16() if dtype == "float16" else pa.float32()
        schema = pa.schema(
            [
                ("sentence_id", pa.int64()),
                ("position", pa.int32()),
                ("state", pa.list_(value_type, width)),
            ]
        )
        self.dtype = STATE_DTYPES[dtype]
        self.rows_per_group = rows_per_group
        self.path = path
        self.digests = ColumnDigests(schema.names)
        self.writer = pq.ParquetWriter(
            path, schema, compression="zstd", compression_level=1, write_page_checksum=True
        )
        self.buffer: list[pa.Table] = []
        self.buffered = 0

    def write(self, sentence_ids: np.ndarray, positions: np.ndarray, states: np.ndarray) -> None:
        self.buffer.append(states_table(sentence_ids, positions, states.astype(self.dtype)))
        self.buffered += len(sentence_ids)
        if self.buffered >= self.rows_per_group:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            table = pa.concat_tables(self.buffer)
            self.writer.write_table(table, row_group_size=self.rows_per_group)
            self.digests.update(table)
            self.buffer, self.buffered = [], 0

    def close(self) -> None:
        self.flush()
        self.writer.add_key_value_metadata(parquet_metadata(self.path, self.digests))
        self.writer.close()


def layer_file(states_dir: str | os.PathLike, layer: int) -> Path:
    return Path(states_dir) / f"layer_{layer:03d}.parquet"


def part_file(states_dir: str | os.PathLike, block: int, part: str, side: str) -> Path:
    """The recorded input (side "in") or output ("out") of one part of block 1..L."""
    return Path(states_dir) / f"block_{block:03d}.{part}.{side}.parquet"


def read_site(path: str | os.PathLike, dtype: type = np.float64) -> tuple[np.ndarray, np.ndarray]:
    """Read one site's file (a layer, a part's input or output) as an (n, d) array, with the
    sentence ids in row order. A missing or damaged file names the folder to rebuild: the
    workflow writes a states folder whole (a directory output), so it rebuilds it whole."""
    try:
        return _site_arrays(read_table(path, columns=["sentence_id", "state"]), path, dtype)
    except FileNotFoundError as exc:
        raise CorruptFileError(f"{exc}; {stamps.rebuild_hint(path)}") from exc


def _site_arrays(table: pa.Table, path, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """(sentence ids, (n, d) states) of a table read from a site's file, checked."""
    column = table.column("state").combine_chunks()
    if len(column) == 0:
        raise CorruptFileError(f"{path} holds no states; {stamps.rebuild_hint(path)}")
    width = column.type.list_size
    values = column.values.to_numpy(zero_copy_only=False)
    if values.size != len(column) * width or np.isnan(values).any():
        raise CorruptFileError(
            f"{path}: state column is malformed or holds NaN; {stamps.rebuild_hint(path)}"
        )
    ids = table.column("sentence_id").to_numpy()
    return ids, values.reshape(len(column), width).astype(dtype, copy=False)


def read_site_aligned(
    path: str | os.PathLike, expected_ids: np.ndarray, dtype: type = np.float64
) -> np.ndarray:
    """Read a site and check that its rows are the same sentences, in the same order."""
    ids, states = read_site(path, dtype)
    if not np.array_equal(ids, expected_ids):
        raise CorruptFileError(
            f"{path}: rows do not match the other sites' sentences; {stamps.rebuild_hint(path)}"
        )
    return states


def read_row_positions(states_dir: str | os.PathLike) -> np.ndarray:
    """The token position of every stored row of a states folder (its layer 0 file's
    `position` column, rows in the order of every site)."""
    path = layer_file(states_dir, 0)
    return read_table(path, columns=["position"]).column("position").to_numpy()


def read_states(
    states_dir: str | os.PathLike, layer: int, dtype: type = np.float64
) -> tuple[np.ndarray, np.ndarray]:
    """Read one layer's states as an (n, d) array, with the sentence ids in row order."""
    return read_site(layer_file(states_dir, layer), dtype)


def read_aligned(
    states_dir: str | os.PathLike, layer: int, expected_ids: np.ndarray, dtype: type = np.float64
) -> np.ndarray:
    """Read a layer and check that its rows are the same sentences, in the same order."""
    return read_site_aligned(layer_file(states_dir, layer), expected_ids, dtype)


def read_positions(states_dir: str | os.PathLike) -> tuple[pa.Table, dict[str, Any]]:
    """A states folder's positions.parquet (sentence_id, position, gold_id, ... per row, in the
    row order of its layer files) and its info.json, checked against the last layer's rows."""
    info = read_json(Path(states_dir) / "info.json")
    positions = read_table(Path(states_dir) / "positions.parquet")
    # the ids only: the states themselves are read (and checked row by row) by the callers
    ids = read_table(layer_file(states_dir, info["num_layers"]), ["sentence_id"]).column(0)
    if not np.array_equal(positions.column("sentence_id").to_numpy(), ids.to_numpy()):
        raise CorruptFileError(
            f"{states_dir}: positions.parquet does not match the stored states; "
            f"{stamps.rebuild_hint(states_dir)}"
        )
    return positions, info


class LayerStates(Sequence[np.ndarray]):
    """The states h_0..h_L of a states folder as a sequence of (rows, d) arrays, each layer
    read when first asked for (its rows checked against layer 0's) and kept while the layers
    kept add up to at most `keep_bytes` (default KEEP_BYTES); a layer beyond is read again at
    each use. A job that reads every layer therefore holds a bounded amount whatever the
    number of rows: all of them, read once, for the usual sizes. `sentence_ids` gives each
    row's sentence."""

    def __init__(
        self, states_dir: str | os.PathLike, dtype: type = np.float32, keep_bytes: int | None = None
    ):
        self.states_dir = states_dir
        self.dtype = dtype
        self.keep_bytes = KEEP_BYTES if keep_bytes is None else keep_bytes
        self.layers = read_json(Path(states_dir) / "info.json")["num_layers"] + 1
        self.sentence_ids, first = read_states(states_dir, 0, dtype)
        self.kept: dict[int, np.ndarray] = {}
        self._keep(0, first)

    def _keep(self, layer: int, states: np.ndarray) -> None:
        if sum(a.nbytes for a in self.kept.values()) + states.nbytes <= self.keep_bytes:
            self.kept[layer] = states

    def __len__(self) -> int:
        return self.layers

    @overload
    def __getitem__(self, layer: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, layer: slice) -> list[np.ndarray]: ...

    def __getitem__(self, layer):
        if isinstance(layer, slice):
            return [self[i] for i in range(*layer.indices(self.layers))]
        layer = range(self.layers)[layer]  # negative indices; IndexError beyond the last
        if layer in self.kept:
            return self.kept[layer]
        states = read_aligned(self.states_dir, layer, self.sentence_ids, self.dtype)
        self._keep(layer, states)
        return states
