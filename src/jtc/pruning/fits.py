"""Depth pruning with linear shortcuts (docs/method.md, "Depth pruning"): the maps that stand in
for a span of blocks, fitted from float64 sums over calibration tokens, and the statistics that
choose a span (numpy and scipy, no torch; jtc.pruning.spans says which spans there are).

Blocks are numbered 1..L; h_l is the residual stream after block l (h_0: the embeddings). A span
(start i, length n) removes blocks i+1..i+n, and a variant stands in for them:

    drop       h_{i+n} := h_i                                    (ShortGPT, UIDL)
    mat        h_{i+n} := h_i A, least squares without intercept  (jtc's map between the states)
    low_rank   h_{i+n} := h_i + h_i B C, B C of rank r: the reduced-rank regression of the
               difference D = h_{i+n} - h_i on h_i (the identity kept, so never worse than drop)
    replaceme  h_{i+n} := r_i + X_i T, X_i block i's feed-forward output before its residual add
               and r_i = h_i - X_i the stream it is added to (ReplaceMe); T folds into block
               i's last feed-forward linear layer, so the pruned model is a standard checkpoint
    rotation   h_{i+n} := s·h_i Q, Q orthogonal and s > 0: the orthogonal Procrustes solution
               Q = U Vᵀ of Σ h_iᵀh_{i+n} = U Σ Vᵀ, s = tr(QᵀC)/tr(G) (C = Σ h_iᵀh_{i+n},
               G = Σ h_iᵀh_i, tr(G) = Σ ||h_i||²); in a pre-norm RMSNorm model it folds exactly
               into the embeddings and blocks 1..i (jtc.pruning.rotate)
    rotation_replaceme  h_{i+n} := s·(r_i + X_i T) Q: both, the joint least squares in closed
               form (jtc.pruning.joint); T folds as ReplaceMe's, s·Q as rotation's

The training-free magnitude compensations (prune_comp, prune_comp_channel, linear_patch) are
fitted in jtc.pruning.compensation, from the per-channel sums SpanGrams holds for them.

Maps follow torch.nn.Linear's convention (jtc.shortcuts.maps): `weight` = Aᵀ, Tᵀ or (s·Q)ᵀ
(rotation: s = ||weight||_F / √d, Q = weightᵀ / s; rotation_replaceme: `weight` = Tᵀ and
`rotation` = (s·Q)ᵀ); low_rank's
`down.weight` = Bᵀ (r, d) and `up.weight` = Cᵀ (d, r) predict the difference, added to h_i.

`ridge` α >= 0 regularises the closed-form fits (mat, replaceme, low_rank) relative to the
Gram's scale: they solve (G + α·(tr(G)/d)·I) W = C instead of G W = C (α = 0: least squares).
rotation has nothing to regularise (Q is orthogonal whatever the sums) and ignores it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from jtc.pruning.joint import fit_rotation_replaceme as fit_rotation_replaceme_sums
from jtc.pruning.spans import NONCONTIGUOUS
from jtc.pruning.variants import ROTATION_PART, variant_of
from jtc.shortcuts.closed_form import cholesky_factor, reduced_rank_parts


@dataclass
class SpanGrams:
    """Sums over calibration tokens, float64: what every span's fit and statistics need.

    `squares[l]` = Σ ||h_l||²; for pairs (i, j): `dots` Σ h_i·h_j, `cosines` Σ cos(h_i, h_j),
    `angles` Σ arccos(cos(h_i, h_j))/π; the d × d matrices `state_grams[i]` Σ h_iᵀh_i,
    `state_cross[i, j]` Σ h_iᵀh_j (mat, low_rank), and for replaceme `ffn_grams[i]` Σ X_iᵀX_i,
    `ffn_cross[i, j]` Σ X_iᵀh_j, `ffn_own[i]` Σ X_iᵀh_i (row vectors, X_i block i's
    feed-forward output before its residual add); the d-vectors `magnitudes[l]` Σ|h_l| and
    `hadamard_magnitudes[l]` Σ|h_l H| per channel (H jtc.pruning.hadamard's; the magnitude
    compensations, jtc.pruning.compensation)."""

    num_layers: int
    tokens: int = 0
    squares: np.ndarray = field(default_factory=lambda: np.zeros(0))
    dots: dict[tuple[int, int], float] = field(default_factory=dict)
    cosines: dict[tuple[int, int], float] = field(default_factory=dict)
    angles: dict[tuple[int, int], float] = field(default_factory=dict)
    state_grams: dict[int, np.ndarray] = field(default_factory=dict)
    state_cross: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    ffn_grams: dict[int, np.ndarray] = field(default_factory=dict)
    ffn_cross: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    ffn_own: dict[int, np.ndarray] = field(default_factory=dict)
    magnitudes: dict[int, np.ndarray] = field(default_factory=dict)
    hadamard_magnitudes: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def width(self) -> int | None:
        """The width of the states summed (None before any d × d sum)."""
        for grams in (self.state_grams, self.ffn_grams, self.state_cross):
            for gram in grams.values():
                return int(gram.shape[0])
        return None

    def angular_distance(self, start: int, length: int) -> float:
        """UIDL's mean arccos(cos(h_i, h_{i+n}))/π over calibration tokens (every token)."""
        return self.angles[start, start + length] / self.tokens

    def block_influence(self) -> np.ndarray:
        """ShortGPT's Block Influence of blocks 1..L: 1 - mean cos(h_{l-1}, h_l)."""
        return np.array(
            [1.0 - self.cosines[b - 1, b] / self.tokens for b in range(1, self.num_layers + 1)]
        )


