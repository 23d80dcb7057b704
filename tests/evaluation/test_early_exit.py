"""Early exit: the vectorised λ sweep against running the model block by block and stopping."""

import dataclasses

import numpy as np
import pytest
from decoding import LAYERS, decode

from jtc.data.extract import prepare_inputs
from jtc.evaluation.early_exit import (
    Arrays,
    ExitRule,
    exit_layers,
    fold_of,
    held_out,
    layer_arrays,
    mean_prefix_length,
    run_with_early_exit,
    sweep,
)
from jtc.evaluation.exit_tables import ExitCost, exit_tables
from jtc.files.io import read_json, read_table
from jtc.model.adapters import get_adapter
from jtc.model.cache import load_cached
from jtc.model.head import Head
from jtc.settings import EarlyExitSettings
from jtc.shortcuts.maps import to_last_layer


def exit_rule(**changes) -> ExitRule:
    """The default experiment's exit rule (the schema's defaults), with `changes`."""
    return ExitRule.of(EarlyExitSettings.defaults(**changes))


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
def test_sweep_equals_running_the_model_and_stopping(validation, method):
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
    rule = exit_rule(tau=4.0, min_layer=1)
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
    result = sweep(confidence, correct, t, np.array([-5.0, 0.3, above]), exit_rule(min_layer=3))
    assert result.mean_layers[0] == 3 and result.early_fraction[0] == 1.0
    assert result.accuracy[0] == correct[:, 3].mean()
    assert result.mean_layers[2] == last and result.accuracy[2] == 1.0
    assert 3 < result.mean_layers[1] < last
    with pytest.raises(ValueError, match="min_layer 7 is outside 1..6"):
        exit_layers(confidence, np.zeros((1, n)), 7)
    # min_layer = L: nothing is checked, every token runs to the end
    none = sweep(confidence, correct, t, np.array([-5.0, 0.3]), exit_rule(min_layer=last))
    assert list(none.mean_layers) == [last, last] and list(none.checks) == [0, 0]
    assert list(none.accuracy) == [1.0, 1.0] and list(none.early_fraction) == [0, 0]


def loop_exits(confidence, t, lam, rule, every):
    """Per token, by a plain loop: the layer it exits at and the checks made."""
    last = confidence.shape[1] - 1
    length = np.mean(t + 1)
    checked = list(range(rule.min_layer, last, every))
    exits, checks = [], []
    for i in range(len(confidence)):
        threshold = rule.lambda_weight * lam + rule.decay_weight * np.exp(-rule.tau * t[i] / length)
        k = next((k for k, layer in enumerate(checked) if confidence[i, layer] > threshold), None)
        exits.append(checked[k] if k is not None else last)
        checks.append(k + 1 if k is not None else len(checked))
    return np.array(exits), np.array(checks)


@pytest.mark.parametrize("every", [1, 3])
def test_sweep_matches_a_loop_over_lambdas_and_tokens(every):
    rng = np.random.default_rng(1)
    n, last = 300, 8
    confidence = rng.uniform(0, 0.6, size=(n, last + 1))
    correct = rng.uniform(size=(n, last + 1)) < 0.5
    t = rng.integers(0, 40, size=n)
    rule = exit_rule(tau=3.0, lambda_weight=0.8, decay_weight=0.2, min_layer=2)
    lambdas = np.linspace(-0.2, 1.0, 25)
    result = sweep(confidence, correct, t, lambdas, rule, every=every)
    for j, lam in enumerate(lambdas):
        exits, checks = loop_exits(confidence, t, lam, rule, every)
        assert result.mean_layers[j] == pytest.approx(np.mean(exits))
        assert result.accuracy[j] == pytest.approx(np.mean(correct[np.arange(n), exits]))
        assert result.checks[j] == pytest.approx(np.mean(checks))
        assert result.context[j] == pytest.approx(np.mean(exits * (t + 1.0)))
        assert result.early_fraction[j] == pytest.approx(np.mean(exits < last))
        thresholds = rule.thresholds(np.array([lam]), t, np.mean(t + 1))
        np.testing.assert_array_equal(exit_layers(confidence, thresholds, 2, every)[0], exits)


