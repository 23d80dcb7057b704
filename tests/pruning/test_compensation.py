"""The training-free magnitude compensations (jtc.pruning.compensation): prune_comp's scalar,
prune_comp_channel's per-channel scales and linear_patch's H D Hᵀ against a direct computation
on random states; the Hadamard matrix they rotate by is orthonormal; the calibration pass sums
the per-channel magnitudes they read; prune_comp exported (folded into the embeddings and blocks
1..i as a rotation with Q = I) gives the logits of its in-memory stand-in; the two that are not
exported are refused at export and in the config, naming what can be exported."""

import json
import re

import numpy as np
import pytest
import torch
from configs import BASE
from pruneable import TOKENIZER, make_rotatable
from tiny import SENTENCES
from transformers import AutoModelForCausalLM

from jtc.model.cache import cache_model, load_cached
from jtc.model.discover import find_adapter
from jtc.model.manifest import model_fingerprint
from jtc.pipeline.config import ConfigError, validate_config
from jtc.pruning.calibrate import fit_span
from jtc.pruning.checkpoint import export, exported_variant_problem
from jtc.pruning.fits import SpanGrams, underdetermined_fit
from jtc.pruning.hadamard import hadamard, is_full_hadamard
from jtc.pruning.map_file import SpanMapWriter
from jtc.pruning.pruned import pruned_copy
from jtc.pruning.rotate import split_rotation
from jtc.pruning.spans import StatisticsPlan
from jtc.pruning.sums import every_state, span_statistics
from jtc.pruning.variants import EXPORTED, VARIANTS
from jtc.shortcuts.maps import ShortcutMap

LAYERS, EPS = 5, 1e-9


@pytest.mark.parametrize("width", [*range(1, 70), 576, 896, 960])
def test_the_hadamard_matrix_is_orthonormal(width):
    """H Hᵀ = I; where jtc builds one Hadamard matrix (SmolLM2's 576 and 960, Qwen2.5's 896)
    every entry is ±1/√d; otherwise it is block-diagonal (6 = 4 + 2)."""
    h = hadamard(width)
    np.testing.assert_allclose(h @ h.T, np.eye(width), atol=1e-12)
    # below 70: orders 1, 2 and the multiples of 4 but 52 (whose Paley constructions need
    # q = 51 or 25, not primes)
    full = {1, 2, *range(4, 70, 4), 576, 896, 960} - {52}
    assert is_full_hadamard(width) == (width in full)
    if width in full:
        np.testing.assert_allclose(np.abs(h) * np.sqrt(width), 1.0, atol=1e-12)
    if width == 6:
        assert np.all(h[:4, 4:] == 0) and np.all(h[4:, :4] == 0)


def random_states(width: int, tokens: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): random source states and targets with unequal channel magnitudes."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(tokens, width)) * rng.uniform(0.2, 3.0, size=width)
    y = 1.7 * x @ np.diag(rng.uniform(0.5, 2.0, size=width)) + 0.3 * rng.normal(
        size=(tokens, width)
    )
    return x, y


def grams_of(x: np.ndarray, y: np.ndarray) -> SpanGrams:
    """The calibration sums of the span (0, 1) with h_0 = x and h_1 = y."""
    h = hadamard(x.shape[1])
    return SpanGrams(
        num_layers=1,
        tokens=len(x),
        squares=np.array([np.sum(x * x), np.sum(y * y)]),
        dots={(0, 1): float(np.sum(x * y))},
        state_grams={0: x.T @ x},
        state_cross={(0, 1): x.T @ y},
        magnitudes={0: np.abs(x).sum(0), 1: np.abs(y).sum(0)},
        hadamard_magnitudes={0: np.abs(x @ h).sum(0), 1: np.abs(y @ h).sum(0)},
    )


def relative_loss(predicted: np.ndarray, y: np.ndarray) -> float:
    return float(np.sum((predicted - y) ** 2) / np.sum(y * y))


