"""Quality of fit: r² per coordinate, averaged uniformly over coordinates (scikit-learn's
`r2_score(..., multioutput="uniform_average")`, including its rule for constant coordinates).

On a GPU (a `device` given) the same float64 computation runs through torch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from jtc.devices import float64_on as _on
from jtc.shortcuts.maps import ShortcutMap, load_maps
from jtc.shortcuts.methods import METHODS

if TYPE_CHECKING:
    import torch

CONSTANT_RTOL = 1e-6
R2_COLUMNS = ("model", "corpus", "method", "source_layer", "target_layer", "r2")


def r2_score(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean over coordinates of 1 - SS_res / SS_tot (scikit-learn's uniform average).

    A constant coordinate scores 1 if it is predicted exactly and 0 otherwise, as in
    scikit-learn. (ours) "Constant" includes coordinates whose spread is below 1e-6 of the
    layer's median coordinate spread: real models have dead dimensions (values ~1e-32) whose
    SS_tot is not exactly 0, and there 1 - SS_res / SS_tot would be -1e60 and swamp the mean.
    The same tolerance decides whether such a coordinate is "predicted exactly".
    """
    y_true = np.asarray(y_true, dtype=np.float64)
    y_pred = np.asarray(y_pred, dtype=np.float64)
    ss_res = ((y_true - y_pred) ** 2).sum(axis=0)
    ss_tot = ((y_true - y_true.mean(axis=0)) ** 2).sum(axis=0)
    tolerance = (CONSTANT_RTOL * np.median(np.sqrt(ss_tot))) ** 2
    constant = ss_tot <= tolerance
    scores = np.where(ss_res <= tolerance, 1.0, 0.0)
    scores[~constant] = 1.0 - ss_res[~constant] / ss_tot[~constant]
    return float(scores.mean())


def _torch_r2_score(y_true: torch.Tensor, y_pred: torch.Tensor) -> float:
    """r2_score of float64 tensors on one device."""
    import torch

    ss_res = ((y_true - y_pred) ** 2).sum(0)
    ss_tot = ((y_true - y_true.mean(0)) ** 2).sum(0)
    tolerance = (CONSTANT_RTOL * torch.quantile(ss_tot.sqrt(), 0.5)) ** 2  # numpy's median
    constant = ss_tot <= tolerance
    exact = torch.where(ss_res <= tolerance, 1.0, 0.0).to(y_true.dtype)
    scores = torch.where(constant, exact, 1.0 - ss_res / torch.where(constant, 1.0, ss_tot))
    return float(scores.mean())


def shortcut_r2(
    y_true, source, shortcut: ShortcutMap | None, device: torch.device | None = None
) -> float:
    """r² of `shortcut` (None: the identity) predicting `y_true` from `source` states, with
    numpy, or on `device` with torch (arrays or tensors already there)."""
    if device is None:
        return r2_score(y_true, source if shortcut is None else shortcut(source))
    x = _on(device, source)
    if shortcut is not None:
        weight, bias = shortcut.affine()
        x = x @ _on(device, weight).T
        if bias is not None:
            x = x + _on(device, bias)
    return _torch_r2_score(_on(device, y_true), x)


def r2_table(rows: list[tuple[str, str, str, int, int, float]]) -> pa.Table:
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in R2_COLUMNS]
    types = [pa.string(), pa.string(), pa.string(), pa.int32(), pa.int32(), pa.float64()]
    return pa.table(
        {name: pa.array(col, t) for name, col, t in zip(R2_COLUMNS, columns, types, strict=True)}
    )


def layer_r2_table(
    states: Sequence[np.ndarray],
    maps: Mapping[str, str | None],
    *,
    model: str,
    corpus: str,
    device: torch.device | None = None,
) -> pa.Table:
    """r² of every method on the layer pairs it maps, from the states h_0..h_L of the same rows
    (on `device`, a GPU, when given: the states are copied there once).

    `maps` gives, per method, its map file: a fitted method scores the pairs its file holds (a
    trained method may fit only the maps into the last layer); a method with no file (None)
    is id, scored on every pair l < l'."""
    n_layers = len(states) - 1
    if device is not None:
        states = [_on(device, s) for s in states]
    rows = []
    for method in sorted(maps):
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
