"""The trained shortcut methods: NJTC, N-NJTC and the tuned-lens translator."""

import numpy as np
import pytest
import torch
from tiny import make_model

from jtc.adapters import get_adapter
from jtc.decode import Head, final_reference
from jtc.fit import fit_source
from jtc.maps import ShortcutMap, load_map, save_maps
from jtc.methods import fitted_targets
from jtc.train import (
    LowRankMap,
    TrainSettings,
    default_rank,
    lens_loss,
    pair_seed,
    train_low_rank,
    train_tuned_lens,
)


def linear_problem(n=300, d=8, seed=0, noise=0.3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * rng.uniform(0.5, 2.0, size=d) + rng.normal(size=d)
    y = x @ rng.normal(size=(d, d)) + noise * rng.normal(size=(n, d))
    return x.astype(np.float32), y.astype(np.float32)


def mse(pred, y):
    return float(np.mean((pred - y) ** 2))


def test_njtc_at_full_rank_reaches_least_squares_training_error():
    x, y = linear_problem()
    weights, _ = fit_source(x, [(1, y)])
    best = mse(x @ weights[1].T, y)
    settings = TrainSettings(
        learning_rate=0.03, max_epochs=400, batch_size=64, holdout_fraction=0.0
    )
    result = train_low_rank(x, y, rank=8, normalise=False, settings=settings, seed=0)
    trained = mse(ShortcutMap(result.tensors)(x), y)
    assert best <= trained <= 1.01 * best, (trained, best)


def test_training_loss_decreases_and_early_stopping_keeps_the_best_epoch():
    x, y = linear_problem(noise=1.0)
    settings = TrainSettings(learning_rate=0.01, max_epochs=60, batch_size=32, patience=5)
    result = train_low_rank(x, y, rank=2, normalise=True, settings=settings, seed=3)
    assert result.train_loss[-1] < 0.5 * result.train_loss[0]
    assert min(result.holdout_loss) < 0.5 * result.holdout_loss[0]  # [0]: before training
    assert result.holdout_loss[result.best_epoch] == min(result.holdout_loss)
    assert len(result.train_loss) <= settings.max_epochs


@pytest.mark.parametrize("normalise", [False, True])
def test_same_seed_gives_identical_maps(normalise):
    x, y = linear_problem()
    settings = TrainSettings(max_epochs=5, batch_size=32)
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
    settings = TrainSettings(max_epochs=20, batch_size=32)
    result = train_low_rank(x, y, rank=2, normalise=True, settings=settings, seed=0)
    stats = result.tensors
    # the running statistics were learned from the training batches
    np.testing.assert_allclose(stats["norm.running_mean"], x.mean(0), rtol=0.1, atol=0.3)
    np.testing.assert_allclose(stats["norm.running_var"], x.var(0), rtol=0.25)
    # a stored map gives each row the same prediction alone as in a batch: no batch statistics
    save_maps(tmp_path / "m.safetensors", {1: stats}, {"method": "nnjtc"})
    shortcut = load_map(tmp_path / "m.safetensors", 1)
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
    model, _ = make_model("gpt2", layers=2, width=16)
    model.eval()
    head = Head.from_model(model, get_adapter("gpt2"))
    rng = np.random.default_rng(0)
    source = rng.normal(size=(160, 16)).astype(np.float32)
    mixing = rng.normal(size=(16, 16)).astype(np.float32)
    final = (source @ mixing + 0.5).astype(np.float32)
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


def test_tuned_lens_starts_at_the_identity_and_lowers_the_kl(lens_problem):
    head, source, final = lens_problem
    settings = TrainSettings(learning_rate=0.01, max_epochs=30, batch_size=32, patience=30)
    result = train_tuned_lens(source, head, final, settings=settings, seed=0)
    identity = {"weight": np.eye(16), "bias": np.zeros(16)}
    reference = final_reference(head, final, 1)
    rows = torch.arange(len(source))

    def kl(tensors):
        mapped = torch.tensor(ShortcutMap(tensors)(source), dtype=torch.float32)
        with torch.no_grad():
            return float(lens_loss(head, reference, mapped, rows))

    assert result.holdout_loss[0] == pytest.approx(kl(identity), rel=0.5)  # held-out part only
    assert kl(result.tensors) < 0.7 * kl(identity)
    again = train_tuned_lens(source, head, final, settings=settings, seed=0)
    assert np.array_equal(again.tensors["weight"], result.tensors["weight"])