def ridged(gram: np.ndarray, ridge: float) -> np.ndarray:
    """G + α·(tr(G)/d)·I: the Gram matrix with a ridge relative to its mean eigenvalue (G itself,
    not a copy, for α = 0)."""
    if ridge == 0:
        return gram
    return gram + (ridge * float(np.trace(gram)) / len(gram)) * np.eye(len(gram))


def solve_gram(gram: np.ndarray, cross: np.ndarray, ridge: float = 0.0) -> tuple[np.ndarray, str]:
    """(W (d_in, d_out), how) minimising ||X W - Y||² + α·(tr(G)/d)·||W||² from G = XᵀX and
    C = XᵀY (`ridge` α >= 0): through a Cholesky factorisation of G (with α > 0, of the ridged
    Gram, positive definite), or G's pseudo-inverse (the minimum-norm solution) when α = 0 and
    G is singular or ill-conditioned (jtc.shortcuts.closed_form's rule)."""
    if ridge < 0:
        raise ValueError(f"config key 'pruning.ridge': {ridge} is negative; it must be >= 0")
    gram = ridged(gram, ridge)
    if ridge > 0:
        try:
            factor = scipy.linalg.cho_factor(gram, lower=False, check_finite=True)
        except (np.linalg.LinAlgError, ValueError):  # a zero Gram (tr(G) = 0): nothing to ridge
            factor = None
    else:
        factor = cholesky_factor(gram)
    if factor is None:
        # eigenvalues of a computed Gram matrix below d·eps of the largest are rounding noise
        tolerance = len(gram) * np.finfo(np.float64).eps
        return np.linalg.pinv(gram, rtol=tolerance, hermitian=True) @ cross, "pinv"
    return scipy.linalg.cho_solve(factor, cross, check_finite=False), "cholesky"


@dataclass(frozen=True)
class SpanFit:
    """A variant's stand-in for blocks start+1..start+length: its map's tensors (the parts of
    jtc.shortcuts.maps.ShortcutMap; none for drop), the solver used, and its calibration loss,
    ||ĥ_{i+n} - h_{i+n}||² / ||h_{i+n}||² over calibration tokens (the variant's own error in
    the residual stream after the replacement)."""

    variant: str
    start: int
    length: int
    tensors: dict[str, np.ndarray]
    solver: str
    loss: float
    # the mean cosine distance 1 - cos(ĥ_{i+n}, h_{i+n}) over the calibration tokens, where
    # the fit measured it (replaceme_cosine's objective, jtc.pruning.cosine), else None
    cosine_distance: float | None = None


def _squared_error(yy: float, w: np.ndarray, cross: np.ndarray, gram: np.ndarray) -> float:
    """||Y - X W||² from ||Y||², XᵀY and XᵀX."""
    return yy - 2.0 * float(np.sum(w * cross)) + float(np.sum(w * (gram @ w)))


def _drop_error(grams: SpanGrams, i: int, j: int) -> float:
    """||h_j - h_i||² over the calibration tokens."""
    return float(grams.squares[j]) - 2.0 * grams.dots[i, j] + float(grams.squares[i])


def fit_drop(grams: SpanGrams, start: int, length: int, rank: int, ridge: float) -> SpanFit:
    """drop: no map, h_i in place of h_{i+n}; its calibration loss."""
    i, j = start, start + length
    error = _drop_error(grams, i, j)
    return SpanFit("drop", start, length, {}, "none", max(error, 0.0) / float(grams.squares[j]))