@pytest.mark.parametrize("width", [16, 12, 6])
def test_the_fits_are_the_papers_magnitude_ratios(width):
    """prune_comp: s = mean_k mean|y_k| / mean|x_k| (Prune&Comp); prune_comp_channel: that ratio
    per channel; linear_patch: P = H diag(d) Hᵀ with d the ratio of the rotated states
    (LinearPatch), H orthonormal; each calibration loss is the stand-in's on the rows."""
    x, y = random_states(width)
    grams = grams_of(x, y)
    ratio = np.abs(y).mean(0) / np.abs(x).mean(0)

    fit = fit_span(grams, "prune_comp", 0, 1, rank=1)
    scale, q = split_rotation(fit.tensors["weight"])
    assert scale == pytest.approx(ratio.mean(), rel=1e-12)
    np.testing.assert_allclose(q, np.eye(width), atol=1e-12)
    assert fit.loss == pytest.approx(relative_loss(scale * x, y), rel=1e-9)

    fit = fit_span(grams, "prune_comp_channel", 0, 1, rank=1)
    np.testing.assert_allclose(fit.tensors["weight"], np.diag(ratio), rtol=1e-12)
    assert fit.loss == pytest.approx(relative_loss(x * ratio, y), rel=1e-9)

    fit = fit_span(grams, "linear_patch", 0, 1, rank=1)
    h = hadamard(width)
    rotated = np.abs(y @ h).mean(0) / np.abs(x @ h).mean(0)
    patch = h @ np.diag(rotated) @ h.T
    np.testing.assert_allclose(fit.tensors["weight"], patch, atol=1e-12)
    # H D Hᵀ: its eigenvectors are H's columns, its eigenvalues d
    np.testing.assert_allclose(h.T @ fit.tensors["weight"] @ h, np.diag(rotated), atol=1e-12)
    assert fit.loss == pytest.approx(relative_loss(x @ patch, y), rel=1e-9)
    assert fit.loss < relative_loss(x, y)  # better than drop on these states


def test_a_magnitude_ratio_is_never_flagged_underdetermined():
    """It fits no token, so its calibration loss means something on any number of tokens (a
    least-squares map on fewer tokens than the width reproduces them)."""
    for name in ("prune_comp", "prune_comp_channel", "linear_patch"):
        assert not underdetermined_fit(name, 10, 576)
    assert underdetermined_fit("mat", 10, 576)


def test_a_channel_that_is_always_zero_keeps_its_scale():
    x, y = random_states(8)
    x[:, 3] = 0.0
    fit = fit_span(grams_of(x, y), "prune_comp_channel", 0, 1, rank=1)
    assert fit.tensors["weight"][3, 3] == 1.0 and np.isfinite(fit.loss)


def test_the_calibration_pass_sums_the_magnitudes():
    """span_statistics sums Σ|h_l| and Σ|h_l H| per channel over every token, for the layers at
    either end of a span of the variants that ask for them."""
    model, adapter = make_rotatable("llama", False, EPS)
    inputs = [np.asarray(TOKENIZER(s)["input_ids"], dtype=np.int64) for s in SENTENCES]
    plan = StatisticsPlan.of(LAYERS, [2], ["prune_comp", "linear_patch"])
    assert plan.magnitude_states == plan.hadamard_states == tuple(range(LAYERS + 1))
    assert StatisticsPlan.of(LAYERS, [2], ["mat"]).magnitude_states == ()
    grams = span_statistics(model, adapter, inputs, plan, batch_size=3, pad_id=0)
    rows = [[] for _ in range(LAYERS + 1)]
    with torch.no_grad(), every_state(model, adapter, ffn=False) as kept:
        for ids in inputs:
            adapter.backbone(model)(input_ids=torch.from_numpy(ids)[None], use_cache=False)
            for layer, h in enumerate(kept["states"]):
                rows[layer].append(h[0].double().numpy())
    h = hadamard(model.config.hidden_size)
    for layer in range(LAYERS + 1):
        states = np.concatenate(rows[layer])
        np.testing.assert_allclose(grams.magnitudes[layer], np.abs(states).sum(0), rtol=1e-5)
        np.testing.assert_allclose(
            grams.hadamard_magnitudes[layer], np.abs(states @ h).sum(0), rtol=1e-5
        )


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """(cached model folder, maps file with prune_comp's fitted span (2, 2)) of a tiny Llama."""
    work = tmp_path_factory.mktemp("llama")
    model, adapter = make_rotatable("llama", False, EPS)
    model.save_pretrained(work / "src")
    TOKENIZER.save_pretrained(work / "src")
    cache_model("llama", {"source": str(work / "src")}, work / "m")
    inputs = [np.asarray(TOKENIZER(s)["input_ids"], dtype=np.int64) for s in SENTENCES]
    plan = StatisticsPlan.of(LAYERS, [2], ["prune_comp"])
    grams = span_statistics(model, adapter, inputs, plan, batch_size=3, pad_id=0)
    fit = fit_span(grams, "prune_comp", 2, 2, rank=1)
    meta = {"model": "llama", "model_fingerprint": model_fingerprint(work / "m")}
    maps = work / "maps.safetensors"
    with SpanMapWriter(maps, meta) as writer:
        writer.add("prune_comp", 2, 2, {"weight": fit.tensors["weight"].astype(np.float32)})
    return work / "m", maps, fit


