"""The studies' perplexity ratio of one stand-in against a reference on the same units
(sentences, windows), with its 95% interval from 2,000 bootstrap resamples of the units (seed 0):
jtc.evaluation.intervals.ratio_intervals, the statistic of the workflow's pruning tables."""

from __future__ import annotations

import numpy as np

from jtc.evaluation.intervals import ratio_intervals


def perplexity_ratio(ce, reference, tokens) -> tuple[float, float, float]:
    """(ratio, low, high): exp(Σ(ce − reference) / Σ tokens) of summed cross-entropies per unit
    against a reference's (the full model's, or another stand-in's: a paired ratio)."""
    difference = np.asarray(ce, dtype=float) - np.asarray(reference, dtype=float)
    sums = np.stack([np.asarray(tokens, dtype=float), difference], -1)[None]
    value, low, high = ratio_intervals(
        sums, lambda s: np.exp(s[..., 1:] / s[..., :1]), 2000, 0, 0.95
    )
    return float(value[0, 0]), float(low[0, 0]), float(high[0, 0])