def fit_mat(grams: SpanGrams, start: int, length: int, rank: int, ridge: float) -> SpanFit:
    """mat: h_{i+n} := h_i A by (ridged) least squares."""
    i, j = start, start + length
    yy = float(grams.squares[j])
    gram, cross = grams.state_grams[i], grams.state_cross[i, j]
    w, solver = solve_gram(gram, cross, ridge)
    error = _squared_error(yy, w, cross, gram)
    return SpanFit("mat", start, length, {"weight": w.T}, solver, max(error, 0.0) / yy)


def fit_low_rank(grams: SpanGrams, start: int, length: int, rank: int, ridge: float) -> SpanFit:
    """low_rank: h_{i+n} := h_i + h_i B C, the rank-`rank` reduced-rank regression of the
    difference D = h_{i+n} - h_i on h_i."""
    i, j = start, start + length
    yy = float(grams.squares[j])
    # the difference D = h_j - h_i on h_i: Σ h_iᵀD = Σ h_iᵀh_j - Σ h_iᵀh_i
    gram = grams.state_grams[i]
    cross = grams.state_cross[i, j] - gram
    w, solver = solve_gram(gram, cross, ridge)
    # the best rank-r map for the (ridged) objective: B = 0 is admissible, so its error on
    # D is at most ||D||², drop's
    down, up = reduced_rank_parts(w.T, ridged(gram, ridge), rank)
    w = (up @ down).T
    error = _squared_error(_drop_error(grams, i, j), w, cross, gram)
    tensors = {"down.weight": down, "up.weight": up}
    return SpanFit("low_rank", start, length, tensors, solver, max(error, 0.0) / yy)


def fit_replaceme(grams: SpanGrams, start: int, length: int, rank: int, ridge: float) -> SpanFit:
    """replaceme: h_{i+n} := r_i + X_i T, T by (ridged) least squares."""
    i, j = start, start + length
    yy = float(grams.squares[j])
    gram = grams.ffn_grams[i]
    # the target is Z = h_j - r_i = h_j - h_i + X_i
    cross = grams.ffn_cross[i, j] - grams.ffn_own[i] + gram
    t, solver = solve_gram(gram, cross, ridge)
    zz = (
        yy
        + float(grams.squares[i])
        + float(np.trace(gram))
        - 2.0 * grams.dots[i, j]
        + 2.0 * float(np.trace(grams.ffn_cross[i, j]))
        - 2.0 * float(np.trace(grams.ffn_own[i]))
    )
    error = _squared_error(zz, t, cross, gram)
    return SpanFit("replaceme", start, length, {"weight": t.T}, solver, max(error, 0.0) / yy)


def fit_rotation(grams: SpanGrams, start: int, length: int, rank: int, ridge: float) -> SpanFit:
    """rotation: h_{i+n} := s·h_i Q, the scaled orthogonal Procrustes fit (`ridge`: nothing to
    regularise, Q is orthogonal whatever the sums)."""
    i, j = start, start + length
    yy = float(grams.squares[j])
    tensors, error = procrustes(grams.state_cross[i, j], float(grams.squares[i]), yy)
    return SpanFit("rotation", start, length, tensors, "svd", max(error, 0.0) / yy)


def fit_rotation_replaceme(
    grams: SpanGrams, start: int, length: int, rank: int, ridge: float
) -> SpanFit:
    """rotation_replaceme's closed-form fit (jtc.pruning.joint)."""
    i, j = start, start + length
    gram = grams.ffn_grams[i]
    sums = (grams.state_cross[i, j], grams.ffn_cross[i, j], grams.ffn_own[i], gram)
    yy = float(grams.squares[j])
    solvers = set()

    def solve(z: np.ndarray) -> np.ndarray:
        w, how = solve_gram(gram, z, ridge)
        solvers.add(how)
        return w

    t, scale, q, error = fit_rotation_replaceme_sums(sums, float(grams.squares[i]), yy, solve)
    tensors = {"weight": t.T, ROTATION_PART: (scale * q).T}
    solver = "+".join(sorted(solvers)) + "+svd"
    return SpanFit("rotation_replaceme", start, length, tensors, solver, error / yy)


