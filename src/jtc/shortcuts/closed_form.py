"""Closed-form shortcut maps: least squares (JTC's "mat"): h_l' ≈ A h_l, no intercept, and its
rank-r truncation in the metric of the source states, reduced-rank regression ("rrr": the
optimum of NJTC's objective, also the warm start of the trained methods in jtc.shortcuts.train).

One factorisation of the float64 Gram matrix X^T X per source layer serves every target layer;
the same Gram matrix gives the source rows' numerical rank (gram_rank), which every fit reports.
On a GPU the same float64 computation runs through torch (TorchSourceSolver); the CPU path uses
numpy and scipy and imports no torch.
Maps follow torch.nn.Linear's convention: weight has shape (d_out, d_in), pred = h @ weight.T;
low-rank maps are the parts down.weight (r, d_in) and up.weight (d_out, r),
pred = (h @ down.T) @ up.T; they are stored by jtc.shortcuts.maps.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg

from jtc.devices import float64_on

if TYPE_CHECKING:
    import torch

MAX_CONDITION = 1e12  # above this (estimated) condition number of X^T X, use the pseudo-inverse
RHS_BYTES = 64 << 20  # targets solved together: at most this much float64 right-hand side


def gram_rank(eigenvalues: np.ndarray) -> int:
    """The numerical rank of a float64 Gram matrix X^T X (d × d) from its eigenvalues: those
    above λ_max · d · eps (numpy.linalg.matrix_rank's default tolerance, applied to X^T X).
    Repeated rows (a token's embedding at layer 0, read once per occurrence) add rows but no
    rank: a fit whose rank is below d is underdetermined whatever its row count."""
    eigenvalues = np.asarray(eigenvalues, dtype=np.float64)
    top = float(eigenvalues.max(initial=0.0))
    if not np.isfinite(top) or top <= 0:
        return 0
    return int((eigenvalues > top * len(eigenvalues) * np.finfo(np.float64).eps).sum())


def _eigenvalues(gram: np.ndarray) -> np.ndarray:
    if not np.isfinite(gram).all():
        return np.zeros(len(gram))
    return scipy.linalg.eigvalsh(gram, check_finite=False)


class SourceSolver:
    """Solves min_W ||X W - Y||² for many Y with one factorisation of X.

    It forms the projection P = (X^T X)^-1 X^T (d × n) once, through a Cholesky factorisation of
    the float64 Gram matrix, or P = pinv(X) (the minimum-norm solution) when X^T X is singular
    or ill-conditioned; every target is then one matrix product W = P Y. `rank`: the Gram
    matrix's numerical rank (gram_rank)."""

    def __init__(self, x: np.ndarray):
        self.x = np.asarray(x, dtype=np.float64)
        self.gram = gram = self.x.T @ self.x  # kept: reduced-rank regression's metric
        self.method = "cholesky"
        self.factor = cholesky_factor(gram)
        if self.factor is None:
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

    @functools.cached_property
    def rank(self) -> int:
        """The Gram matrix's numerical rank (gram_rank), computed when first asked for."""
        return gram_rank(_eigenvalues(self.gram))

    def solve(self, y: np.ndarray) -> np.ndarray:
        """W of shape (d_in, d_out) with X W ≈ Y; Y may stack several targets side by side."""
        return self.projection @ np.asarray(y, dtype=np.float64)

    def solve_transposed(self, y: np.ndarray) -> np.ndarray:
        """W^T (d_out, d_in): stacked targets come out as contiguous row blocks."""
        return np.asarray(y, dtype=np.float64).T @ self.projection.T


def cholesky_factor(gram: np.ndarray) -> tuple[np.ndarray, bool] | None:
    """The upper Cholesky factor of a float64 Gram matrix (scipy's cho_factor pair), or None
    when the matrix is not finite, singular or ill-conditioned: then the minimum-norm solution
    (the pseudo-inverse) is used instead."""
    try:
        factor = scipy.linalg.cho_factor(gram, lower=False, check_finite=True)
    except (np.linalg.LinAlgError, ValueError):
        return None
    # a factorisation of a near-singular Gram matrix succeeds but is unreliable
    return factor if _well_conditioned(factor[0], np.abs(gram).sum(0).max()) else None


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
        self.gram = gram = self.x.T @ self.x
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

    @functools.cached_property
    def rank(self) -> int:
        """The Gram matrix's numerical rank (gram_rank), from its eigenvalues on the device."""
        import torch

        if not bool(torch.isfinite(self.gram).all()):
            return 0
        return gram_rank(torch.linalg.eigvalsh(self.gram).cpu().numpy())

    def solve_transposed_on_device(self, y: np.ndarray) -> torch.Tensor:
        """W^T (d_out, d_in) in float64 on the device."""
        return float64_on(self.device, y).T @ self.projection.T

    def solve_transposed(self, y: np.ndarray) -> np.ndarray:
        """W^T (d_out, d_in), as SourceSolver.solve_transposed, rounded to float32 on the device
        (the type maps are stored in: the same rounding as the CPU path's when it is saved),
        which halves what comes back from the GPU."""
        import torch

        return self.solve_transposed_on_device(y).to(torch.float32).cpu().numpy()


def fit_source(
    x: np.ndarray,
    targets: Iterable[tuple[int, np.ndarray]],
    device: torch.device | None = None,
) -> tuple[dict[int, np.ndarray], str, int]:
    """Weights (d_out, d_in) for each target layer, the solver used and the numerical rank of
    the source rows' Gram matrix (gram_rank); on `device` (a GPU)
    when given (weights computed in float64, returned in float32), else on the CPU (float64).

    Targets are copied side by side into one float64 buffer (at most RHS_BYTES) and solved with
    one matrix product per buffer: full BLAS speed, bounded memory."""
    solver, maps = solve_source(x, targets, device)
    return dict(maps), solver.method, solver.rank


def solve_source(
    x: np.ndarray,
    targets: Iterable[tuple[int, np.ndarray]],
    device: torch.device | None = None,
) -> tuple[SourceSolver | TorchSourceSolver, Iterator[tuple[int, np.ndarray]]]:
    """fit_source's solver (its `method` and `rank`) and its weights (d_out, d_in) one target
    at a time, as they are solved (float64 on the CPU, float32 from `device`): a job that
    writes or scores each map and lets it go holds one buffer of maps, not a source's all."""
    if device is not None:  # each target straight to the device: no float64 copy on the CPU
        solver = TorchSourceSolver(x, device)
        return solver, ((layer, solver.solve_transposed(y)) for layer, y in targets)
    solver = SourceSolver(x)
    return solver, _solved(solver, targets)


def _solved(
    solver: SourceSolver, targets: Iterable[tuple[int, np.ndarray]]
) -> Iterator[tuple[int, np.ndarray]]:
    """(layer, W^T (d_out, d_in)) for each target, solved a buffer of targets at a time."""
    n = solver.x.shape[0]
    buffer: np.ndarray | None = None
    pending: list[tuple[int, int, int]] = []  # (layer, first column, width)
    used = 0

    def flush() -> Iterator[tuple[int, np.ndarray]]:
        nonlocal used
        if pending:
            solved = solver.solve_transposed(buffer[:, :used])
            for layer, col, width in pending:
                yield layer, solved[col : col + width]
            pending.clear()
            used = 0

    for layer, y in targets:
        width = y.shape[1]
        if buffer is None:
            buffer = np.empty((n, max(width, RHS_BYTES // (8 * n))), dtype=np.float64)
        if used + width > buffer.shape[1]:
            yield from flush()
        buffer[:, used : used + width] = y
        pending.append((layer, used, width))
        used += width
    yield from flush()


# --- reduced-rank regression -------------------------------------------------------------------
#
# min ||X C - Y||² over C (d_in, d_out) of rank at most r: with W = (X^T X)^-1 X^T Y and V_r the
# top-r eigenvectors of W^T (X^T X) W = (X W)^T (X W) (the top-r right singular vectors of the
# fitted values X W), C = W V_r V_r^T (Eckart–Young on X W, since X C - Y = (X C - X W) + (X W - Y)
# with the second term orthogonal to the column space of X). Stored as down = (W V_r)^T (r, d_in)
# and up = V_r (d_out, r). Eigenvectors come sorted by eigenvalue, largest first, each with its
# largest-magnitude entry positive: the same parts from run to run and from the CPU to a GPU.


def _eigh_top(m: np.ndarray, rank: int) -> np.ndarray:
    """The top `rank` eigenvectors (columns) of a symmetric matrix, largest eigenvalue first."""
    d = len(m)
    _, vectors = scipy.linalg.eigh(
        (m + m.T) / 2, subset_by_index=[d - rank, d - 1], check_finite=False
    )
    vectors = vectors[:, ::-1]
    pivot = vectors[np.abs(vectors).argmax(0), np.arange(rank)]
    return vectors * np.where(pivot < 0, -1.0, 1.0)


def reduced_rank_parts(w_t: np.ndarray, gram: np.ndarray, rank: int) -> tuple[np.ndarray, ...]:
    """(down (r, d_in), up (d_out, r)) in float64 from the least-squares W^T (d_out, d_in)."""
    up = _eigh_top(w_t @ (gram @ w_t.T), min(rank, len(w_t)))
    return up.T @ w_t, up


def _reduced_rank_parts_torch(w_t: torch.Tensor, gram: torch.Tensor, rank: int):
    """reduced_rank_parts on a torch device, float64 (torch.linalg.eigh: all eigenvectors)."""
    import torch

    m = w_t @ (gram @ w_t.T)
    _, vectors = torch.linalg.eigh((m + m.T) / 2)
    up = vectors.flip(1)[:, : min(rank, len(w_t))]
    pivot = up.gather(0, up.abs().argmax(0, keepdim=True))
    up = up * torch.where(pivot < 0, -1.0, 1.0).to(up.dtype)
    return up.T @ w_t, up


def _check_rank(rank: int) -> None:
    if rank < 1:
        raise ValueError(f"rank {rank}: a reduced-rank map needs rank at least 1")


def _torch_device(device) -> torch.device | None:
    """None (numpy and scipy on the CPU) for None or "cpu"; any other device, a torch.device
    for the CPU included, runs the torch path (as fit_source does for any device given)."""
    if device is None or (isinstance(device, str) and device == "cpu"):
        return None
    import torch

    return torch.device(device)


def fit_source_reduced_rank(
    x: np.ndarray,
    targets: Iterable[tuple[int, np.ndarray]],
    rank: int,
    device: str | torch.device | None = "cpu",
) -> tuple[dict[int, dict[str, np.ndarray]], str, int]:
    """rrr: the rank-`rank` reduced-rank regression map into each target layer, as low-rank parts
    {"down.weight": (r, d_in), "up.weight": (d_out, r)} in float32 (computed in float64), and
    the least-squares solver used and the Gram matrix's rank (gram_rank); one factorisation of
    X^T X serves every target, as in fit_source. On a GPU for device "cuda" (or any
    torch.device: the torch path), else on the CPU with numpy and scipy. The rank is at most
    d_out (a larger one is the full least-squares map: W itself)."""
    _check_rank(rank)
    dev = _torch_device(device)
    maps: dict[int, dict[str, np.ndarray]] = {}
    if dev is not None:
        import torch

        solver = TorchSourceSolver(x, dev)
        for layer, y in targets:
            w_t = solver.solve_transposed_on_device(y)
            down, up = _reduced_rank_parts_torch(w_t, solver.gram, rank)
            maps[layer] = {
                "down.weight": down.to(torch.float32).cpu().numpy(),
                "up.weight": up.to(torch.float32).cpu().numpy(),
            }
        return maps, solver.method, solver.rank
    solver = SourceSolver(x)
    for layer, w_t in _solved(solver, targets):
        down, up = reduced_rank_parts(w_t, solver.gram, rank)
        maps[layer] = {
            "down.weight": down.astype(np.float32),
            "up.weight": up.astype(np.float32),
        }
    return maps, solver.method, solver.rank


def _float64_numpy(tensors) -> tuple[np.ndarray, ...]:
    return tuple(t.cpu().numpy() if hasattr(t, "cpu") else t for t in tensors)


def reduced_rank(
    x: np.ndarray, y: np.ndarray, rank: int, device: str | torch.device | None = "cpu"
) -> tuple[np.ndarray, np.ndarray]:
    """(down (r, d_in), up (d_out, r)), float64: the rank-`rank` reduced-rank regression of y
    on x (no intercept), pred = (x @ down.T) @ up.T; for one pair (a warm start)."""
    _check_rank(rank)
    dev = _torch_device(device)
    if dev is not None:
        solver = TorchSourceSolver(x, dev)
        parts = _reduced_rank_parts_torch(solver.solve_transposed_on_device(y), solver.gram, rank)
        return _float64_numpy(parts)
    solver = SourceSolver(x)
    return reduced_rank_parts(solver.solve_transposed(y), solver.gram, rank)


def _with_ones(x: np.ndarray) -> np.ndarray:
    """[x, 1] in float64: the design of a fit with an intercept."""
    design = np.empty((x.shape[0], x.shape[1] + 1), dtype=np.float64)
    design[:, :-1] = x
    design[:, -1] = 1.0
    return design


def reduced_rank_affine(
    x: np.ndarray, y: np.ndarray, rank: int, device: str | torch.device | None = "cpu"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(down (r, d_in), up (d_out, r), offset (r,)), float64: the rank-`rank` reduced-rank
    regression of y on [x, 1], pred = (x @ down.T + offset) @ up.T (the intercept lies in the
    map's r-dimensional output space, as N-NJTC's batch-normalisation shift does)."""
    down, up = reduced_rank(_with_ones(x), y, rank, device)
    return down[:, :-1], up, down[:, -1]


def least_squares_affine(
    x: np.ndarray, y: np.ndarray, device: str | torch.device | None = "cpu"
) -> tuple[np.ndarray, np.ndarray]:
    """(weight (d_out, d_in), bias (d_out,)), float64: the least-squares fit of y on x with an
    intercept, pred = x @ weight.T + bias."""
    design = _with_ones(x)
    dev = _torch_device(device)
    if dev is not None:
        (w_t,) = _float64_numpy([TorchSourceSolver(design, dev).solve_transposed_on_device(y)])
    else:
        w_t = SourceSolver(design).solve_transposed(y)
    return w_t[:, :-1], w_t[:, -1]
