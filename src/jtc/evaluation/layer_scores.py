"""Every method's prediction from every layer of a validation states folder, scored position by
position against the model's own final prediction (jtc.model.scoring.score): the head's
summary of the final prediction and each layer's states are computed or read once for all
methods."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from jtc.data.states import read_aligned, read_positions
from jtc.logs import Progress
from jtc.model.head import Head
from jtc.model.scoring import final_reference, score, score_table
from jtc.shortcuts.maps import to_last_layer

if TYPE_CHECKING:
    from jtc.evaluation.shortlist import Shortlist

log = logging.getLogger(__name__)


def layer_scores(
    head: Head,
    val_dir: str | os.PathLike,
    maps: Mapping[str, str | None],
    methods: Sequence[str],
    top_k: int,
    check: Shortlist | None = None,
) -> dict[str, pa.Table]:
    """{method: its per-position scores at every layer} for each of `methods` (`maps`: each
    method's map file, None for id): jtc.model.scoring.score_table's rows, layer 0 first,
    against the final prediction's top `top_k`; with a shortlist `check`, also its columns
    (jtc.model.scoring.SHORTLIST_COLUMNS). Logs each method's precision@1 at each layer."""
    positions, info = read_positions(val_dir)
    last = info["num_layers"]
    ids = positions.column("sentence_id").to_numpy()
    gold = positions.column("gold_id").to_numpy()
    reference = final_reference(head, read_aligned(val_dir, last, ids, np.float32), top_k)
    tables: dict[str, list[pa.Table]] = {method: [] for method in methods}
    progress = Progress(last + 1, "decode", "layers")
    for layer in range(last + 1):
        states = read_aligned(val_dir, layer, ids, np.float32)
        for method in methods:
            mapped = to_last_layer(maps[method], layer, states, last)
            scores = score(head, reference, mapped.astype(np.float32, copy=False), gold, check)
            tables[method].append(score_table(method, layer, ids, scores))
            hits = np.mean(scores["final_rank"] == 1)
            log.info("%s, layer %d: precision@1 %.3f", method, layer, hits)
        progress.update(1)
    return {method: pa.concat_tables(parts) for method, parts in tables.items()}
