"""Depth pruning's replaceme_cosine (ReplaceMe's second objective, jtc.pruning.cosine): on tiny
random models the Adam fit from the least-squares T lowers the mean cosine distance on the
calibration tokens, is the same bit for bit when run again, runs through the calibration, the
maps file, the in-memory pruned model, the span runs and the exported checkpoint as replaceme
does, and its settings (pruning.cosine) are checked by the config schema."""

import json

import numpy as np
import pyarrow as pa
import pytest
import torch
from configs import BASE
from pruneable import TOKENIZER, make
from tiny import SENTENCES, make_model

from jtc.model.adapters import get_adapter
from jtc.model.cache import cache_model, load_cached
from jtc.model.manifest import model_fingerprint
from jtc.pipeline.config import ConfigError, validate_config
from jtc.pruning.calibrate import calibrate, fit_span
from jtc.pruning.checkpoint import export
from jtc.pruning.cosine import cosine_rows, fit_cosine_span, span_losses
from jtc.pruning.export_check import hooked_logits
from jtc.pruning.map_file import load_span_map, save_span_maps
from jtc.pruning.pruned import pruned_copy
from jtc.pruning.runs import SpanRun, stand_in
from jtc.pruning.spans import StatisticsPlan, spans
from jtc.pruning.sums import every_state, span_statistics
from jtc.pruning.variants import variant_of
from jtc.settings import CalibrationSettings, CosineSettings

LAYERS = 6
VARIANT = "replaceme_cosine"
# a few passes at a learning rate that moves T within them (ReplaceMe's 1e-4 is for its
# thousands of steps)
QUICK = CosineSettings(epochs=10, learning_rate=1e-2, batch_tokens=16)


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def fitted(request):
    """(grams, rows, spans) of a tiny random model on the tiny sentences (more tokens than the
    width: the least-squares T is determined)."""
    model, tokenizer = make_model(request.param, layers=LAYERS, width=32)
    adapter = get_adapter(request.param)
    inputs = [np.asarray(tokenizer(s)["input_ids"], dtype=np.int64) for s in SENTENCES]
    plan = StatisticsPlan.of(LAYERS, [2], [VARIANT])
    grams = span_statistics(model, adapter, inputs, plan, batch_size=3, pad_id=0)
    todo = spans(LAYERS, [2], VARIANT)
    rows = cosine_rows(model, adapter, inputs, todo, batch_size=3, pad_id=0)
    assert grams.tokens == rows.tokens > 32
    return grams, rows, todo


def test_the_variant_needs_replacemes_sums_and_starts_after_the_embeddings():
    alone = StatisticsPlan.of(LAYERS, [2], ["drop", VARIANT])
    assert alone.ffn_pairs == StatisticsPlan.of(LAYERS, [2], ["drop", "replaceme"]).ffn_pairs
    assert alone.ffn_pairs and variant_of(VARIANT).first_start == 1
    assert spans(LAYERS, [2], VARIANT) == spans(LAYERS, [2], "replaceme")


def test_the_rows_are_the_hooked_states(fitted):
    """X_i, r_i = h_i - X_i and h_{i+n} of a span, against span_losses at the least-squares T
    (the calibration loss the float64 sums give)."""
    grams, rows, todo = fitted
    for start, n in todo:
        least = fit_span(grams, "replaceme", start, n, rank=1)
        x, r, y = rows.span(start, n)
        loss, distance = span_losses(x, r, y, torch.from_numpy(least.tensors["weight"].T))
        assert loss == pytest.approx(least.loss, rel=1e-4)
        assert 0.0 < distance < 1.0


def test_adam_lowers_the_cosine_distance_below_least_squares(fitted):
    grams, rows, todo = fitted
    for start, n in todo:
        fit, least = fit_cosine_span(grams, rows, start, n, QUICK)
        assert (fit.variant, fit.solver, least.variant) == (VARIANT, "adam", "replaceme")
        assert fit.cosine_distance < 0.99 * least.cosine_distance, (start, n)
        # least squares is the optimum of the squared error: the cosine fit's is not below it
        assert fit.loss >= least.loss * (1 - 1e-5)
        weight = fit.tensors["weight"]  # Tᵀ, torch.nn.Linear's convention
        assert weight.shape == (32, 32) and np.isfinite(weight).all()
        x, r, y = rows.span(start, n)
        again = span_losses(x, r, y, torch.from_numpy(weight.T))
        assert again == pytest.approx((fit.loss, fit.cosine_distance), rel=1e-9)


