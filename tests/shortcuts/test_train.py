"""The trained shortcut methods: NJTC, N-NJTC and the tuned-lens translator, their closed-form
starts, and rrr (the optimum of NJTC's objective) against what gradient descent reaches."""

import numpy as np
import pytest
import torch
from sklearn.linear_model import LinearRegression
from tiny import make_model

from jtc.model.adapters import get_adapter
from jtc.model.head import Head
from jtc.model.scoring import final_reference
from jtc.settings import LowRankSettings
from jtc.shortcuts.closed_form import fit_source, fit_source_reduced_rank
from jtc.shortcuts.lens import AffineTranslator, lens_loss, train_tuned_lens
from jtc.shortcuts.maps import DEFAULT_NORM_EPS, ShortcutMap, load_map, save_maps
from jtc.shortcuts.methods import default_rank, fitted_targets
from jtc.shortcuts.train import LowRankMap, pair_seed, train_low_rank


def trained_with(**changes) -> LowRankSettings:
    """NJTC's settings with `changes`, at the learning rate and patience these tests were
    written for where they do not set them."""
    return LowRankSettings.defaults("njtc", **{"learning_rate": 1e-3, "patience": 10, **changes})


def linear_problem(n=300, d=8, seed=0, noise=0.3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * rng.uniform(0.5, 2.0, size=d) + rng.normal(size=d)
    y = x @ rng.normal(size=(d, d)) + noise * rng.normal(size=(n, d))
    return x.astype(np.float32), y.astype(np.float32)


def mse(pred, y):
    return float(np.mean((pred - y) ** 2))


def numpy_rrr(x, y, rank):
    """The textbook reduced-rank regression (x @ C form): lstsq, then the top-r right singular
    vectors of the fitted values."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    w = np.linalg.lstsq(x, y, rcond=None)[0]
    vt = np.linalg.svd(x @ w, full_matrices=False)[2][:rank]
    return w @ vt.T @ vt


def with_ones(x):
    return np.hstack([np.asarray(x, np.float64), np.ones((len(x), 1))])


def record_starts(monkeypatch, module_class) -> list[np.ndarray]:
    """The source rows each start_at call of `module_class` receives, recorded as it runs."""
    seen = []
    original = module_class.start_at

    def recording(self, xs, ys):
        seen.append(np.array(xs))
        original(self, xs, ys)

    monkeypatch.setattr(module_class, "start_at", recording)
    return seen


@pytest.mark.parametrize("warm_start", [False, True])
def test_njtc_at_full_rank_reaches_least_squares_training_error(warm_start):
    """From a random start gradient descent reaches the least-squares error; the closed-form
    start is there already (at full rank rrr is mat) and training keeps it there."""
    x, y = linear_problem()
    weights, _, _ = fit_source(x, [(1, y)])
    best = mse(x @ weights[1].T, y)
    settings = trained_with(
        learning_rate=0.03,
        max_epochs=400 if not warm_start else 20,
        batch_size=64,
        holdout_fraction=0.0,
        warm_start=warm_start,
    )
    result = train_low_rank(x, y, rank=8, normalise=False, settings=settings, seed=0)
    trained = mse(ShortcutMap(result.tensors)(x), y)
    assert best * (1 - 1e-6) <= trained <= 1.01 * best, (trained, best)


def test_training_loss_decreases_and_early_stopping_keeps_the_best_epoch():
    x, y = linear_problem(noise=1.0)
    settings = trained_with(
        learning_rate=0.01, max_epochs=60, batch_size=32, patience=5, warm_start=False
    )
    result = train_low_rank(x, y, rank=2, normalise=True, settings=settings, seed=3)
    assert result.train_loss[-1] < 0.5 * result.train_loss[0]
    assert min(result.holdout_loss) < 0.5 * result.holdout_loss[0]  # [0]: before training
    assert result.holdout_loss[result.best_epoch] == min(result.holdout_loss)
    assert len(result.train_loss) <= settings.max_epochs
    # early stopping: stopped `patience` epochs after the best one, before max_epochs
    assert len(result.train_loss) == result.best_epoch + settings.patience < settings.max_epochs


@pytest.mark.parametrize("normalise", [False, True])
def test_closed_form_start_beats_the_random_one(normalise):
    """The held-out loss of the start (epoch 0) is far below the random start's, and a few epochs
    of gradient descent from a random start do not reach it; from the closed-form start a
    learning rate that only does harm leaves that start as the result (epoch 0 kept)."""
    x, y = linear_problem(noise=1.0)
    runs = {
        warm: train_low_rank(
            x,
            y,
            rank=2,
            normalise=normalise,
            settings=trained_with(max_epochs=3, batch_size=32, warm_start=warm),
            seed=3,
        )
        for warm in (False, True)
    }
    assert runs[True].holdout_loss[0] < 0.5 * runs[False].holdout_loss[0]
    assert min(runs[True].holdout_loss) < min(runs[False].holdout_loss)
    harmful = trained_with(learning_rate=1.0, max_epochs=50, batch_size=32, patience=2)
    result = train_low_rank(x, y, rank=2, normalise=normalise, settings=harmful, seed=3)
    assert result.best_epoch == 0 and len(result.train_loss) == 2  # stopped on patience
    assert min(result.holdout_loss[1:]) > result.holdout_loss[0]
    assert result.summary()["best_holdout_loss"] == result.holdout_loss[0]


def trained_rows(x, rows_seen):
    """The row numbers of x of the rows a start was computed from (rows are distinct)."""
    match = (np.asarray(x)[:, None, :] == np.asarray(rows_seen, np.float32)[None]).all(2)
    assert (match.sum(0) == 1).all()  # every row seen is one row of x
    return np.flatnonzero(match.any(1))


@pytest.mark.parametrize("normalise", [False, True])
def test_low_rank_start_is_the_reduced_rank_regression_of_the_rows_trained_on(
    normalise, monkeypatch
):
    """NJTC starts at the rrr of its training rows (not the held-out ones); N-NJTC at the
    rank-r regression with an intercept of y on those rows standardised by their mean and
    (unbiased) variance, which its running statistics then hold. The held-out loss at epoch 0
    is that map's MSE on the held-out rows; a harmful learning rate keeps that start."""
    x, y = linear_problem(noise=1.0)
    seen = record_starts(monkeypatch, LowRankMap)
    settings = trained_with(learning_rate=1.0, max_epochs=50, batch_size=32, patience=2)
    result = train_low_rank(x, y, rank=2, normalise=normalise, settings=settings, seed=3)
    assert result.best_epoch == 0
    rows = trained_rows(x, seen[0])
    held = np.setdiff1d(np.arange(len(x)), rows)
    assert len(rows) == 270 and len(held) == 30  # holdout_fraction 0.1
    if normalise:
        mean, var = x[rows].astype(np.float64).mean(0), x[rows].astype(np.float64).var(0, ddof=1)
        np.testing.assert_allclose(result.tensors["norm.running_mean"], mean, rtol=1e-6)
        np.testing.assert_allclose(result.tensors["norm.running_var"], var, rtol=1e-6)
        np.testing.assert_array_equal(result.tensors["norm.weight"], 1.0)

        def design(a):
            return with_ones((a - mean) / np.sqrt(var + DEFAULT_NORM_EPS))
    else:
        assert "norm.weight" not in result.tensors

        def design(a):
            return np.asarray(a, np.float64)

    reference = numpy_rrr(design(x[rows]), y[rows], 2)
    expected = design(x) @ reference
    got = ShortcutMap(result.tensors)(x)
    np.testing.assert_allclose(got, expected, atol=1e-5 * np.abs(expected).max())
    assert result.holdout_loss[0] == pytest.approx(mse(expected[held], y[held]), rel=1e-5)
    # the start is not the rrr of all rows: the held-out rows were left out
    everything = design(x) @ numpy_rrr(design(x), y, 2)
    assert np.abs(got - everything).max() > 1e-3 * np.abs(expected).max()


def layered_problem(n=400, d=12, layers=3, seed=1):
    """States h_0..h_L of a stack of noisy linear layers with decaying spectra (and a mean that
    propagates through them): every pair is a noisy linear map with a few dominant directions."""
    rng = np.random.default_rng(seed)
    states = [rng.normal(size=(n, d)) * np.logspace(0.5, -1, d) + rng.normal(size=d)]
    for _ in range(layers):
        u, v = (np.linalg.qr(rng.normal(size=(d, d)))[0] for _ in range(2))
        step = u @ np.diag(np.logspace(0.3, -1, d)) @ v
        states.append(states[-1] @ step + 0.1 * rng.normal(size=(n, d)))
    return [s.astype(np.float32) for s in states]


@pytest.mark.parametrize("warm_start", [True, False])
def test_rrr_training_error_is_at_most_njtc_and_nnjtc_on_every_pair(warm_start):
    """rrr is the optimum of NJTC's objective (training MSE over rank-r maps), fitted here on
    the same rows the MSE is measured on: on every pair its training MSE is at most NJTC's and
    N-NJTC's, both trained by gradient descent (from the closed-form start and from a random
    one) on those rows less the held-out tenth. N-NJTC's maps include an intercept in their
    output space, which NJTC's do not: its own optimum, the rank-r regression on [h, 1], bounds
    it from below, and rrr bounds it here because these targets have no offset of their own.

    Tolerance: the maps are stored in float32, whose rounding (relative 6e-8 per entry) moves a
    map's MSE by well under 1e-6 of it; the gaps in question are larger (a failure means a
    trained map beat the optimum of its own objective)."""
    states = layered_problem()
    rank, tol = 2, 1e-6
    settings = trained_with(learning_rate=0.01, max_epochs=40, batch_size=32, warm_start=warm_start)
    pairs = 0
    for source in range(len(states) - 1):
        x = states[source]
        targets = [(t, states[t]) for t in range(source + 1, len(states))]
        rrr, _, _ = fit_source_reduced_rank(x, targets, rank)
        for target, y in targets:
            bound = mse(ShortcutMap(rrr[target])(x), y)
            bound_affine = mse(with_ones(x) @ numpy_rrr(with_ones(x), y, rank), y)
            for normalise in (False, True):
                seed = pair_seed(0, "nnjtc" if normalise else "njtc", source, target)
                result = train_low_rank(
                    x, y, rank=rank, normalise=normalise, settings=settings, seed=seed
                )
                trained = mse(ShortcutMap(result.tensors)(x), y)
                assert bound <= trained * (1 + tol), (source, target, normalise, bound, trained)
                if normalise:
                    assert bound_affine <= trained * (1 + tol)
                    assert bound_affine <= bound * (1 + tol)
                pairs += 1
    assert pairs == 2 * 6


@pytest.mark.parametrize("normalise", [False, True])
def test_same_seed_gives_identical_maps(normalise):
    x, y = linear_problem()
    settings = trained_with(max_epochs=5, batch_size=32)
    runs = [
        train_low_rank(x, y, rank=3, normalise=normalise, settings=settings, seed=s)
        for s in (7, 7, 8)
    ]
    for name in runs[0].tensors:
        assert np.array_equal(runs[0].tensors[name], runs[1].tensors[name]), name
    assert not np.array_equal(runs[0].tensors["down.weight"], runs[2].tensors["down.weight"])


def test_batch_normalisation_uses_running_statistics_at_evaluation(tmp_path):
    x, y = linear_problem(d=6)
    x = x * 5 + 3  # far from zero mean and unit variance
    settings = trained_with(max_epochs=20, batch_size=32)
    result = train_low_rank(x, y, rank=2, normalise=True, settings=settings, seed=0)
    stats = result.tensors
    # the running statistics were learned from the training batches
    np.testing.assert_allclose(stats["norm.running_mean"], x.mean(0), rtol=0.1, atol=0.3)
    np.testing.assert_allclose(stats["norm.running_var"], x.var(0), rtol=0.25)
    # a stored map gives each row the same prediction alone as in a batch: no batch statistics
    save_maps(tmp_path / "m.safetensors", {0: {1: stats}}, {"method": "nnjtc"})
    shortcut = load_map(tmp_path / "m.safetensors", 0, 1)
    alone = np.concatenate([shortcut(x[i : i + 1]) for i in range(5)])
    np.testing.assert_allclose(alone, shortcut(x[:5]), rtol=1e-12)
    # and torch's module in evaluation mode agrees with the stored map
    module = LowRankMap(6, 2, True, torch.Generator().manual_seed(0))
    module.load_state_dict(
        {k: torch.tensor(v) for k, v in stats.items()}
        | {"norm.num_batches_tracked": torch.tensor(1)}
    )
    module.eval()
    with torch.no_grad():
        expected = module(torch.tensor(x[:5])).numpy()
    np.testing.assert_allclose(shortcut(x[:5]), expected, rtol=1e-4, atol=1e-5)
    # the map is affine at evaluation, and affine() is that same map
    weight, bias = shortcut.affine()
    np.testing.assert_allclose(x[:5] @ weight.T + bias, expected, rtol=1e-4, atol=1e-5)


def test_parameter_counts_and_default_rank():
    assert default_rank(576) == 5 and default_rank(64) == 1 and default_rank(1600) == 16
    d, r = 576, default_rank(576)
    low = {"down.weight": np.zeros((r, d)), "up.weight": np.zeros((d, r))}
    norm = {f"norm.{k}": np.zeros(d) for k in ("weight", "bias", "running_mean", "running_var")}
    assert ShortcutMap(low).parameter_counts() == (2 * d * r, 0)
    trained, buffers = ShortcutMap(low | norm).parameter_counts()
    assert (trained, buffers) == (2 * d * r + 2 * d, 2 * d)
    assert (trained + buffers) / d**2 < 0.03  # N-NJTC under 3% of mat for d > 400


def test_pair_seeds_and_fitted_targets():
    seeds = {pair_seed(0, m, s, t) for m in ("njtc", "nnjtc") for s in range(3) for t in (3, 4)}
    assert len(seeds) == 12 and pair_seed(0, "njtc", 1, 3) == pair_seed(0, "njtc", 1, 3)
    assert fitted_targets("njtc", "all", 1, 4) == [2, 3, 4]
    assert fitted_targets("njtc", "last", 1, 4) == [4]
    assert fitted_targets("njtc", "auto", 1, 4) == [2, 3, 4]
    assert fitted_targets("njtc", "auto", 1, 30) == [30]
    assert fitted_targets("tuned_lens", "all", 1, 4) == [4]


@pytest.fixture(scope="module")
def lens_problem():
    """A tiny head, source states, and final states an affine map of them plus noise (so that
    the least-squares start is good but not exact, and KL training can improve on it); the
    unembedding is scaled up so that KLs are far above float32 rounding."""
    model, _ = make_model("gpt2", layers=2, width=16)
    model.eval()
    head = Head.from_model(model, get_adapter("gpt2"))
    head.weight = head.weight * 40  # logits of a few units, not the initialisation's ~0.1
    rng = np.random.default_rng(0)
    source = rng.normal(size=(160, 16)).astype(np.float32)
    mixing = rng.normal(size=(16, 16)).astype(np.float32)
    final = (source @ mixing + 0.5 + 0.5 * rng.normal(size=(160, 16))).astype(np.float32)
    return head, source, final


def test_lens_loss_is_the_kl_to_the_final_prediction(lens_problem):
    head, source, final = lens_problem
    reference = final_reference(head, final, 1)
    rows = torch.arange(20)
    loss = lens_loss(head, reference, torch.tensor(source[:20]), rows)
    with torch.no_grad():
        p_final = torch.log_softmax(head.logits(torch.tensor(final[:20])), 1)
        p_lens = torch.log_softmax(head.logits(torch.tensor(source[:20])), 1)
        direct = (p_final.exp() * (p_final - p_lens)).sum(1).mean()
    assert float(loss.detach()) == pytest.approx(float(direct), rel=1e-4)


def lens_kl(head, source, final, tensors, rows=None):
    """Mean KL(final ‖ translated) of a translator's map over `rows` (default all)."""
    rows = np.arange(len(source)) if rows is None else rows
    reference = final_reference(head, final[rows], 1)
    mapped = torch.tensor(ShortcutMap(tensors)(source[rows]), dtype=torch.float32)
    with torch.no_grad():
        return float(lens_loss(head, reference, mapped, torch.arange(len(rows))))


def test_tuned_lens_from_the_identity_lowers_the_kl(lens_problem):
    """With warm_start false: the translator starts at the identity (the logit lens)."""
    head, source, final = lens_problem
    settings = trained_with(
        learning_rate=0.01, max_epochs=30, batch_size=32, patience=30, warm_start=False
    )
    result = train_tuned_lens(source, head, final, settings=settings, seed=0)
    identity = {"weight": np.eye(16), "bias": np.zeros(16)}
    kl_identity = lens_kl(head, source, final, identity)
    assert result.holdout_loss[0] == pytest.approx(kl_identity, rel=0.5)  # held-out part only
    assert lens_kl(head, source, final, result.tensors) < 0.7 * kl_identity
    again = train_tuned_lens(source, head, final, settings=settings, seed=0)
    assert np.array_equal(again.tensors["weight"], result.tensors["weight"])


def test_tuned_lens_starts_at_the_least_squares_affine_map(lens_problem, monkeypatch):
    """The start is the least-squares affine fit (with intercept) of h_L on h over the rows
    trained on: stored weight I + W = A^T, bias c; the held-out KL at epoch 0 is that map's; a
    harmful learning rate keeps it. It is far better than the identity, and a gentle learning
    rate lowers the KL further (the start minimises the MSE, training the KL)."""
    head, source, final = lens_problem
    seen = record_starts(monkeypatch, AffineTranslator)
    harmful = trained_with(learning_rate=1.0, max_epochs=20, batch_size=32, patience=2)
    result = train_tuned_lens(source, head, final, settings=harmful, seed=0)
    assert result.best_epoch == 0 and len(result.train_loss) == 2
    rows = trained_rows(source, seen[0])
    held = np.setdiff1d(np.arange(len(source)), rows)
    assert len(rows) == 144
    fit = LinearRegression().fit(source[rows].astype(np.float64), final[rows].astype(np.float64))
    np.testing.assert_allclose(result.tensors["weight"], fit.coef_, atol=1e-5)
    np.testing.assert_allclose(result.tensors["bias"], fit.intercept_, atol=1e-5)
    start = {"weight": fit.coef_, "bias": fit.intercept_}
    assert result.holdout_loss[0] == pytest.approx(
        lens_kl(head, source, final, start, held), rel=1e-4
    )
    identity = {"weight": np.eye(16), "bias": np.zeros(16)}
    assert lens_kl(head, source, final, start) < 0.2 * lens_kl(head, source, final, identity)
    gentle = trained_with(learning_rate=3e-4, max_epochs=10, batch_size=32, patience=3)
    runs = [train_tuned_lens(source, head, final, settings=gentle, seed=0) for _ in range(2)]
    assert runs[0].best_epoch > 0 and min(runs[0].holdout_loss) < runs[0].holdout_loss[0]
    assert lens_kl(head, source, final, runs[0].tensors) < lens_kl(head, source, final, start)
    for name in runs[0].tensors:  # bit-identical from run to run
        assert np.array_equal(runs[0].tensors[name], runs[1].tensors[name]), name