def test_prune_comp_exported_is_its_in_memory_stand_in(fitted, tmp_path):
    """The exported checkpoint (s folded into the embeddings and blocks 1..2, blocks 3..4 gone)
    loads with plain transformers and gives the logits of the in-memory pruned copy, where a
    hook makes h_4 := s·h_2 (the tolerance of the rotation export's tests)."""
    folder, maps, fit = fitted
    out = export(folder, tmp_path / "out", start=2, length=2, variant="prune_comp", maps=maps)
    pruned = AutoModelForCausalLM.from_pretrained(out).eval()
    assert pruned.config.num_hidden_layers == LAYERS - 2
    original, _, _ = load_cached(folder)
    adapter = find_adapter(original, "causal")
    weight = fit.tensors["weight"].astype(np.float32)
    hooked = pruned_copy(original, adapter, "prune_comp", 2, 2, ShortcutMap({"weight": weight}))
    batch = TOKENIZER(SENTENCES[:4], return_tensors="pt", padding=True)
    with torch.no_grad():
        want = hooked(**batch, use_cache=False).logits
        got = pruned(**batch, use_cache=False).logits
        dropped = pruned_copy(original, adapter, "drop", 2, 2, None)(**batch).logits
    assert float((got - want).abs().max() / want.abs().max()) < 1e-4
    assert float((dropped - want).abs().max() / want.abs().max()) > 1e-3  # the scale shows
    done = json.loads((out / "pruning.json").read_text())
    assert done["variant"] == "prune_comp"
    assert done["folded_into"].startswith("embeddings and blocks 1..2")


@pytest.mark.parametrize("name", ["prune_comp_channel", "linear_patch"])
def test_the_stand_ins_measured_in_memory_are_refused_at_export(name, fitted, tmp_path):
    """Refused by name with the reason and the exportable variants, by the export (nothing
    written) and by the config check of pruning.export_variant."""
    assert not VARIANTS[name].exported and "prune_comp" in EXPORTED
    exportable = ", ".join(EXPORTED)
    problem = exported_variant_problem(name)
    assert problem.startswith(f"variant '{name}' cannot be exported: ")
    assert "RMSNorm" in problem and problem.endswith(f"(exported: {exportable})")
    folder, maps, _ = fitted
    with pytest.raises(ValueError, match=re.escape(f"(exported: {exportable})")):
        export(folder, tmp_path / "out", start=2, length=2, variant=name, maps=maps)
    assert not (tmp_path / "out").exists()
    pruning = {"variants": ["drop", name], "export_variant": name}
    with pytest.raises(ConfigError, match=f"'{name}' is not one of.*'prune_comp'"):
        validate_config({**BASE, "pruning": pruning})


def test_ghosted_layers_is_mat_without_a_ridge_and_full_rank_low_rank_with_one():
    """Ghosted Layers' h_i(I + M), M the ridge least squares of h_{i+n} - h_i on h_i, computed
    directly: mat's map at ridge 0, low_rank's at full rank with the ridge (docs/method.md)."""
    x, y = random_states(8)
    grams = grams_of(x, y)
    for ridge in (0.0, 0.1):
        penalty = ridge * np.trace(x.T @ x) / 8 * np.eye(8)
        ghosted = np.eye(8) + np.linalg.solve(x.T @ x + penalty, x.T @ (y - x))
        low_rank = fit_span(grams, "low_rank", 0, 1, rank=8, ridge=ridge).tensors
        parts = low_rank["up.weight"] @ low_rank["down.weight"]
        np.testing.assert_allclose(np.eye(8) + parts.T, ghosted, atol=1e-10)
    unridged = np.eye(8) + np.linalg.solve(x.T @ x, x.T @ (y - x))
    mat = fit_span(grams, "mat", 0, 1, rank=8, ridge=0.0).tensors["weight"]
    np.testing.assert_allclose(mat.T, unridged, atol=1e-10)