def test_the_fit_is_the_same_bit_for_bit(fitted):
    grams, rows, todo = fitted
    start, n = todo[1]
    first, _ = fit_cosine_span(grams, rows, start, n, QUICK)
    second, _ = fit_cosine_span(grams, rows, start, n, QUICK)
    assert np.array_equal(first.tensors["weight"], second.tensors["weight"])
    assert (first.loss, first.cosine_distance) == (second.loss, second.cosine_distance)
    # the minibatches' order plays a part: another size gives another T
    other, _ = fit_cosine_span(grams, rows, start, n, CosineSettings(10, 1e-2, 24))
    assert not np.array_equal(first.tensors["weight"], other.tensors["weight"])
    assert not torch.are_deterministic_algorithms_enabled()  # left as it was


def corpus(count: int) -> pa.Table:
    return pa.table(
        {
            "sentence_id": np.arange(count),
            "text": [SENTENCES[i % len(SENTENCES)] for i in range(count)],
            "split": ["train"] * count,
            "order": np.arange(count),
            "source": ["test"] * count,
            "document": [f"doc-{i}" for i in range(count)],
        }
    )


def test_calibration_maps_pruned_copy_and_export(tmp_path):
    """calibrate fits the variant for every span (the table's cosine_distance is its own);
    its maps file entry `replaceme_cosine.start_i.length_n.weight` gives the pruned model in
    memory and the exported checkpoint, both the hooked reference's logits."""
    model, _ = make("llama")
    model.save_pretrained(tmp_path / "src")
    TOKENIZER.save_pretrained(tmp_path / "src")
    cache_model("llama", {"source": str(tmp_path / "src")}, tmp_path / "m")
    net, tokenizer, info = load_cached(tmp_path / "m")
    layers = info["num_layers"]
    settings = CalibrationSettings.defaults(
        lengths=[2],
        variants=["drop", "replaceme", VARIANT],
        calibration={"text": "sentences"},
        calibration_sentences=16,
        cosine={"epochs": 3, "learning_rate": 1e-3, "batch_tokens": 32},
    )
    done = calibrate(
        net,
        tokenizer,
        info,
        corpus(16),
        settings,
        model="llama",
        corpus="c",
        batch_size=4,
        max_tokens=32,
        fingerprint=model_fingerprint(tmp_path / "m"),
    )
    own = [f for f in done.fits if f.variant == VARIANT]
    assert [(f.start, f.length) for f in own] == spans(layers, [2], VARIANT)
    assert all(f.solver == "adam" for f in own)
    table = done.calibration.to_pylist()
    distances = {r["variant"]: r["cosine_distance"] for r in table}
    assert distances["drop"] is None and distances["replaceme"] is None
    assert all(0 < r["cosine_distance"] < 1 for r in table if r["variant"] == VARIANT)
    assert {r["variant"] for r in done.selection.to_pylist()} >= {VARIANT}

    maps = tmp_path / "maps.safetensors"
    save_span_maps(maps, done.fits, done.metadata)
    start, n = own[-1].start, own[-1].length
    span_map = load_span_map(maps, VARIANT, start, n)
    np.testing.assert_allclose(span_map.tensors["weight"], own[-1].tensors["weight"], rtol=1e-6)
    adapter = get_adapter("llama")
    batch = dict(TOKENIZER(SENTENCES[:4], return_tensors="pt", padding=True))
    weight = span_map.tensors["weight"]
    want = hooked_logits(net, adapter, start, n, weight, batch)
    with torch.no_grad():
        got = pruned_copy(net, adapter, VARIANT, start, n, span_map)(**batch).logits
    assert float((got - want).abs().max()) <= 1e-4 * float(want.abs().max())

    out = export(
        tmp_path / "m", tmp_path / "out", start=start, length=n, variant=VARIANT, maps=maps
    )
    written = json.loads((out / "pruning.json").read_text())
    assert written["variant"] == VARIANT and written["num_layers_after"] == layers - n
    assert written["folded_into"].startswith(f"block {start}: ")
    assert written["check"]["fold_error_relative"] < 1e-4