def procrustes(cross: np.ndarray, xx: float, yy: float) -> tuple[dict[str, np.ndarray], float]:
    """({"weight": (s·Q)ᵀ}, ||Y - s·X Q||²) of the scaled orthogonal Procrustes fit of Y on X
    from C = XᵀY, ||X||² = tr(XᵀX) and ||Y||²: Q = U Vᵀ with C = U Σ Vᵀ maximises tr(QᵀC) =
    Σ σ over orthogonal Q, and s = tr(QᵀC)/||X||² minimises yy - 2 s tr(QᵀC) + s² xx, the
    error then yy - s·tr(QᵀC). A zero C (or X) leaves Q = U Vᵀ of its SVD and s = 0."""
    u, sigma, vt = np.linalg.svd(cross)
    q = u @ vt
    trace = float(sigma.sum())  # tr(QᵀC) = tr(V Uᵀ U Σ Vᵀ) = Σ σ
    scale = trace / xx if xx > 0 else 0.0
    return {"weight": (scale * q).T}, yy - scale * trace


# selection statistics within this of the best value are tied (they are relative losses,
# angles/π and influences, all dimensionless and O(1e-3..1)): a map fitted on fewer calibration
# tokens than the width reproduces them, so every span's calibration loss is 0 up to rounding
TIE = 1e-6


def underdetermined_fit(variant: str, tokens: int, width: int) -> bool:
    """Whether a variant's map was fitted on fewer calibration tokens than the width of the
    states it reads (every output coordinate then has more inputs than tokens to fit them: the
    fit reproduces them and its calibration loss says nothing of the span; rotation's
    d(d-1)/2 + 1 parameters are determined by fewer tokens than least squares needs, but on
    fewer tokens than the width Σ h_iᵀh_{i+n} is singular and Q is free on its null space:
    flagged like the others; never the magnitude ratios, Variant.interpolates)."""
    record = variant_of(variant)
    return record.has_map and record.interpolates and tokens < width


@dataclass(frozen=True)
class Selected:
    """The span a selection rule chose for one length and variant: its removed blocks
    (1-based), its start (-1 when the blocks are not consecutive), and the starts of the spans
    whose statistic tied with its own (within TIE, itself included; empty without a tie)."""

    length: int
    selection: str
    variant: str
    start: int
    removed: tuple[int, ...]
    tied: tuple[int, ...] = ()


def _choice(values: Sequence[float], angles: Sequence[float]) -> tuple[int, list[int]]:
    """(index of the chosen span, indices of the spans tied with it: [] without a tie) of the
    smallest of `values`; a tie is broken by the smallest angular distance (`angles`), then the
    earliest start."""
    best = float(np.min(values))
    tied = [k for k, v in enumerate(values) if v <= best + TIE]
    chosen = min(tied, key=lambda k: (angles[k], k))
    return chosen, tied if len(tied) > 1 else []


def select_spans(
    grams: SpanGrams, fits: Sequence[SpanFit], lengths: Sequence[int], variants: Sequence[str]
) -> list[Selected]:
    """For each length and variant, the span each rule chooses, from calibration statistics
    only: the smallest angular distance (UIDL), the smallest Block Influence summed over the
    span (ShortGPT), the smallest calibration loss of the variant itself (measured); and for
    drop, ShortGPT's n blocks of lowest Block Influence, consecutive or not. Values within TIE
    of the best tie (every map fitted on fewer calibration tokens than the width reproduces
    them: `measured` then ties everywhere, and is never selected on: every span of such a
    variant counts as tied, whatever rounding left): the tie is recorded (Selected.tied) and
    broken by the smallest angular distance, then the earliest start."""
    influence = grams.block_influence()
    chosen = []
    for n in sorted(set(lengths)):
        for variant in variants:
            own = [f for f in fits if f.variant == variant and f.length == n]
            angles = [grams.angular_distance(f.start, n) for f in own]
            scores = {
                "angular_distance": angles,
                "block_influence": [influence[f.start : f.start + n].sum() for f in own],
                "measured": [f.loss for f in own],
            }
            if grams.width and underdetermined_fit(variant, grams.tokens, grams.width):
                scores["measured"] = [0.0] * len(own)  # a loss of 0 up to rounding, everywhere
            for selection, values in scores.items():
                index, tied = _choice(values, angles)
                best = own[index]
                blocks = tuple(range(best.start + 1, best.start + n + 1))
                starts = tuple(own[k].start for k in tied)
                chosen.append(Selected(n, selection, variant, best.start, blocks, starts))
            if not variant_of(variant).has_map:  # dropped: the blocks need not be consecutive
                lowest = np.argsort(influence, kind="stable")[:n] + 1
                blocks = tuple(sorted(int(b) for b in lowest))
                consecutive = blocks == tuple(range(blocks[0], blocks[0] + n))
                start = blocks[0] - 1 if consecutive else -1
                chosen.append(Selected(n, NONCONTIGUOUS, variant, start, blocks))
    return chosen
