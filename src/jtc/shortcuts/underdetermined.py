"""Fits with fewer training rows than unknowns (torch-free): a map fitted on n training rows
whose output coordinates each depend on d > n inputs (the width of the states it maps from) is
underdetermined. Least squares then fits the training rows exactly (many maps do), and a
low-rank or trained map sees the same n rows in d dimensions: the held-out r² of such a map
measures overfitting, not how linear the model is. The fits record the rows in each map file's
metadata (TRAINING_ROWS) and warn; the parameter and part r² tables mark the maps
(`with_training_rows`, `with_part_training_rows`: column `underdetermined`).

Rows are not the whole story: a fit is underdetermined whenever its source rows span fewer than
d dimensions, however many they are. Layer 0 holds token embeddings, one per distinct token, so
2,400 rows of 1,160 distinct tokens at width 1,536 leave the map underdetermined with rows >
width. The closed-form fits (mat, rrr, the sub-module parts) record the numerical rank of each
source's float64 Gram matrix X^T X (jtc.shortcuts.closed_form.gram_rank: eigenvalues above
λ_max · d · eps) in the map file (GRAM_RANKS), warn where it is below the width and the rows
are not (the row warning already covers the rest), and the tables report it (`gram_rank`, the
lowest over the source layers; `rank_deficient`) beside `rows_per_coefficient` (training rows /
the input width: the rows per unknown of one output coordinate; about 4 are needed for a
held-out r² that is not dominated by overfitting)."""

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
GRAM_RANKS = "gram_ranks"  # map file metadata: {source layer (or "block.part"): Gram rank}


def underdetermined(rows: int | None, width: int | None) -> bool | None:
    """Whether a fit on `rows` training rows of `width` inputs has fewer rows than unknowns per
    output coordinate (None where either is unknown)."""
    if rows is None or width is None:
        return None
    return rows < width


def rows_per_coefficient(rows: int | None, width: int | None) -> float | None:
    """Training rows per unknown of one output coordinate (rows / input width; None where
    either is unknown)."""
    if rows is None or not width:
        return None
    return rows / width


def rank_deficient(rank: int | None, width: int | None) -> bool | None:
    """Whether a Gram matrix of numerical rank `rank` is singular at `width` (None: unknown)."""
    if rank is None or width is None:
        return None
    return rank < width


def gram_ranks(metadata: Mapping[str, object]) -> dict[str, int]:
    """{source layer (or "block.part"): Gram rank} a map file's (decoded) metadata records
    ({} for maps that record none: trained methods, files written before GRAM_RANKS)."""
    ranks = metadata.get(GRAM_RANKS) or {}
    return {str(k): int(v) for k, v in ranks.items()}  # type: ignore[union-attr]


def rank_message(
    model: str, corpus: str, method: str, ranks: Mapping[str, int], width: int, rows: int
) -> str:
    """The warning for fits whose source rows span fewer than `width` dimensions (`ranks`: the
    deficient sources, e.g. "layer 0" -> their Gram rank), naming them and how to go on."""
    where = ", ".join(f"{source} (rank {rank})" for source, rank in ranks.items())
    return (
        f"{model} on {corpus}, {method}: the training rows of {where} span fewer "
        f"dimensions than the width {width} (the numerical rank of their Gram matrix X^T X), "
        f"although there are {rows} of them ({rows / width:.1f} per coefficient): repeated rows "
        "add no rank (layer 0 holds one embedding per distinct token), so these fits are "
        "underdetermined and their held-out r² is dominated by overfitting; raise the distinct "
        "training rows: sizes.train (more sentences, more distinct tokens), or "
        "positions_per_sentence (up to all)"
    )


def warn_if_rank_deficient(
    model: str,
    corpus: str,
    method: str,
    ranks: Mapping[str, int],
    width: int,
    rows: int,
) -> bool:
    """Log the warning (logger "jtc") when some source's Gram rank is below `width` while the
    rows are not (fewer rows already get `message`'s warning); whether it did. `ranks`: a label
    of each source ("layer 0", "block 2 attn") -> its Gram rank."""
    low = {source: int(r) for source, r in ranks.items() if r < width}
    if low and not underdetermined(rows, width):
        log.warning("%s", rank_message(model, corpus, method, low, width, rows))
        return True
    return False