def test_a_span_run_stands_in_as_replaceme_does():
    """The span runs (jtc.pruning.runs.stand_in) take block i's MLP output for it."""
    model, adapter = make("llama")
    batch = dict(TOKENIZER(SENTENCES[:2], return_tensors="pt", padding=True))
    with torch.no_grad(), every_state(model, adapter, ffn=True) as kept:
        model(**batch)
    linear = torch.nn.Linear(kept["states"][0].shape[-1], kept["states"][0].shape[-1], False)
    states, ffn = kept["states"], kept["ffn"]
    with torch.no_grad():
        got = stand_in(SpanRun.span(VARIANT, 2, 2), linear, states, ffn, torch.device("cpu"))
        want = stand_in(SpanRun.span("replaceme", 2, 2), linear, states, ffn, torch.device("cpu"))
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got, states[2] - ffn[1] + linear(ffn[1]), rtol=1e-6)


@pytest.mark.parametrize(
    "cosine, words",
    [
        ({"epochs": 0}, r"pruning\.cosine\.epochs.*0 is less than the minimum of 1"),
        ({"learning_rate": 0}, r"pruning\.cosine\.learning_rate"),
        ({"learning_rate": "fast"}, r"pruning\.cosine\.learning_rate"),
        ({"batch_tokens": 0}, r"pruning\.cosine\.batch_tokens"),
        ({"steps": 100}, r"pruning\.cosine.*steps"),
    ],
)
def test_invalid_cosine_settings_are_refused_by_their_key(cosine, words):
    with pytest.raises(ConfigError, match=words):
        validate_config({**BASE, "pruning": {"cosine": cosine}})


def test_the_settings_reach_the_calibration():
    pruning = {"variants": ["drop", VARIANT], "export_variant": VARIANT}
    checked = validate_config({**BASE, "pruning": pruning})
    assert CalibrationSettings.from_config(checked) == CalibrationSettings.defaults(
        variants=["drop", VARIANT]
    )
    assert CalibrationSettings.defaults().cosine == CosineSettings.defaults()
    changed = validate_config({**BASE, "pruning": {"cosine": {"epochs": 3}}})
    assert CalibrationSettings.param(changed)["cosine"]["epochs"] == 3  # the rule's params
    assert CalibrationSettings.from_config(changed).cosine.epochs == 3
    assert checked["pruning"]["export_variant"] == VARIANT
    assert VARIANT not in validate_config(BASE)["pruning"]["variants"]


def test_the_calibration_jobs_request_counts_the_rows_and_the_passes(tmp_path, monkeypatch):
    """calibrate_pruning's memory and time requests grow with replaceme_cosine's rows (every
    start's X and every start's and end's h) and its Adam passes (spans × epochs)."""
    from jtc.pipeline.job_shape import stage_shape
    from jtc.pipeline.resources import memory_mb, runtime_minutes

    monkeypatch.chdir(tmp_path)  # no cached model: the large default shape
    shapes = {}
    for variants in (["drop", "replaceme"], ["drop", "replaceme", VARIANT]):
        pruning = {"lengths": [2], "variants": variants, "cosine": {"epochs": 3}}
        config = validate_config({**BASE, "pruning": pruning})
        shapes[len(variants)] = stage_shape("calibrate_pruning", config, "m", "train")
    without, with_cosine = shapes[2], shapes[3]
    layers = without.layers
    assert (without.cosine_rows, without.cosine_passes) == (0, 0)
    starts = len(spans(layers, [2], VARIANT))  # 1..L-2; states 1..L
    assert with_cosine.cosine_rows == starts + layers
    assert with_cosine.cosine_passes == 3 * starts
    for request in (memory_mb, runtime_minutes):
        assert request("calibrate_pruning", with_cosine) > request("calibrate_pruning", without)
