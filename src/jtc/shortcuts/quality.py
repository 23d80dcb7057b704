"""Quality of fit of a shortcut: r² per coordinate, averaged uniformly over coordinates
(scikit-learn's `r2_score(..., multioutput="uniform_average")`, including its rule for constant
coordinates).

On a GPU (a `device` given) the same float64 computation runs through torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from jtc.devices import float64_on as _on
from jtc.shortcuts.maps import ShortcutMap

if TYPE_CHECKING:
    import torch

CONSTANT_RTOL = 1e-6


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
