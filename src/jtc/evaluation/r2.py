"""The r² table: the quality of fit (jtc.shortcuts.quality) of every method on every layer pair
it maps, from the states of the same rows, on the CPU or a GPU."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from jtc.devices import float64_on as _on
from jtc.shortcuts.maps import load_maps
from jtc.shortcuts.methods import METHODS
from jtc.shortcuts.quality import shortcut_r2

if TYPE_CHECKING:
    import torch

R2_COLUMNS = ("model", "corpus", "method", "source_layer", "target_layer", "r2")


def r2_table(rows: list[tuple[str, str, str, int, int, float]]) -> pa.Table:
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in R2_COLUMNS]
    types = [pa.string(), pa.string(), pa.string(), pa.int32(), pa.int32(), pa.float64()]
    return pa.table(
        {name: pa.array(col, t) for name, col, t in zip(R2_COLUMNS, columns, types, strict=True)}
    )


def scored_tables(
    scores: Mapping[str, Sequence[tuple[int, int, float]]], *, model: str, corpus: str
) -> dict[str, pa.Table]:
    """Each method's r² of the pairs it scored as it fitted them ((source, target, r²) rows,
    jtc.shortcuts.closed_fit) as an r² table of its own."""
    return {
        method: r2_table([(model, corpus, method, s, t, r2) for s, t, r2 in rows])
        for method, rows in scores.items()
    }


def layer_r2_table(
    states: Sequence[np.ndarray],
    maps: Mapping[str, str | None],
    *,
    model: str,
    corpus: str,
    device: torch.device | None = None,
    scored: Mapping[str, pa.Table] | None = None,
) -> pa.Table:
    """r² of every method on the layer pairs it maps, from the states h_0..h_L of the same rows
    (on `device`, a GPU, when given: the states are copied there once).

    `maps` gives, per method, its map file: a fitted method scores the pairs its file holds (a
    trained method may fit only the maps into the last layer); a method with no file (None)
    is id, scored on every pair l < l'. `scored` gives, per method, its rows already scored
    where its maps were fitted (the closed-form methods, jtc.shortcuts.closed_fit, whose files
    may keep only the maps into the last layer): they take their place in the method order."""
    scored = scored or {}
    n_layers = len(states) - 1
    if device is not None:
        states = [_on(device, s) for s in states]
    rows = []
    for method in sorted({*maps, *scored}):
        if method in scored:
            table = scored[method]
            rows += zip(*(table.column(c).to_pylist() for c in R2_COLUMNS), strict=True)
            continue
        path = maps[method]
        for source in range(n_layers):
            if path is not None:
                fitted = load_maps(path, source)
            else:
                fitted = dict.fromkeys(range(source + 1, n_layers + 1))
            for target, shortcut in fitted.items():
                r2 = shortcut_r2(states[target], states[source], shortcut, device)
                rows.append((model, corpus, method, source, target, r2))
    return r2_table(rows)


def table_methods(table: pa.Table) -> list[str]:
    """The methods of an r² table (its `method` column), in jtc.shortcuts.methods.METHODS
    order."""
    present = set(table.column("method").to_pylist())
    return [method for method in METHODS if method in present]
