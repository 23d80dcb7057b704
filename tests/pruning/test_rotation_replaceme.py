"""Depth pruning's rotation_replaceme stand-in, h_{i+n} := s·(r_i + X_i T) Q (jtc.pruning.joint):
the joint least squares in closed form from the calibration sums, never worse on the calibration
tokens than ReplaceMe (Q = I, s = 1) or the rotation (T = I) alone, its loss the direct error;
run in memory, folded (T into block i's MLP, s·Q into the embeddings and blocks 1..i) and
exported as a standard checkpoint whose logits are the hooked stand-in's. And the calibration
option that leaves each sentence's first token out of the sums."""

import copy
import json

import numpy as np
import pytest
import torch
from pruneable import LAYERS, TOKENIZER, make, make_rotatable
from tiny import SENTENCES

from jtc.model.cache import cache_model
from jtc.model.manifest import model_fingerprint
from jtc.pruning.calibrate import fit_span
from jtc.pruning.checkpoint import export, prune_blocks
from jtc.pruning.export_check import hooked_logits
from jtc.pruning.fits import SpanGrams
from jtc.pruning.map_file import load_stand_in, save_span_maps
from jtc.pruning.pruned import pruned_copy, stand_in_module, stand_in_state
from jtc.pruning.spans import StatisticsPlan
from jtc.pruning.sums import every_state, span_statistics
from jtc.shortcuts.maps import ShortcutMap

WIDTH, TOKENS, EPS = 8, 300, 1e-9


def synthetic(noise: float, seed: int = 0):
    """Sums of one span (h_0 → h_1, X_0 := block 1's MLP output stored at index 1) where the
    target is s·(h − X + X T) Q plus noise, and the token rows (h, X, y)."""
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(TOKENS, WIDTH)) * np.linspace(0.5, 3.0, WIDTH)
    x = rng.normal(size=(TOKENS, WIDTH)) + 0.5 * h
    t = np.eye(WIDTH) + 0.4 * rng.normal(size=(WIDTH, WIDTH))
    q, _ = np.linalg.qr(rng.normal(size=(WIDTH, WIDTH)))
    y = 1.6 * (h - x + x @ t) @ q + noise * rng.normal(size=(TOKENS, WIDTH))
    # the span starts at block 1: h_1 = h, its MLP output X, the target h_2 = y
    grams = SpanGrams(
        num_layers=2,
        tokens=TOKENS,
        squares=np.array([0.0, np.sum(h * h), np.sum(y * y)]),
        dots={(1, 2): float(np.sum(h * y))},
        state_cross={(1, 2): h.T @ y},
        ffn_grams={1: x.T @ x},
        ffn_cross={(1, 2): x.T @ y},
        ffn_own={1: x.T @ h},
    )
    return grams, h, x, y


def direct_loss(tensors, h, x, y) -> float:
    t, turn = tensors["weight"].T, tensors["rotation"].T
    return float(np.sum(((h - x + x @ t) @ turn - y) ** 2) / np.sum(y * y))


@pytest.mark.parametrize("noise", [0.0, 0.5, 5.0])
def test_the_joint_fit_is_never_worse_than_either_alone_and_its_loss_is_the_direct_error(noise):
    grams, h, x, y = synthetic(noise)
    joint = fit_span(grams, "rotation_replaceme", 1, 1, rank=1)
    alone = {v: fit_span(grams, v, 1, 1, rank=1).loss for v in ("replaceme", "rotation")}
    assert joint.loss <= min(alone.values()) + 1e-12
    assert joint.loss == pytest.approx(direct_loss(joint.tensors, h, x, y), rel=1e-7, abs=1e-9)
    turn = joint.tensors["rotation"].T
    scale = np.linalg.norm(turn) / np.sqrt(WIDTH)
    np.testing.assert_allclose(turn.T @ turn / scale**2, np.eye(WIDTH), atol=1e-10)
    if noise == 0.0:  # the generating stand-in is reachable: both alone miss it, the joint not
        assert min(alone.values()) > 1e-2 and joint.loss < 1e-9


def test_a_ridge_still_gives_a_scaled_rotation_and_a_finite_loss():
    grams, h, x, y = synthetic(0.5)
    joint = fit_span(grams, "rotation_replaceme", 1, 1, rank=1, ridge=0.1)
    assert 0 < joint.loss < 1 and np.isfinite(joint.tensors["weight"]).all()
    assert joint.loss == pytest.approx(direct_loss(joint.tensors, h, x, y), rel=1e-7)


def inputs():
    return [np.asarray(TOKENIZER(s)["input_ids"], dtype=np.int64) for s in SENTENCES]


def batch():
    return TOKENIZER(SENTENCES[:4], return_tensors="pt", padding=True)


