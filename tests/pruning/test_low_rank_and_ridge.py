"""Depth pruning's low_rank stand-in (h_{i+n} := h_i + h_i B C) and the relative ridge of the
closed-form fits, on the calibration sums of tiny random models: low_rank is never worse than
drop, the ridge solves the regularised normal equations, and ridge 0 is least squares as before,
bit for bit."""

import numpy as np
import pytest
import scipy.linalg
from tiny import SENTENCES, make_model

from jtc.model.adapters import get_adapter
from jtc.pruning.calibrate import fit_span
from jtc.pruning.spans import StatisticsPlan, spans
from jtc.pruning.sums import span_statistics
from jtc.pruning.variants import VARIANTS
from jtc.shortcuts.closed_form import cholesky_factor
from jtc.shortcuts.maps import ShortcutMap

LAYERS, WIDTH = 6, 32


def sums(kind, sentences=SENTENCES):
    model, tokenizer = make_model(kind, layers=LAYERS, width=WIDTH)
    inputs = [np.asarray(tokenizer(s)["input_ids"], dtype=np.int64) for s in sentences]
    plan = StatisticsPlan.of(LAYERS, [1, 2, 3], VARIANTS)
    return span_statistics(model, get_adapter(kind), inputs, plan, batch_size=3, pad_id=0)


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def grams(request):
    return sums(request.param)


def ridged(gram, alpha):
    return gram + alpha * np.trace(gram) / len(gram) * np.eye(len(gram))


@pytest.mark.parametrize("ridge", [0.0, 0.05])
def test_low_rank_is_never_worse_than_drop(grams, ridge):
    """B = 0 (drop) is one of low_rank's maps, so its calibration loss is at most drop's, at
    every span and rank; with the full rank it is mat's (I + B C is then any matrix)."""
    for start, n in spans(LAYERS, [1, 2, 3], "low_rank"):
        drop = fit_span(grams, "drop", start, n, rank=1)
        for rank in (1, 2, 8):
            low = fit_span(grams, "low_rank", start, n, rank, ridge)
            assert low.loss <= drop.loss, (start, n, rank)
            assert low.tensors["down.weight"].shape == (rank, WIDTH)
            assert low.tensors["up.weight"].shape == (WIDTH, rank)
        full = fit_span(grams, "low_rank", start, n, WIDTH)
        mat = fit_span(grams, "mat", start, n, WIDTH)
        assert full.loss == pytest.approx(mat.loss, rel=1e-6, abs=1e-12)
        map_ = ShortcutMap(full.tensors)
        identity_plus = np.eye(WIDTH) + map_(np.eye(WIDTH))  # rows: e_k + map(e_k)
        # mat's weight is Aᵀ; h (I + B C) = h A: the same matrix, to float64 rounding of cond(G)
        scale = np.abs(mat.tensors["weight"]).max()
        cond = np.linalg.cond(grams.state_grams[start])
        tol = 1e3 * cond * np.finfo(np.float64).eps * scale
        np.testing.assert_allclose(identity_plus, mat.tensors["weight"].T, atol=tol)


def test_the_ridge_solves_the_regularised_normal_equations(grams):
    """(G + α·(tr(G)/d)·I) W = C for mat, replaceme and low_rank (full rank, so W whole), against
    numpy's solve of the same sums."""
    alpha, (start, n) = 0.05, (2, 2)
    i, j = start, start + n
    gram = grams.state_grams[i]
    want = np.linalg.solve(ridged(gram, alpha), grams.state_cross[i, j])
    mat = fit_span(grams, "mat", start, n, rank=1, ridge=alpha)
    assert mat.solver == "cholesky"
    np.testing.assert_allclose(mat.tensors["weight"].T, want, rtol=1e-9, atol=1e-12)
    low = fit_span(grams, "low_rank", start, n, rank=WIDTH, ridge=alpha)
    difference = np.linalg.solve(ridged(gram, alpha), grams.state_cross[i, j] - gram)
    product = (low.tensors["up.weight"] @ low.tensors["down.weight"]).T
    np.testing.assert_allclose(product, difference, rtol=1e-9, atol=1e-9 * np.abs(difference).max())
    ffn = grams.ffn_grams[i]
    target = grams.ffn_cross[i, j] - grams.ffn_own[i] + ffn  # Σ Xᵀ(h_j - h_i + X)
    replaceme = fit_span(grams, "replaceme", start, n, rank=1, ridge=alpha)
    np.testing.assert_allclose(
        replaceme.tensors["weight"].T, np.linalg.solve(ridged(ffn, alpha), target), rtol=1e-9
    )
    # the loss is the fit's error on the calibration tokens, not the regularised objective:
    # never below least squares'
    assert mat.loss >= fit_span(grams, "mat", start, n, rank=1).loss


def test_ridge_zero_is_least_squares_bit_for_bit(grams):
    """ridge 0 solves G W = C as before the ridge existed (Cholesky, or the pseudo-inverse)."""
    for start, n in [(1, 1), (2, 3)]:
        i, j = start, start + n
        gram, cross = grams.state_grams[i], grams.state_cross[i, j]
        before = scipy.linalg.cho_solve(cholesky_factor(gram), cross, check_finite=False)
        for ridge in (0, 0.0):
            mat = fit_span(grams, "mat", start, n, rank=2, ridge=ridge)
            assert np.array_equal(mat.tensors["weight"], before.T)
        for variant in ("replaceme", "low_rank", "drop"):
            a = fit_span(grams, variant, start, n, rank=2, ridge=0.0)
            b = fit_span(grams, variant, start, n, rank=2)
            assert (a.loss, a.solver) == (b.loss, b.solver)
            assert a.tensors.keys() == b.tensors.keys()
            assert all(np.array_equal(a.tensors[k], b.tensors[k]) for k in a.tensors)


def test_a_ridge_makes_a_singular_gram_solvable_by_cholesky():
    """Fewer calibration tokens than the width: least squares takes the pseudo-inverse, any
    ridge > 0 a Cholesky factorisation; a negative ridge is refused by its key."""
    few = sums("llama", SENTENCES[:2])  # about 20 tokens, width 32
    assert fit_span(few, "mat", 2, 2, rank=2).solver == "pinv"
    for variant in ("mat", "replaceme", "low_rank"):
        fit = fit_span(few, variant, 2, 2, rank=2, ridge=1e-3)
        assert fit.solver == "cholesky" and np.isfinite(fit.loss)
    with pytest.raises(ValueError, match="'pruning.ridge'"):
        fit_span(few, "mat", 2, 2, rank=2, ridge=-1.0)