def test_the_cost_of_a_token_counts_blocks_attention_checks_and_the_final_decode():
    info = {"num_layers": 4, "hidden_size": 8, "non_embedding_parameters": 400, "vocab_size": 50}
    cost = ExitCost.of(info, map_parameters=64)
    assert (cost.block, cost.attention_per_token, cost.head, cost.shortcut) == (100, 16, 400, 64)
    confidence = np.array([[0, 0.9, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=float)
    correct = np.ones_like(confidence, dtype=bool)
    t = np.array([0, 4])  # prefixes of 1 and 5 tokens
    result = sweep(confidence, correct, t, np.array([0.5]), exit_rule(decay_weight=0.0))
    # token 0 exits at layer 1 after one check; token 1 runs 4 blocks, 3 checks, a final decode
    want = (1 * (100 + 16 * 1) + 1 * (64 + 400)) + (4 * (100 + 16 * 5) + 3 * (64 + 400) + 400)
    assert cost.per_token(result)[0] == pytest.approx(want / 2)
    assert cost.full(t, 4) == pytest.approx(4 * (100 + 16 * 3) + 400)
    assert cost.fixed_exit(2, t, 4) == pytest.approx(2 * (100 + 16 * 3) + 64 + 400)
    # a cheaper check (the shortlist's) costs less per check; the final decode is the head's
    cheap = ExitCost.of(info, map_parameters=64, check=30)
    want = (1 * (100 + 16 * 1) + 1 * (64 + 30)) + (4 * (100 + 16 * 5) + 3 * (64 + 30) + 400)
    assert cheap.per_token(result)[0] == pytest.approx(want / 2)
    assert cheap.full(t, 4) == cost.full(t, 4)


def test_held_out_thresholds_are_chosen_without_the_positions_they_score():
    rng = np.random.default_rng(3)
    n, last = 400, 6
    confidence = rng.uniform(0, 1, size=(n, last + 1))
    correct = rng.uniform(size=(n, last + 1)) < confidence  # confident predictions are right
    correct[:, last] = True
    t, ids = rng.integers(0, 30, size=n), np.arange(1000, 1000 + n)
    rule, lambdas = exit_rule(), np.linspace(-0.1, 1.2, 40)
    fold = fold_of(ids, seed=5, folds=2)
    assert set(fold) == {0, 1} and np.array_equal(fold, fold_of(ids, 5, 2))
    assert not np.array_equal(fold, fold_of(ids, 6, 2))  # another seed, other folds
    result = held_out(Arrays(confidence, correct, t, ids), lambdas, rule, 0.9, 1, 2, 5)
    length = np.mean(t + 1)
    exits = np.empty(n, dtype=int)
    for f in (0, 1):  # by hand: the fewest layers reaching 0.9 on the other fold
        other, mine = fold != f, fold == f
        calib = sweep(confidence[other], correct[other], t[other], lambdas, rule, length)
        ok = np.flatnonzero(calib.accuracy >= 0.9)
        lam = lambdas[ok[np.argmin(calib.mean_layers[ok])]]
        assert result.lambdas[f] == lam
        thresholds = rule.thresholds(np.array([lam]), t[mine], length)
        exits[mine] = exit_layers(confidence[mine], thresholds, 1)[0]
    assert result.mean_layers[0] == pytest.approx(exits.mean())
    assert result.accuracy[0] == pytest.approx(correct[np.arange(n), exits].mean())


def test_savings_pick_the_fewest_layers_in_sample_and_report_held_out_beside():
    import pyarrow as pa

    rng = np.random.default_rng(4)
    n, last = 300, 6
    scores, costs = {}, {}
    for method, skill in (("id", 0.5), ("mat", 0.8)):
        rows = []
        for layer in range(last + 1):
            p1 = rng.uniform(0.3, 1.0, size=n)
            p2 = p1 * rng.uniform(0, 1, size=n)
            right = (rng.uniform(size=n) < skill + (1 - skill) * layer / last) | (layer == last)
            # the shortlist check: its own, less sure confidences and a few misses more
            s1 = p1 * rng.uniform(0.7, 1.0, size=n)
            s_right = right & (rng.uniform(size=n) < 0.95)  # also at the last layer
            rows += [
                {"method": method, "layer": layer, "sentence_id": i, "top1_prob": p1[i],
                 "top2_prob": p2[i], "final_rank": 1 if right[i] else 2,
                 "shortlist_top1_prob": s1[i], "shortlist_top2_prob": p2[i] * 0.5,
                 "shortlist_final_rank": 1 if s_right[i] else 0}
                for i in range(n)
            ]  # fmt: skip
        scores[method] = pa.Table.from_pylist(rows)
        info = {"num_layers": last, "hidden_size": 8, "non_embedding_parameters": 600}
        costs[method] = ExitCost.of({**info, "vocab_size": 40}, 64 if method == "mat" else 0)
    positions = pa.table({"sentence_id": np.arange(n), "position": rng.integers(0, 20, n)})
    settings = EarlyExitSettings.defaults(
        lambdas=tuple(np.linspace(-0.1, 1.2, 60)), targets=(0.9,), check_every=(1,), folds=2
    )
    with pytest.raises(ValueError, match="no cost for it"):
        exit_tables(scores, positions, last, settings, costs, model="m", corpus="c")
    sweep_table, saved = exit_tables(
        scores,
        positions,
        last,
        dataclasses.replace(settings, check_every=(1, 2)),
        costs,
        model="m",
        corpus="c",
        seed=0,
        shortlist=100.0,
    )
    rows = {
        (r["method"], r["check"], r["selection"], r["check_every"]): r for r in saved.to_pylist()
    }
    assert set(rows) == {
        (m, c, s, k)
        for m in ("id", "mat")
        for c in ("full", "shortlist")
        for s in ("in_sample", "held_out")
        for k in (1, 2)
    }
    sweep_rows = sweep_table.to_pylist()
    t = positions.column("position").to_numpy()
    _, _, shortlisted = layer_arrays(scores["mat"], "shortlist")
    assert shortlisted[:, last].all()  # the last layer: the whole head's prediction
    assert not shortlisted[:, :last].all()
    for check in ("full", "shortlist"):  # each check's sweep from its own columns
        for method in ("id", "mat"):
            table = scores[method] if check == "full" else _as_full(scores[method])
            _, confidence, correct = layer_arrays(table)
            want = sweep(confidence, correct, t, np.linspace(-0.1, 1.2, 60), exit_rule())
            got = [
                r
                for r in sweep_rows
                if (r["method"], r["check"], r["check_every"]) == (method, check, 1)
            ]
            np.testing.assert_allclose([r["accuracy"] for r in got], want.accuracy)
            # priced with that check's decode: the shortlist's 100 multiply-adds, not 40 × 8
            cost = ExitCost.of({**info, "vocab_size": 40}, 64 if method == "mat" else 0,
                               check=100.0 if check == "shortlist" else None)  # fmt: skip
            macs = 100 * cost.per_token(want) / cost.full(t, last)
            np.testing.assert_allclose([r["macs_percent"] for r in got], macs)
    for (method, check, selection, every), row in rows.items():
        if selection == "in_sample":  # the fewest layers among the λ reaching the target
            swept = [
                r
                for r in sweep_rows
                if (r["method"], r["check"], r["check_every"], r["policy"])
                == (method, check, every, "confidence")
                and r["accuracy"] >= 0.9
            ]
            best = min(swept, key=lambda r: r["mean_layers"])
            assert (row["lambda"], row["mean_layers"]) == (best["lambda"], best["mean_layers"])
            assert row["accuracy"] >= 0.9 and row["macs_percent"] == best["macs_percent"]
        else:
            assert row["lambda"] is None
        assert row["saved_percent"] == pytest.approx(100 * (last - row["mean_layers"]) / last)
        assert row["macs_saved_percent"] == pytest.approx(100 - row["macs_percent"])
        base = rows[("id", check, selection, every)]
        assert row["beyond_id_percent"] == pytest.approx(
            row["saved_percent"] - base["saved_percent"]
        )
    # fixed exits: no checks; at the last layer, the full model's cost
    fixed = [r for r in sweep_rows if r["policy"] == "fixed" and r["exit_layer"] == last]
    assert all(r["checks"] == 0 and r["macs_percent"] == pytest.approx(100) for r in fixed)
    assert all(r["check"] is None for r in sweep_rows if r["policy"] == "fixed")


def _as_full(table):
    """A scores table whose full-check columns are its shortlist check's below the last layer
    (a token that runs to the end is decoded by the whole head, whatever the check)."""
    import pyarrow.compute as pc

    below = pc.less(table.column("layer"), pc.max(table.column("layer")))
    for column in ("top1_prob", "top2_prob", "final_rank"):
        value = pc.if_else(below, table.column(f"shortlist_{column}"), table.column(column))
        table = table.set_column(table.column_names.index(column), column, value)
    return table
