"""Depth pruning's rotation stand-in (h_{i+n} := s·h_i Q, Q orthogonal): the scaled orthogonal
Procrustes fit from the calibration sums recovers a known s·Q, its calibration loss is the
direct error, and on a tiny random model it lies between mat's (any matrix) and drop's
(s = 1, Q = I)."""

import numpy as np
import pytest
from tiny import SENTENCES, make_model

from jtc.model.adapters import get_adapter
from jtc.pruning.calibrate import fit_span
from jtc.pruning.fits import SpanGrams, select_spans, underdetermined_fit
from jtc.pruning.map_file import load_span_map, save_span_maps
from jtc.pruning.spans import StatisticsPlan, spans
from jtc.pruning.sums import span_statistics
from jtc.pruning.tables import calibration_table, selection_table
from jtc.pruning.variants import VARIANTS
from jtc.shortcuts.maps import ShortcutMap

WIDTH, TOKENS = 8, 200


def synthetic(noise: float, seed: int = 0):
    """(sums of h_0 = X and h_1 = s·X Q + noise, X, Y, s, Q) with a random orthogonal Q."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(TOKENS, WIDTH)) * np.linspace(0.5, 3.0, WIDTH)
    q, _ = np.linalg.qr(rng.normal(size=(WIDTH, WIDTH)))
    s = 1.7
    y = s * x @ q + noise * rng.normal(size=(TOKENS, WIDTH))
    grams = SpanGrams(
        num_layers=1,
        tokens=TOKENS,
        squares=np.array([np.sum(x * x), np.sum(y * y)]),
        dots={(0, 1): float(np.sum(x * y))},
        state_cross={(0, 1): x.T @ y},
    )
    return grams, x, y, s, q


def test_procrustes_recovers_a_known_scaled_rotation():
    grams, x, _, s, q = synthetic(noise=0.0)
    fit = fit_span(grams, "rotation", 0, 1, rank=1)
    assert fit.solver == "svd"
    weight = fit.tensors["weight"]  # (s·Q)ᵀ in torch.nn.Linear's convention
    np.testing.assert_allclose(weight.T, s * q, atol=1e-10)
    assert np.linalg.norm(weight) / np.sqrt(WIDTH) == pytest.approx(s, rel=1e-12)
    assert fit.loss == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(ShortcutMap(fit.tensors)(x), s * x @ q, atol=1e-9)


@pytest.mark.parametrize("noise", [0.3, 3.0])
def test_the_calibration_loss_is_the_direct_error(noise):
    """(yy - s·tr(QᵀC)) / yy from the sums is ||Y - s·X Q||² / ||Y||² on the tokens; s and Q
    are optimal: any other scale or a perturbed rotation does worse."""
    grams, x, y, _, _ = synthetic(noise)
    fit = fit_span(grams, "rotation", 0, 1, rank=1)
    weight = fit.tensors["weight"]
    direct = np.sum((y - x @ weight.T) ** 2) / np.sum(y * y)
    assert fit.loss == pytest.approx(direct, rel=1e-9)
    s = np.linalg.norm(weight) / np.sqrt(WIDTH)
    q = weight.T / s
    np.testing.assert_allclose(q.T @ q, np.eye(WIDTH), atol=1e-12)
    for other in (0.9 * s, 1.1 * s):
        assert np.sum((y - other * x @ q) ** 2) / np.sum(y * y) > fit.loss
    turn = np.eye(WIDTH)
    turn[:2, :2] = [[np.cos(0.05), -np.sin(0.05)], [np.sin(0.05), np.cos(0.05)]]
    assert np.sum((y - s * x @ q @ turn) ** 2) / np.sum(y * y) > fit.loss


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_rotation_lies_between_mat_and_drop(kind):
    """On a tiny random model's calibration sums: s = 1, Q = I (drop) is one of rotation's
    maps and rotation is one of mat's, so drop's loss >= rotation's >= mat's at every span."""
    layers = 6
    model, tokenizer = make_model(kind, layers=layers, width=32)
    inputs = [np.asarray(tokenizer(s)["input_ids"], dtype=np.int64) for s in SENTENCES]
    plan = StatisticsPlan.of(layers, [1, 2], ["drop", "rotation"])
    assert plan.state_sources == ()  # rotation needs no Gram matrix: tr(G) is Σ ||h_i||²
    grams = span_statistics(model, get_adapter(kind), inputs, plan, batch_size=3, pad_id=0)
    assert grams.width == 32
    full = span_statistics(
        model, get_adapter(kind), inputs, StatisticsPlan.of(layers, [1, 2], VARIANTS), 3, 0
    )
    for start, n in spans(layers, [1, 2], "rotation"):
        rotation = fit_span(grams, "rotation", start, n, rank=1)
        assert rotation.loss <= fit_span(grams, "drop", start, n, rank=1).loss + 1e-12
        assert rotation.loss >= fit_span(full, "mat", start, n, rank=1).loss - 1e-9
        assert rotation.loss == pytest.approx(fit_span(full, "rotation", start, n, 1).loss)
    assert underdetermined_fit("rotation", grams.tokens, 10**6)


def test_rotation_maps_are_stored_selected_and_tabled(tmp_path):
    """The calibration's path for rotation: fits selected by every rule, the tables written,
    the maps file holding each span's (s·Q)ᵀ, read back as the export reads it."""
    layers = 6
    model, tokenizer = make_model("llama", layers=layers, width=32)
    inputs = [np.asarray(tokenizer(s)["input_ids"], dtype=np.int64) for s in SENTENCES]
    variants = ["drop", "rotation"]
    plan = StatisticsPlan.of(layers, [2], variants)
    grams = span_statistics(model, get_adapter("llama"), inputs, plan, batch_size=3, pad_id=0)
    fits = [fit_span(grams, v, i, n, rank=1) for v in variants for i, n in spans(layers, [2], v)]
    chosen = select_spans(grams, fits, [2], variants)
    assert {s.selection for s in chosen if s.variant == "rotation"} == {
        "angular_distance",
        "block_influence",
        "measured",
    }
    calibration = calibration_table(grams, fits, 0.0, 32).to_pylist()
    rotation = [r for r in calibration if r["variant"] == "rotation"]
    assert len(rotation) == len(spans(layers, [2], "rotation"))
    assert all(r["underdetermined"] == (grams.tokens < 32) for r in rotation)
    assert len(selection_table(chosen, layers, grams.tokens, 32)) == len(chosen)
    path = tmp_path / "maps.safetensors"
    save_span_maps(path, fits, {"model": "llama"})
    for fit in fits:
        if fit.variant == "rotation":
            got = load_span_map(path, "rotation", fit.start, fit.length).tensors["weight"]
            np.testing.assert_allclose(got, fit.tensors["weight"], rtol=1e-6, atol=1e-7)
