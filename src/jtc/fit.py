"""Least-squares shortcut maps (JTC's "mat"): h_l' ≈ A h_l, no intercept.

One factorisation of the float64 Gram matrix X^T X per source layer serves every target layer.
On a GPU the same float64 computation runs through torch (TorchSourceSolver); the CPU path uses
numpy and scipy and imports no torch.
Maps follow torch.nn.Linear's convention: weight has shape (d_out, d_in), pred = h @ weight.T;
they are stored by jtc.maps.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg

from .devices import float64_on

if TYPE_CHECKING:
    import torch

MAX_CONDITION = 1e12  # above this (estimated) condition number of X^T X, use the pseudo-inverse
RHS_BYTES = 64 << 20  # targets solved together: at most this much float64 right-hand side


class SourceSolver:
    """Solves min_W ||X W - Y||² for many Y with one factorisation of X.

    It forms the projection P = (X^T X)^-1 X^T (d × n) once, through a Cholesky factorisation of
    the float64 Gram matrix, or P = pinv(X) (the minimum-norm solution) when X^T X is singular
    or ill-conditioned; every target is then one matrix product W = P Y."""

    def __init__(self, x: np.ndarray):
        self.x = np.asarray(x, dtype=np.float64)
        gram = self.x.T @ self.x
        self.method = "cholesky"
        try:
            self.factor = scipy.linalg.cho_factor(gram, lower=False, check_finite=True)
            # a factorisation of a near-singular Gram matrix succeeds but is unreliable
            if not _well_conditioned(self.factor[0], np.abs(gram).sum(0).max()):
                raise np.linalg.LinAlgError("ill-conditioned Gram matrix")
        except (np.linalg.LinAlgError, ValueError):
            # rank-deficient (constant dimension, fewer samples than width): minimum-norm solution
            # singular values below the numerical-rank tolerance (LAPACK's lstsq default,
            # max(n, d)·eps·σ_max) are rounding noise: inverting them would blow up any state
            # outside the training span (e.g. a position never seen in training)
            self.method = "pinv"
            self.projection = np.linalg.pinv(
                self.x, rtol=max(self.x.shape) * np.finfo(np.float64).eps
            )
        else:
            self.projection = scipy.linalg.cho_solve(self.factor, self.x.T, check_finite=False)

    def solve(self, y: np.ndarray) -> np.ndarray:
        """W of shape (d_in, d_out) with X W ≈ Y; Y may stack several targets side by side."""
        return self.projection @ np.asarray(y, dtype=np.float64)

    def solve_transposed(self, y: np.ndarray) -> np.ndarray:
        """W^T (d_out, d_in): stacked targets come out as contiguous row blocks."""
        return np.asarray(y, dtype=np.float64).T @ self.projection.T


def _well_conditioned(upper_factor: np.ndarray, gram_norm: float) -> bool:
    """Whether LAPACK's estimate of the Gram matrix's condition number (from its upper
    Cholesky factor and its 1-norm) is at most MAX_CONDITION."""
    rcond, info = scipy.linalg.lapack.dpocon(upper_factor, gram_norm)
    return info == 0 and rcond >= 1.0 / MAX_CONDITION


class TorchSourceSolver:
    """SourceSolver's computation in float64 on a torch device (a GPU): the same Gram matrix,
    the same choice between Cholesky and the pseudo-inverse (LAPACK's condition estimate, from
    the factor copied to the CPU), the same projection; results agree to rounding."""

    def __init__(self, x: np.ndarray, device: torch.device):
        import torch

        self.device = device
        self.x = float64_on(device, x)
        gram = self.x.T @ self.x
        factor, info = torch.linalg.cholesky_ex(gram, upper=True)
        finite = bool(torch.isfinite(gram).all())
        gram_norm = float(gram.abs().sum(0).max())
        self.method = "cholesky"
        if finite and int(info) == 0 and _well_conditioned(factor.cpu().numpy(), gram_norm):
            self.projection = torch.cholesky_solve(self.x.T, factor, upper=True)
        else:
            self.method = "pinv"
            eps = torch.finfo(torch.float64).eps
            self.projection = torch.linalg.pinv(self.x, rtol=max(self.x.shape) * eps)

    def solve_transposed(self, y: np.ndarray) -> np.ndarray:
        """W^T (d_out, d_in), as SourceSolver.solve_transposed, rounded to float32 on the device
        (the type maps are stored in: the same rounding as the CPU path's when it is saved),
        which halves what comes back from the GPU."""
        import torch

        y_t = float64_on(self.device, y)
        return (y_t.T @ self.projection.T).to(torch.float32).cpu().numpy()


def fit_source(
    x: np.ndarray,
    targets: Iterable[tuple[int, np.ndarray]],
    device: torch.device | None = None,
) -> tuple[dict[int, np.ndarray], str]:
    """Weights (d_out, d_in) for each target layer, and the solver used; on `device` (a GPU)
    when given (weights computed in float64, returned in float32), else on the CPU (float64).

    Targets are copied side by side into one float64 buffer (at most RHS_BYTES) and solved with
    one matrix product per buffer: full BLAS speed, bounded memory."""
    if device is not None:  # each target straight to the device: no float64 copy on the CPU
        solver = TorchSourceSolver(x, device)
        return {layer: solver.solve_transposed(y) for layer, y in targets}, solver.method
    solver = SourceSolver(x)
    n = solver.x.shape[0]
    weights: dict[int, np.ndarray] = {}
    buffer: np.ndarray | None = None
    pending: list[tuple[int, int, int]] = []  # (layer, first column, width)
    used = 0

    def flush() -> None:
        nonlocal used
        if pending:
            solved = solver.solve_transposed(buffer[:, :used])
            for layer, col, width in pending:
                weights[layer] = solved[col : col + width]
            pending.clear()
            used = 0

    for layer, y in targets:
        width = y.shape[1]
        if buffer is None:
            buffer = np.empty((n, max(width, RHS_BYTES // (8 * n))), dtype=np.float64)
        if used + width > buffer.shape[1]:
            flush()
        buffer[:, used : used + width] = y
        pending.append((layer, used, width))
        used += width
    flush()
    return weights, solver.method