@pytest.mark.parametrize(("kind", "tied"), [("llama", True), ("qwen2", False)])
def test_the_fitted_stand_in_runs_in_memory_folds_and_exports(kind, tied, tmp_path):
    """On a tiny model's calibration sums: the span run's stand-in (from the unmodified h_i and
    X_i) is what the pruned copy's next block reads; the pruned copy equals the model with T and
    s·Q folded; export writes it from the maps file, checked against the hooked reference."""
    m, adapter = make_rotatable(kind, tied, EPS)
    start, length = 2, 2
    plan = StatisticsPlan.of(LAYERS, [length], ["rotation_replaceme"])
    grams = span_statistics(m, adapter, inputs(), plan, batch_size=3, pad_id=0)
    fits = [fit_span(grams, v, start, length, rank=1) for v in ("rotation_replaceme", "replaceme")]
    joint = fits[0]
    assert joint.loss <= fits[1].loss + 1e-12
    work = tmp_path / "work"
    m.save_pretrained(work / "src")
    TOKENIZER.save_pretrained(work / "src")
    cache_model(kind, {"source": str(work / "src")}, work / "m")
    maps = tmp_path / "maps.safetensors"
    meta = {"model": kind, "model_fingerprint": model_fingerprint(work / "m")}
    text = {"corpus": "test", "calibration_text": "2 windows × 8 tokens", "calibration_tokens": 16}
    save_span_maps(maps, fits, {**meta, **text, "ridge": 0.0})
    span_map, rotation = load_stand_in(maps, "rotation_replaceme", start, length)
    assert rotation is not None and set(span_map.tensors) == {"weight"}

    # the span run's stand-in equals the state the pruned copy's block start+1 reads
    hooked = pruned_copy(m, adapter, "rotation_replaceme", start, length, span_map, rotation)
    read = {}

    def keep(_module, args, kwargs):
        read["h"] = (args[0] if args else kwargs["hidden_states"]).clone()

    adapter.blocks(hooked)[start].register_forward_pre_hook(keep, with_kwargs=True)
    with torch.no_grad(), every_state(m, adapter, ffn=True) as kept:
        m(**batch(), use_cache=False)
        want = hooked(**batch(), use_cache=False).logits
        linear = stand_in_module(span_map, rotation)
        state = stand_in_state(
            "rotation_replaceme", linear, kept["states"][start], kept["ffn"][start - 1]
        )
    torch.testing.assert_close(read["h"], state, rtol=1e-4, atol=1e-5)

    folded = copy.deepcopy(m)
    prune_blocks(folded, adapter, start, length, span_map.tensors["weight"], rotation)
    with torch.no_grad():
        got = folded(**batch(), use_cache=False).logits
    assert float((got - want).abs().max() / want.abs().max()) < 1e-4
    reference = hooked_logits(
        m, adapter, start, length, span_map.tensors["weight"], dict(batch()), rotation
    )
    assert float((reference - want).abs().max() / want.abs().max()) < 1e-4

    out = export(
        work / "m",
        tmp_path / "out",
        start=start,
        length=length,
        variant="rotation_replaceme",
        maps=maps,
    )
    done = json.loads((out / "pruning.json").read_text())
    assert done["variant"] == "rotation_replaceme" and done["num_layers_after"] == LAYERS - 2
    assert done["check"]["fold_error_relative"] < 1e-4
    assert "mlp.down_proj" in done["folded_into"] and "embeddings" in done["folded_into"]
    # what the map was calibrated on travels with the checkpoint (an older file's rank: None)
    assert done["calibration"] == {**text, "ridge": 0.0, "rank": None}


def test_a_rotation_replaceme_map_without_its_rotation_is_refused(tmp_path):
    grams, *_ = synthetic(0.5)
    fit = fit_span(grams, "rotation_replaceme", 1, 1, rank=1)
    maps = tmp_path / "maps.safetensors"
    lacking = type(fit)(fit.variant, 1, 1, {"weight": fit.tensors["weight"]}, fit.solver, 0.0)
    save_span_maps(maps, [lacking], {"model": "m"})
    with pytest.raises(Exception, match="has no 'rotation' part: rerun calibrate_pruning"):
        load_stand_in(maps, "rotation_replaceme", 1, 1)
    m, adapter = make("llama")
    with pytest.raises(ValueError, match="its rotation \\(or none\\) do not agree"):
        pruned_copy(m, adapter, "rotation_replaceme", 1, 1, ShortcutMap({"weight": np.eye(32)}))
    assert len(adapter.blocks(m)) == LAYERS  # nothing changed


def test_the_first_token_can_be_left_out_of_the_calibration_sums():
    """skip_first_token sums every token but each sentence's first, which still runs as context
    (the states of the others are those of the whole sentence)."""
    m, adapter = make("llama")
    plan = StatisticsPlan.of(LAYERS, [2], ["mat", "replaceme"])
    every = span_statistics(m, adapter, inputs(), plan, batch_size=3, pad_id=0)
    rest = span_statistics(
        m, adapter, inputs(), plan, batch_size=3, pad_id=0, skip_first_token=True
    )
    assert rest.tokens == every.tokens - len(inputs())
    squares, gram = np.zeros(LAYERS + 1), np.zeros((32, 32))
    with torch.no_grad(), every_state(m, adapter, ffn=False) as kept:
        for ids in inputs():
            m(input_ids=torch.tensor(ids)[None], use_cache=False)
            states = [s[0, 1:].double().numpy() for s in kept["states"]]
            squares += [float(np.sum(s * s)) for s in states]
            gram += states[1].T @ states[1]
    np.testing.assert_allclose(rest.squares, squares, rtol=1e-6)  # batched vs one by one
    np.testing.assert_allclose(rest.state_grams[1], gram, rtol=1e-5, atol=1e-7)
    assert not np.allclose(every.state_grams[1], gram)
