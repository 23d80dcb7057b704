"""Quality of fit: r² per coordinate, averaged uniformly over coordinates (scikit-learn's
`r2_score(..., multioutput="uniform_average")`, including its rule for constant coordinates)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

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
