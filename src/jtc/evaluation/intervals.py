"""Ratios of sums with bootstrap intervals: a statistic of sums over units (sentences, windows,
prompts), such as a token-weighted mean (summed cross-entropy over summed tokens) or a perplexity
ratio, with its interval from bootstrap resamples of the units. Several groups (runs, subjects)
are resampled with the same draws of the units, so their intervals are paired."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from jtc.evaluation.prediction import bootstrap_counts


def ratio_intervals(
    sums: np.ndarray,
    ratios: Callable[[np.ndarray], np.ndarray],
    resamples: int,
    seed: int,
    level: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, low, high), each (groups, m): `ratios` of the sums over every unit, and the
    `level` interval of `ratios` over `resamples` bootstrap resamples of the units (the units'
    draw counts of jtc.evaluation.prediction.bootstrap_counts(units, resamples, seed), the same
    for every group; NaN resamples are left out).

    `sums` (groups, units, k): each unit's sums of k quantities in each group. `ratios` maps
    summed quantities (..., k) to the m statistics (..., m), e.g. for (tokens, cross-entropy)
    `lambda s: s[..., 1:] / s[..., :1]`."""
    counts = bootstrap_counts(sums.shape[1], resamples, seed)
    value = ratios(sums.sum(1))
    resampled = ratios(np.einsum("bu,guk->gbk", counts, sums))  # (groups, resamples, m)
    tail = (1.0 - level) / 2.0
    with np.errstate(invalid="ignore"):
        low, high = np.nanquantile(resampled, [tail, 1.0 - tail], axis=1)
    return value, low, high
