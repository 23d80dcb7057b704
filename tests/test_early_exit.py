"""Early exit: the vectorised λ sweep against running the model block by block and stopping."""

import numpy as np
import pytest
from test_prediction import LAYERS, decode, validation  # noqa: F401 - the fixture

from jtc.adapters import get_adapter
from jtc.decode import Head
from jtc.early_exit import (
    ExitRule,
    Sweep,
    exit_layers,
    layer_arrays,
    mean_prefix_length,
    run_with_early_exit,
    savings,
    sweep,
)
from jtc.extract import prepare_inputs
from jtc.io import read_json, read_table
from jtc.maps import to_last_layer
from jtc.models import load_cached


def model_inputs(work, tokenizer, info):
    """The exact sequences and positions extraction used for the validation states."""
    sentences = read_table(work / "sentences.parquet")
    val = read_json(work / "val" / "info.json")
    return prepare_inputs(
        tokenizer,
        sentences.column("text").to_pylist(),
        sentences.column("sentence_id").to_numpy(),
        val["task"],
        val["seed"],
        val["max_tokens"],
        info.get("mask_token_id"),
    )


@pytest.mark.parametrize("method", ["id", "mat"])
def test_sweep_equals_running_the_model_and_stopping(validation, method):  # noqa: F811
    kind, work, _, noisy = validation
    files = noisy if method == "mat" else None
    table = decode(work, method, files, f"{method}_exit")
    ids, confidence, correct = layer_arrays(table)
    top1 = np.stack(
        [
            table.filter(table.column("layer").to_numpy() == layer).column("top1_id").to_numpy()
            for layer in range(LAYERS + 1)
        ],
        axis=1,
    )
    positions = read_table(work / "val" / "positions.parquet")
    t = positions.column("position").to_numpy()
    rule = ExitRule(tau=4.0, min_layer=1)
    length = mean_prefix_length(t)
    # λ spread over the confidences actually seen, so that tokens exit at different layers
    decay = rule.decay_weight * np.exp(-rule.tau * t / length)
    lambdas = (np.quantile(confidence[:, 1:LAYERS], [0.1, 0.3, 0.5, 0.7, 0.9]) - decay.mean()) / 0.9
    lambdas = np.concatenate([[-1.0], lambdas, [2.0]])
    thresholds = rule.thresholds(lambdas, t, length)
    exits = exit_layers(confidence, thresholds, rule.min_layer)
    assert any(len(np.unique(row)) > 1 for row in exits)  # tokens part ways at some λ

    model, tokenizer, info = load_cached(work / "m")
    adapter = get_adapter(info["architecture"])
    head = Head.from_model(model, adapter)
    prepared = model_inputs(work, tokenizer, info)
    assert np.array_equal(prepared.sentence_ids, ids)

    def to_last(layer, state):
        return to_last_layer(files, layer, state, LAYERS).astype(np.float32)

    for j in range(len(lambdas)):
        for i, (inp, pos) in enumerate(zip(prepared.inputs, prepared.positions, strict=True)):
            layer, token = run_with_early_exit(
                model, adapter, head, to_last, inp, int(pos), float(thresholds[j, i])
            )
            assert (layer, token) == (exits[j, i], top1[i, exits[j, i]]), (kind, j, i)
    result = sweep(confidence, correct, t, lambdas, rule)
    np.testing.assert_allclose(result.mean_layers, exits.mean(axis=1))
    assert result.mean_layers[0] == 1 and result.mean_layers[-1] == LAYERS
    assert result.accuracy[-1] == 1.0 and result.early_fraction[-1] == 0.0


def test_extreme_lambdas_and_min_layer():
    rng = np.random.default_rng(0)
    n, last = 200, 6
    confidence = rng.uniform(0, 1, size=(n, last + 1))
    correct = rng.uniform(size=(n, last + 1)) < 0.6
    correct[:, last] = True
    t = rng.integers(0, 30, size=n)
    above = confidence.max() / 0.9 + 0.01  # threshold above every confidence
    result = sweep(confidence, correct, t, np.array([-5.0, 0.3, above]), ExitRule(min_layer=3))
    assert result.mean_layers[0] == 3 and result.early_fraction[0] == 1.0
    assert result.accuracy[0] == correct[:, 3].mean()
    assert result.mean_layers[2] == last and result.accuracy[2] == 1.0
    assert 3 < result.mean_layers[1] < last
    with pytest.raises(ValueError, match="min_layer 7 is outside 1..6"):
        exit_layers(confidence, np.zeros((1, n)), 7)


def test_sweep_matches_a_loop_over_lambdas_and_tokens():
    rng = np.random.default_rng(1)
    n, last = 300, 8
    confidence = rng.uniform(0, 0.6, size=(n, last + 1))
    correct = rng.uniform(size=(n, last + 1)) < 0.5
    t = rng.integers(0, 40, size=n)
    rule = ExitRule(tau=3.0, lambda_weight=0.8, decay_weight=0.2, min_layer=2)
    lambdas = np.linspace(-0.2, 1.0, 25)
    result = sweep(confidence, correct, t, lambdas, rule)
    length = np.mean(t + 1)
    for j, lam in enumerate(lambdas):
        layers, hits = [], []
        for i in range(n):
            threshold = 0.8 * lam + 0.2 * np.exp(-3.0 * t[i] / length)
            exit_at = next((k for k in range(2, last) if confidence[i, k] > threshold), last)
            layers.append(exit_at)
            hits.append(correct[i, exit_at])
        assert result.mean_layers[j] == pytest.approx(np.mean(layers))
        assert result.accuracy[j] == pytest.approx(np.mean(hits))


def test_savings_pick_the_fewest_layers_reaching_each_target():
    lambdas = np.array([0.0, 0.5, 1.0])
    sweeps = {
        "id": Sweep(lambdas, np.array([2.0, 6.0, 10.0]), np.array([0.5, 0.93, 1.0]), np.zeros(3)),
        "mat": Sweep(lambdas, np.array([2.0, 4.0, 10.0]), np.array([0.7, 0.96, 1.0]), np.zeros(3)),
    }
    rows = {(r["method"], r["target"]): r for r in savings(sweeps, 10, [0.9, 0.95])}
    assert rows[("id", 0.9)]["mean_layers"] == 6.0 and rows[("id", 0.9)]["saved_percent"] == 40.0
    assert rows[("mat", 0.9)]["lambda"] == 0.5 and rows[("mat", 0.9)]["layers_saved"] == 6.0
    assert rows[("mat", 0.9)]["beyond_id_percent"] == pytest.approx(20.0)
    assert rows[("id", 0.95)]["mean_layers"] == 10.0  # only the run to the end reaches 0.95
    assert rows[("mat", 0.95)]["beyond_id_percent"] == pytest.approx(60.0)
    assert savings({"mat": sweeps["mat"]}, 10, [0.9])[0]["beyond_id_percent"] is None
