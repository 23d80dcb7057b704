"""The training-free magnitude compensations of depth pruning (numpy): the state after the cut is
h_i rescaled so that its magnitudes match h_{i+n}'s on the calibration tokens (docs/method.md,
"Depth pruning"). Each scale is a ratio of mean absolute values, per channel, from the sums
"magnitude" (Σ|h_l| per channel) and "hadamard_magnitude" (Σ|h_l H| per channel) of
jtc.pruning.fits.SpanGrams:

    prune_comp          h_{i+n} := s·h_i, s = mean_k Σ|h_{i+n,k}| / Σ|h_{i,k}|
    prune_comp_channel  h_{i+n} := h_i diag(c), c_k = Σ|h_{i+n,k}| / Σ|h_{i,k}|
    linear_patch        h_{i+n} := h_i H D Hᵀ, D_kk = Σ|(h_{i+n} H)_k| / Σ|(h_i H)_k|

Prune&Comp's code (arXiv 2507.18212, magcomp.get_scale_params) takes, on each calibration
batch, the per-channel ratio of the mean |h_{i+n}| to the mean |h_i|, averages it over the
batches, then over the channels (s); the per-channel vector before that last mean is
prune_comp_channel's c. LinearPatch's training-free patch (arXiv 2505.24680,
layer_select.get_scale_params) is the same per-channel ratio in the Hadamard-rotated basis,
P = H diag(d) Hᵀ. jtc takes each ratio over all calibration tokens at once (a ratio of sums,
where the papers average per-batch ratios), so that it comes from one streaming pass; H is
jtc.pruning.hadamard's (a Hadamard matrix of the same order as the paper's, not the same one).
A channel that is zero on every calibration token keeps scale 1.

Maps follow torch.nn.Linear's convention: `weight` = (s·I)ᵀ, diag(c), Pᵀ = P. prune_comp's
weight is a scaled rotation with Q = I, so it exports as `rotation` does (folded into the
embeddings and blocks 1..i, jtc.pruning.rotate; Prune&Comp's own fuse_scale scales the same
weights: the embeddings and blocks 1..i's o_proj and down_proj). The calibration loss
||ĥ − h_{i+n}||² / ||h_{i+n}||² needs only the diagonals of Σ h_iᵀh_i and Σ h_iᵀh_{i+n} (in
H's basis for linear_patch), and prune_comp only the scalar sums.
"""

from __future__ import annotations

import numpy as np

from jtc.pruning.fits import SpanFit, SpanGrams
from jtc.pruning.hadamard import hadamard

SOLVER = "magnitude"  # SpanFit.solver of these fits


def magnitude_ratio(target: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Per channel Σ|y_k| / Σ|x_k| from the two per-channel sums; 1 where Σ|x_k| = 0."""
    ratio = np.ones(len(source), dtype=np.float64)
    np.divide(target, source, out=ratio, where=source > 0)
    return ratio


def _diagonal_error(
    yy: float, scales: np.ndarray, cross_diag: np.ndarray, gram_diag: np.ndarray
) -> float:
    """||Y − X diag(c)||² = ||Y||² − 2 Σ c_k (XᵀY)_kk + Σ c_k² (XᵀX)_kk."""
    return yy - 2.0 * float(scales @ cross_diag) + float((scales * scales) @ gram_diag)


def fit_prune_comp(grams: SpanGrams, start: int, length: int, rank: int, ridge: float) -> SpanFit:
    """prune_comp: h_{i+n} := s·h_i, s the mean over channels of the magnitude ratio
    (`rank`, `ridge`: nothing to set)."""
    i, j = start, start + length
    yy = float(grams.squares[j])
    scale = float(magnitude_ratio(grams.magnitudes[j], grams.magnitudes[i]).mean())
    error = yy - 2.0 * scale * grams.dots[i, j] + scale * scale * float(grams.squares[i])
    weight = scale * np.eye(len(grams.magnitudes[i]))
    return SpanFit("prune_comp", start, length, {"weight": weight}, SOLVER, max(error, 0.0) / yy)


def fit_prune_comp_channel(
    grams: SpanGrams, start: int, length: int, rank: int, ridge: float
) -> SpanFit:
    """prune_comp_channel: h_{i+n} := h_i diag(c), c the per-channel magnitude ratio."""
    i, j = start, start + length
    yy = float(grams.squares[j])
    scales = magnitude_ratio(grams.magnitudes[j], grams.magnitudes[i])
    cross, gram = np.diag(grams.state_cross[i, j]), np.diag(grams.state_grams[i])
    error = _diagonal_error(yy, scales, cross, gram)
    tensors = {"weight": np.diag(scales)}
    return SpanFit("prune_comp_channel", start, length, tensors, SOLVER, max(error, 0.0) / yy)


def fit_linear_patch(grams: SpanGrams, start: int, length: int, rank: int, ridge: float) -> SpanFit:
    """linear_patch: h_{i+n} := h_i P, P = H diag(d) Hᵀ, d the per-channel magnitude ratio of
    the Hadamard-rotated states."""
    i, j = start, start + length
    yy = float(grams.squares[j])
    scales = magnitude_ratio(grams.hadamard_magnitudes[j], grams.hadamard_magnitudes[i])
    h = hadamard(len(scales))

    def rotated_diagonal(matrix: np.ndarray) -> np.ndarray:  # (Hᵀ M H)_kk
        return ((matrix @ h) * h).sum(0)

    cross = rotated_diagonal(grams.state_cross[i, j])
    gram = rotated_diagonal(grams.state_grams[i])
    error = _diagonal_error(yy, scales, cross, gram)
    patch = (h * scales) @ h.T  # symmetric: weight = Pᵀ = P
    tensors = {"weight": patch}
    return SpanFit("linear_patch", start, length, tensors, SOLVER, max(error, 0.0) / yy)