def warn_rank_deficient_parts(
    model: str,
    corpus: str,
    rows: int,
    ranks: Mapping[str, int],
    widths: Mapping[str, int],
) -> None:
    """One warning (logger "jtc") for the part maps (`ranks`, `widths`: "block.part" -> its
    Gram rank, its input width) whose inputs span fewer dimensions than their width."""
    by_width: dict[int, dict[str, int]] = {}
    for key, rank in ranks.items():
        block, part = key.split(".", 1)
        by_width.setdefault(widths[key], {})[f"block {block} {part}"] = rank
    for width, low in sorted(by_width.items()):
        warn_if_rank_deficient(model, corpus, "sub-module part maps", low, width, rows)


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
    """The parameter table (jtc.shortcuts.maps.parameter_table) with more columns:
    `training_rows` (the rows each method's maps were fitted on, from its map file; null for
    id, which fits nothing), `rows_per_coefficient` (training_rows / hidden_size),
    `underdetermined` (fewer rows than `hidden_size`, the width of the states a map reads; false
    for id, null where a map file records no rows), `gram_rank` (the lowest numerical rank of a
    source layer's Gram matrix over the layers, recorded by the closed-form fits; null for the
    trained methods and id) and `rank_deficient` (gram_rank below hidden_size, whatever the
    rows; false for id, null where unknown). Logs a warning (logger "jtc") for every
    underdetermined or rank-deficient method."""
    import pyarrow as pa

    from jtc.shortcuts.maps import read_metadata

    metadata = {method: read_metadata(path) for method, path in map_files.items()}
    counts, per_coefficient, flags, lowest, deficient = [], [], [], [], []
    for method, width in zip(
        table.column("method").to_pylist(), table.column("hidden_size").to_pylist(), strict=True
    ):
        meta = metadata.get(method, {})
        n = training_rows(meta)
        ranks = gram_ranks(meta)
        rank = min(ranks.values()) if ranks else None
        counts.append(n)
        per_coefficient.append(rows_per_coefficient(n, width))
        flags.append(underdetermined(n, width) if method in metadata else False)
        lowest.append(rank)
        deficient.append(rank_deficient(rank, width) if method in metadata else False)
        if n is not None:
            warn_if_underdetermined(model, corpus, method, n, width)
            labelled = {f"layer {source}": rank for source, rank in ranks.items()}
            warn_if_rank_deficient(model, corpus, method, labelled, width, n)
    table = table.append_column("training_rows", pa.array(counts, pa.int64()))
    table = table.append_column("rows_per_coefficient", pa.array(per_coefficient, pa.float64()))
    table = table.append_column("underdetermined", pa.array(flags, pa.bool_()))
    table = table.append_column("gram_rank", pa.array(lowest, pa.int64()))
    return table.append_column("rank_deficient", pa.array(deficient, pa.bool_()))


def with_part_training_rows(
    table: pa.Table, path: str | Path, part_maps: Mapping[tuple[int, str], ShortcutMap]
) -> pa.Table:
    """The part r² table (jtc.shortcuts.parts.part_r2_table) with `training_rows` (the rows the
    part maps were fitted on, from their file `path`; null if it records none),
    `rows_per_coefficient` (training_rows / the part's input width, the width of its map),
    `underdetermined` (fewer rows than that width), `gram_rank` (the numerical rank of the
    part's training inputs' Gram matrix; null where the file records none) and
    `rank_deficient` (gram_rank below the width, whatever the rows). Logs a warning (logger
    "jtc") per width of the underdetermined parts, and for the rank-deficient ones."""
    import json

    import pyarrow as pa
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as handle:  # the header only, no tensors
        header = handle.metadata() or {}  # numbers stored as their JSON text
    rows = training_rows(header)
    ranks = gram_ranks({GRAM_RANKS: json.loads(header[GRAM_RANKS])} if GRAM_RANKS in header else {})
    parts = table.column("part").to_pylist()
    blocks = table.column("block").to_pylist()
    widths = [part_maps[(b, p)].width for b, p in zip(blocks, parts, strict=True)]
    if rows is not None and table.num_rows:
        widest: dict[str, int] = {}
        for part, width in zip(parts, widths, strict=True):
            widest[part] = max(widest.get(part, 0), width)
        model, corpus = table.column("model")[0].as_py(), table.column("corpus")[0].as_py()
        warn_underdetermined_parts(model, corpus, rows, widest)
        keys = [f"{b}.{p}" for b, p in zip(blocks, parts, strict=True)]
        warn_rank_deficient_parts(
            model,
            corpus,
            rows,
            {k: ranks[k] for k in keys if k in ranks},
            dict(zip(keys, widths, strict=True)),
        )
    part_ranks = [ranks.get(f"{b}.{p}") for b, p in zip(blocks, parts, strict=True)]
    table = table.append_column("training_rows", pa.array([rows] * table.num_rows, pa.int64()))
    table = table.append_column(
        "rows_per_coefficient",
        pa.array([rows_per_coefficient(rows, w) for w in widths], pa.float64()),
    )
    flags = [underdetermined(rows, width) for width in widths]
    table = table.append_column("underdetermined", pa.array(flags, pa.bool_()))
    table = table.append_column("gram_rank", pa.array(part_ranks, pa.int64()))
    deficient = [rank_deficient(r, w) for r, w in zip(part_ranks, widths, strict=True)]
    return table.append_column("rank_deficient", pa.array(deficient, pa.bool_()))
