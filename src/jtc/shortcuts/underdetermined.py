"""Fits with fewer training rows than unknowns (torch-free): a map fitted on n training rows
whose output coordinates each depend on d > n inputs (the width of the states it maps from) is
underdetermined. Least squares then fits the training rows exactly (many maps do), and a
low-rank or trained map sees the same n rows in d dimensions: the held-out r² of such a map
measures overfitting, not how linear the model is. The fits record the rows in each map file's
metadata (TRAINING_ROWS) and warn; the parameter and part r² tables mark the maps
(`with_training_rows`, `with_part_training_rows`: column `underdetermined`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

    from jtc.shortcuts.maps import ShortcutMap

log = logging.getLogger("jtc")

TRAINING_ROWS = "training_rows"  # map file metadata: the rows the maps were fitted on
_OLDER = "n_train"  # the same number, as map files written before TRAINING_ROWS name it


def underdetermined(rows: int | None, width: int | None) -> bool | None:
    """Whether a fit on `rows` training rows of `width` inputs has fewer rows than unknowns per
    output coordinate (None where either is unknown)."""
    if rows is None or width is None:
        return None
    return rows < width


def training_rows(metadata: Mapping[str, object]) -> int | None:
    """The training rows a map file's (decoded) metadata records, None if it records none."""
    rows = metadata.get(TRAINING_ROWS, metadata.get(_OLDER))
    return None if rows is None else int(rows)  # type: ignore[call-overload]


def message(model: str, corpus: str, method: str, rows: int, width: int) -> str:
    """The warning for an underdetermined fit, naming what was fitted and how to go on."""
    return (
        f"{model} on {corpus}, {method}: fitted on {rows} training rows, fewer than the width "
        f"{width} of the states it maps from (the inputs of one output coordinate): the fit is "
        f"underdetermined (a low-rank or trained map sees the same {rows} rows in {width} "
        "dimensions), it can reproduce its training rows and its held-out r² is dominated by "
        f"overfitting; raise the training rows to at least {width} (well above it for stable "
        "maps): sizes.train (sentences), or positions_per_sentence (rows per sentence, up to "
        "all)"
    )


def warn_if_underdetermined(model: str, corpus: str, method: str, rows: int, width: int) -> bool:
    """Log the warning (logger "jtc") when a fit has fewer rows than its width; whether it did."""
    if underdetermined(rows, width):
        log.warning("%s", message(model, corpus, method, rows, width))
        return True
    return False


def warn_underdetermined_parts(
    model: str, corpus: str, rows: int, widths: Mapping[str, int]
) -> None:
    """One warning (logger "jtc") for the parts whose maps were fitted on fewer rows than the
    part's input width (`widths`: part -> its widest input over the blocks)."""
    flagged = sorted({w for w in widths.values() if rows < w})
    for width in flagged:
        parts = ", ".join(p for p, w in widths.items() if w == width)
        warn_if_underdetermined(model, corpus, f"sub-module part maps ({parts})", rows, width)


def with_training_rows(
    table: pa.Table, map_files: Mapping[str, str | Path], *, model: str, corpus: str
) -> pa.Table:
    """The parameter table (jtc.shortcuts.maps.parameter_table) with two more columns:
    `training_rows` (the rows each method's maps were fitted on, from its map file; null for
    id, which fits nothing) and `underdetermined` (fewer rows than `hidden_size`, the width of
    the states a map reads; false for id, null where a map file records no rows). Logs a
    warning (logger "jtc") for every underdetermined method."""
    import pyarrow as pa

    from jtc.shortcuts.maps import read_metadata

    rows = {method: training_rows(read_metadata(path)) for method, path in map_files.items()}
    counts, flags = [], []
    for method, width in zip(
        table.column("method").to_pylist(), table.column("hidden_size").to_pylist(), strict=True
    ):
        n = rows.get(method)
        counts.append(n)
        flags.append(underdetermined(n, width) if method in rows else False)
        if n is not None:
            warn_if_underdetermined(model, corpus, method, n, width)
    table = table.append_column("training_rows", pa.array(counts, pa.int64()))
    return table.append_column("underdetermined", pa.array(flags, pa.bool_()))


def with_part_training_rows(
    table: pa.Table, path: str | Path, part_maps: Mapping[tuple[int, str], ShortcutMap]
) -> pa.Table:
    """The part r² table (jtc.shortcuts.parts.part_r2_table) with `training_rows` (the rows the
    part maps were fitted on, from their file `path`; null if it records none) and
    `underdetermined` (fewer rows than the part's input width, the width of its map). Logs a
    warning (logger "jtc") per width of the underdetermined parts."""
    import pyarrow as pa
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as handle:  # the header only, no tensors
        rows = training_rows(handle.metadata() or {})  # numbers stored as their JSON text
    parts = table.column("part").to_pylist()
    blocks = table.column("block").to_pylist()
    widths = [part_maps[(b, p)].width for b, p in zip(blocks, parts, strict=True)]
    if rows is not None and table.num_rows:
        widest: dict[str, int] = {}
        for part, width in zip(parts, widths, strict=True):
            widest[part] = max(widest.get(part, 0), width)
        model, corpus = table.column("model")[0].as_py(), table.column("corpus")[0].as_py()
        warn_underdetermined_parts(model, corpus, rows, widest)
    table = table.append_column("training_rows", pa.array([rows] * table.num_rows, pa.int64()))
    flags = [underdetermined(rows, width) for width in widths]
    return table.append_column("underdetermined", pa.array(flags, pa.bool_()))
