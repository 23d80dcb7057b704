"""Fits with fewer training rows than unknowns (torch-free): a map fitted on n training rows
whose output coordinates each depend on d > n inputs (the width of the states it maps from) is
underdetermined. Least squares then fits the training rows exactly (many maps do), and a
low-rank or trained map sees the same n rows in d dimensions: the held-out r² of such a map
measures overfitting, not how linear the model is. The fits record the rows in each map file's
metadata (TRAINING_ROWS) and warn; the parameter and part r² tables mark the maps
(`with_training_rows`, `with_part_training_rows`: column `underdetermined`).

Rows are not enough either: below about ROWS_PER_COEFFICIENT rows per coefficient (rows / width:
a full d × d map has d coefficients per output coordinate) least squares overfits and held-out
r² collapses, and rows that repeat (layer 0 holds token embeddings: a token seen twice gives the
same row) can leave the Gram matrix XᵀX of a source layer short of full rank whatever their
number. The fits therefore record each source layer's numerical Gram rank (GRAM_RANKS,
`gram_ranks`), and the parameter table reports `rows_per_coefficient`, `gram_rank` (the lowest
over the source layers) and `rank_deficient`, each warned."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

    from jtc.shortcuts.maps import ShortcutMap

log = logging.getLogger("jtc")

TRAINING_ROWS = "training_rows"  # map file metadata: the rows the maps were fitted on
_OLDER = "n_train"  # the same number, as map files written before TRAINING_ROWS name it
GRAM_RANKS = "gram_ranks"  # map file metadata: each source layer's numerical Gram rank
ROWS_PER_COEFFICIENT = 4  # below this many rows per coefficient least squares overfits
GRAM_CHUNK_ROWS = 8192  # rows added into the float64 Gram matrix at a time (bounded memory)


def gram_rank(x: np.ndarray) -> int:
    """The numerical rank of the float64 Gram matrix XᵀX of the rows `x` (n, d): its eigenvalues
    above λ_max · d · eps (float64 eps; rounding in forming XᵀX is of that size, and it matches
    the condition the closed-form fits accept before they turn to the pseudo-inverse, far
    below it). Rows are added a chunk at a time, so memory stays at d² plus one chunk."""
    d = x.shape[1]
    gram = np.zeros((d, d))
    for start in range(0, x.shape[0], GRAM_CHUNK_ROWS):
        chunk = np.asarray(x[start : start + GRAM_CHUNK_ROWS], dtype=np.float64)
        gram += chunk.T @ chunk
    eigenvalues = np.linalg.eigvalsh(gram)
    top = float(eigenvalues[-1]) if d else 0.0
    if not np.isfinite(top) or top <= 0.0:
        return 0
    return int((eigenvalues > top * d * np.finfo(np.float64).eps).sum())


def gram_ranks(states: Sequence[np.ndarray]) -> list[int]:
    """gram_rank of every source layer's training rows: states h_0..h_{L-1} (h_L is only ever a
    target)."""
    return [gram_rank(states[layer]) for layer in range(len(states) - 1)]


def rank_message(model: str, corpus: str, ranks: Sequence[int], width: int, rows: int) -> str:
    """The warning for source layers whose Gram rank is below the width."""
    short = [f"{layer} (rank {rank})" for layer, rank in enumerate(ranks) if rank < width]
    return (
        f"{model} on {corpus}: the training rows of source layer(s) {', '.join(short)} span "
        f"fewer than the width {width} dimensions although there are {rows} rows (repeated "
        "rows, e.g. layer 0's token embeddings of a token seen many times): every map from "
        "those layers is underdetermined there and only the minimum-norm solution is fitted; "
        "more distinct text raises the rank: sizes.train (sentences) or positions_per_sentence"
    )


def few_rows_message(model: str, corpus: str, method: str, rows: int, width: int) -> str:
    """The warning for a fit with fewer than ROWS_PER_COEFFICIENT rows per coefficient."""
    need = ROWS_PER_COEFFICIENT * width
    return (
        f"{model} on {corpus}, {method}: {rows} training rows at width {width} are "
        f"{rows / width:.2f} rows per coefficient, fewer than {ROWS_PER_COEFFICIENT}: least "
        "squares overfits and held-out r² falls (a measure of too few rows, not of how linear "
        f"the model is); {need} rows reach {ROWS_PER_COEFFICIENT}: raise sizes.train "
        "(sentences) or positions_per_sentence (rows per sentence, up to all)"
    )


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


def recorded_gram_ranks(metadata: Mapping[str, object]) -> list[int] | None:
    """The source layers' Gram ranks a map file's (decoded) metadata records, None if none
    (files written before GRAM_RANKS)."""
    ranks = metadata.get(GRAM_RANKS)
    return None if ranks is None else [int(r) for r in ranks]  # type: ignore[union-attr]


def with_training_rows(
    table: pa.Table, map_files: Mapping[str, str | Path], *, model: str, corpus: str
) -> pa.Table:
    """The parameter table (jtc.shortcuts.maps.parameter_table) with more columns:
    `training_rows` (the rows each method's maps were fitted on, from its map file; null for
    id, which fits nothing), `underdetermined` (fewer rows than `hidden_size`, the width of
    the states a map reads; false for id, null where a map file records no rows),
    `rows_per_coefficient` (training_rows / hidden_size), `gram_rank` (the lowest numerical
    rank of a source layer's Gram matrix, GRAM_RANKS; null for id and files that record none)
    and `rank_deficient` (gram_rank below hidden_size). Logs a warning (logger "jtc") for every
    underdetermined method, every method below ROWS_PER_COEFFICIENT rows per coefficient, and
    once for the source layers short of full rank."""
    import pyarrow as pa

    from jtc.shortcuts.maps import read_metadata

    metadata = {method: read_metadata(path) for method, path in map_files.items()}
    rows = {method: training_rows(meta) for method, meta in metadata.items()}
    ranks = {method: recorded_gram_ranks(meta) for method, meta in metadata.items()}
    counts, flags, per_coefficient, lowest, deficient = [], [], [], [], []
    rank_warned = False
    for method, width in zip(
        table.column("method").to_pylist(), table.column("hidden_size").to_pylist(), strict=True
    ):
        n, layer_ranks = rows.get(method), ranks.get(method)
        counts.append(n)
        flags.append(underdetermined(n, width) if method in rows else False)
        per_coefficient.append(None if n is None else n / width)
        lowest.append(min(layer_ranks) if layer_ranks else None)
        deficient.append(
            (lowest[-1] < width if layer_ranks else None) if method in rows else False
        )
        if n is not None:
            if not warn_if_underdetermined(model, corpus, method, n, width):
                if n < ROWS_PER_COEFFICIENT * width:
                    log.warning("%s", few_rows_message(model, corpus, method, n, width))
            if deficient[-1] and not rank_warned:
                log.warning("%s", rank_message(model, corpus, layer_ranks, width, n))
                rank_warned = True
    table = table.append_column("training_rows", pa.array(counts, pa.int64()))
    table = table.append_column("underdetermined", pa.array(flags, pa.bool_()))
    table = table.append_column("rows_per_coefficient", pa.array(per_coefficient, pa.float64()))
    table = table.append_column("gram_rank", pa.array(lowest, pa.int64()))
    return table.append_column("rank_deficient", pa.array(deficient, pa.bool_()))


def with_part_training_rows(
    table: pa.Table, path: str | Path, part_maps: Mapping[tuple[int, str], ShortcutMap]
) -> pa.Table:
    """The part r² table (jtc.shortcuts.parts.part_r2_table) with `training_rows` (the rows the
    part maps were fitted on, from their file `path`; null if it records none),
    `underdetermined` (fewer rows than the part's input width, the width of its map) and
    `rows_per_coefficient` (training_rows / that width). Logs a
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
    table = table.append_column("underdetermined", pa.array(flags, pa.bool_()))
    per_coefficient = [None if rows is None else rows / width for width in widths]
    return table.append_column("rows_per_coefficient", pa.array(per_coefficient, pa.float64()))
