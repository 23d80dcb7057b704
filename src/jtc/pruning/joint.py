"""Depth pruning's rotation_replaceme stand-in fitted from the calibration sums (numpy): ReplaceMe's
transform T in block i's MLP and a scaled rotation s·Q of the stream after it, together

    h_{i+n} := s·(r_i + X_i T) Q

(X_i block i's feed-forward output, r_i = h_i − X_i). Both fold into a standard checkpoint: T into
block i's last feed-forward layer (as ReplaceMe), s·Q into the embeddings and blocks 1..i
(as rotation, jtc.pruning.rotate), so blocks i+n+1.. read s·(r_i + X_i T) Q.

The least squares over (T, s, Q) has a closed form. With M = s·T Q (any matrix, as T is any),
the stand-in is s·r Q + X M; for a given (s, Q) the best M is the least squares of
y − s·r Q on X (y = h_{i+n}), which leaves the part of y − s·r Q outside X's span. So (s, Q) is
the scaled orthogonal Procrustes fit of P y on P r, P the projection off X's span (over tokens):

    Σ (Pr)ᵀ(Py) = Σ rᵀy − Aᵀ G⁻¹ B,   ||Pr||² = ||r||² − tr(Aᵀ G⁻¹ A)

with G = Σ XᵀX, A = Σ Xᵀr, B = Σ Xᵀy, and then M = G⁻¹(B − s·A Q), T = M Qᵀ / s. It is the
global minimum of the joint problem (its loss is ||Py||² − s·Σσ, ||Py||² = ||y||² − tr(Bᵀ G⁻¹ B)):
never above ReplaceMe's loss (s = 1, Q = I) nor the rotation's (T = I). The sums are those
jtc.pruning.fits.SpanGrams holds: C = Σ h_iᵀh_{i+n}, F = Σ X_iᵀh_{i+n}, F_own = Σ X_iᵀh_i, G;
Σ rᵀy = C − F, A = F_own − G, ||r||² = ||h_i||² − 2 tr(F_own) + tr(G). With a ridge, G⁻¹ is
the ridged solve (the loss reported is then the stand-in's own error, exact from the sums).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def joint_loss(
    t: np.ndarray,
    scale: float,
    q: np.ndarray,
    sums: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    xx: float,
    yy: float,
) -> float:
    """Σ ||s·(h_i + X_i D) Q − h_{i+n}||² (D = T − I) from the sums (C, F, F_own, G):
    s²·Σ||u||² − 2s·tr(Qᵀ Σ uᵀh_{i+n}) + ||h_{i+n}||², u = h_i + X_i D."""
    cross, ffn_cross, ffn_own, gram = sums
    d = t - np.eye(len(t))
    uu = xx + 2.0 * float(np.sum(d * ffn_own)) + float(np.sum(d * (gram @ d)))
    uy = cross + d.T @ ffn_cross
    return scale * scale * uu - 2.0 * scale * float(np.sum(q * uy)) + yy


def fit_rotation_replaceme(
    sums: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    xx: float,
    yy: float,
    solve: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, float, np.ndarray, float]:
    """(T, s, Q, L): the joint least-squares fit (module docstring) of one span from its sums
    (C, F, F_own, G), ||h_i||², ||h_{i+n}||² and `solve(Z)`, G⁻¹ Z (the span's ridge applied).
    L is Σ ||s·(r_i + X_i T) Q − h_{i+n}||² (0 or more)."""
    cross, ffn_cross, ffn_own, gram = sums
    a = ffn_own - gram  # Σ Xᵀr
    ga, gb = solve(a), solve(ffn_cross)
    projected = (cross - ffn_cross) - a.T @ gb  # Σ (Pr)ᵀ(Py)
    rr = xx - 2.0 * float(np.trace(ffn_own)) + float(np.trace(gram)) - float(np.sum(a * ga))
    u, sigma, vt = np.linalg.svd(projected)
    q = u @ vt
    scale = float(sigma.sum()) / rr if rr > 0 else 0.0
    if scale <= 0:  # nothing of y outside X's span lines up with r: ReplaceMe alone
        q, scale = np.eye(len(cross)), 1.0
    t = (gb - scale * (ga @ q)) @ q.T / scale
    return t, scale, q, max(joint_loss(t, scale, q, sums, xx, yy), 0.0)
