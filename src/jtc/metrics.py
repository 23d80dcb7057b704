"""Quality of fit: r² per coordinate, averaged uniformly over coordinates (scikit-learn's
`r2_score(..., multioutput="uniform_average")`, including its rule for constant coordinates)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from .maps import load_maps

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


def r2_table(rows: list[tuple[str, str, str, int, int, float]]) -> pa.Table:
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in R2_COLUMNS]
    types = [pa.string(), pa.string(), pa.string(), pa.int32(), pa.int32(), pa.float64()]
    return pa.table(
        {name: pa.array(col, t) for name, col, t in zip(R2_COLUMNS, columns, types, strict=True)}
    )


def layer_r2_table(
    states: Sequence[np.ndarray], maps: Mapping[str, Sequence[str]], *, model: str, corpus: str
) -> pa.Table:
    """r² of every method on the layer pairs it maps, from the states h_0..h_L of the same rows.

    `maps` gives, per method, its map files (one per source layer, in order): a fitted method
    scores the pairs its files hold (a trained method may fit only the maps into the last
    layer); a method with no files is id, scored on every pair l < l'."""
    n_layers = len(states) - 1
    rows = []
    for method in sorted(maps):
        files = maps[method]
        for source in range(n_layers):
            if files:
                fitted = load_maps(files[source])
            else:
                fitted = dict.fromkeys(range(source + 1, n_layers + 1))
            for target, shortcut in fitted.items():
                predicted = states[source] if shortcut is None else shortcut(states[source])
                rows.append(
                    (model, corpus, method, source, target, r2_score(states[target], predicted))
                )
    return r2_table(rows)
