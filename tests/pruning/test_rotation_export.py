"""Depth pruning's rotation stand-in folded into the weights (jtc.pruning.rotate) and exported
(jtc.pruning.checkpoint): on tiny random Llama and Qwen2 models with random norm gains, tied and
untied embeddings, the embeddings and blocks 1..i compute s·h_l Q after the fold, the written
checkpoint reproduces the pruned model computed with a hook on the original (h_{i+n} := s·h_i Q,
the span skipped) and loads with plain transformers; LayerNorm and post-norm models are refused
by name, and nothing is written then.

RMSNorm's epsilon is the fold's only inexact term (eps/(s²·mean(h²)) against eps/mean(h²)):
the tiny models' states are small (mean(h²) about 4e-4), so their epsilon is made 1e-9 here."""

import copy
import json
import re

import numpy as np
import pytest
import torch
from pruneable import TOKENIZER, make, make_rotatable
from tiny import SENTENCES
from transformers import AutoModelForCausalLM

from jtc.cli import main
from jtc.model.cache import cache_model, load_cached
from jtc.model.discover import find_adapter
from jtc.model.manifest import model_fingerprint
from jtc.pruning.calibrate import fit_span
from jtc.pruning.checkpoint import export, prune_blocks, write_pruned
from jtc.pruning.export_check import hooked_logits
from jtc.pruning.map_file import SpanMapWriter
from jtc.pruning.pruned import pruned_copy
from jtc.pruning.rotate import fold_rotation, split_rotation
from jtc.pruning.spans import StatisticsPlan
from jtc.pruning.sums import span_statistics
from jtc.shortcuts.maps import ShortcutMap

WIDTH, LAYERS, SCALE, EPS = 32, 5, 1.3, 1e-9
MODELS = [("llama", False), ("llama", True), ("qwen2", False), ("qwen2", True)]


def rotation(seed: int = 0) -> np.ndarray:
    """A random orthogonal Q (a reflection included: det -1 is as good)."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(WIDTH, WIDTH)))
    return q


def model(kind: str, tied: bool, dtype=torch.float32):
    """(model, adapter): a tiny random model with random norm gains, its epsilon 1e-9."""
    return make_rotatable(kind, tied, EPS, dtype)


def ids():
    return TOKENIZER(SENTENCES[:4], return_tensors="pt", padding=True)


@pytest.mark.parametrize("start", [0, 2])
@pytest.mark.parametrize(("kind", "tied"), MODELS)
def test_the_fold_makes_the_first_blocks_compute_the_rotated_stream(kind, tied, start):
    m, adapter = model(kind, tied, torch.float64)
    with torch.no_grad():
        before = m(**ids(), output_hidden_states=True, use_cache=False)
    head = m.lm_head.weight.detach().clone()
    q = rotation()
    fold_rotation(m, adapter, start, SCALE, q)
    with torch.no_grad():
        after = m(**ids(), output_hidden_states=True, use_cache=False)
    qt = torch.from_numpy(q)
    for layer in range(start + 1):  # h_0 (the embeddings) .. h_start
        want = SCALE * before.hidden_states[layer] @ qt
        error = (after.hidden_states[layer] - want).abs().max() / want.abs().max()
        assert error < 1e-4, layer
    # the next block reads the rotated stream unchanged: its output is no longer h_{start+1}
    later = before.hidden_states[start + 1]
    assert (after.hidden_states[start + 1] - later).abs().max() > 1e-2 * later.abs().max()
    assert m.lm_head.weight is not m.model.embed_tokens.weight
    torch.testing.assert_close(m.lm_head.weight, head, rtol=0, atol=0)
    assert not m.config.tie_word_embeddings
    blocks = adapter.blocks(m)
    for block in list(blocks)[:start]:  # the gains folded into the layers that read them
        assert torch.all(block.input_layernorm.weight == 1)
        assert torch.all(block.post_attention_layernorm.weight == 1)
    assert not torch.all(blocks[start].input_layernorm.weight == 1)


def test_split_rotation_recovers_scale_and_rotation_and_refuses_other_maps():
    q = rotation()
    scale, got = split_rotation((SCALE * q).T)
    assert scale == pytest.approx(SCALE)
    np.testing.assert_allclose(got, q, atol=1e-12)
    with pytest.raises(ValueError, match="not a scaled orthogonal matrix"):
        split_rotation(np.eye(WIDTH) + np.random.default_rng(1).normal(size=(WIDTH, WIDTH)))
    with pytest.raises(ValueError, match="zero"):
        split_rotation(np.zeros((WIDTH, WIDTH)))


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    """{(kind, tied): a cached model folder} of each tiny model of MODELS, made on first use."""
    folders = {}

    def get(kind: str, tied: bool = False):
        if (kind, tied) not in folders:
            work = tmp_path_factory.mktemp(f"{kind}{'-tied' if tied else ''}")
            m = model(kind, tied)[0] if kind in ("llama", "qwen2") else make(kind)[0]
            m.save_pretrained(work / "src")
            TOKENIZER.save_pretrained(work / "src")
            cache_model(kind, {"source": str(work / "src")}, work / "m")
            folders[kind, tied] = work / "m"
        return folders[kind, tied]

    return get


def write_maps(path, model_dir, kind, spans):
    meta = {"model": kind, "model_fingerprint": model_fingerprint(model_dir)}
    with SpanMapWriter(path, meta) as writer:
        for s, n in spans:
            weight = (SCALE * rotation(seed=s * 10 + n)).T.astype(np.float32)
            writer.add("rotation", s, n, {"weight": weight})
    return path


@pytest.mark.parametrize(("start", "length"), [(2, 2), (0, 2), (3, 2)])
@pytest.mark.parametrize(("kind", "tied"), MODELS)
def test_export_reproduces_the_hooked_rotation(kind, tied, start, length, cached, tmp_path):
    """export reads the rotation from the maps file, folds it and removes the span; the folder
    loads with AutoModelForCausalLM and its logits are the original's with h_{i+n} := s·h_i Q
    by a hook and the span skipped (start 0: the embeddings only; a span that ends the model:
    the final norm reads the rotated stream)."""
    folder = cached(kind, tied)
    maps = write_maps(tmp_path / "maps.safetensors", folder, kind, [(start, length), (1, 1)])
    out = export(
        folder, tmp_path / "out", start=start, length=length, variant="rotation", maps=maps
    )
    pruned = AutoModelForCausalLM.from_pretrained(out).eval()
    assert pruned.config.num_hidden_layers == LAYERS - length
    assert not pruned.config.tie_word_embeddings
    original, _, _ = load_cached(folder)
    adapter = find_adapter(original, "causal")
    batch = ids()
    weight = (SCALE * rotation(seed=start * 10 + length)).T
    want = hooked_logits(original, adapter, start, length, None, dict(batch), weight)
    with torch.no_grad():
        got = pruned(**batch, use_cache=False).logits
    assert float((got - want).abs().max() / want.abs().max()) < 1e-4
    dropped = hooked_logits(original, adapter, start, length, None, dict(batch))
    assert float((dropped - want).abs().max() / want.abs().max()) > 1e-2  # the rotation shows
    done = json.loads((out / "pruning.json").read_text())
    assert done["variant"] == "rotation" and done["blocks_removed"] == list(
        range(start + 1, start + length + 1)
    )
    assert done["transform_source"].endswith(f"rotation, start {start}, length {length}")
    assert done["folded_into"].startswith(f"embeddings and blocks 1..{start}")
    assert done["check"]["fold_error_relative"] < 1e-4
    assert done["check"]["epsilon_error_relative"] < 1e-4  # epsilon 1e-9: no share to speak of
    assert done["check"]["reload_error_relative"] < 1e-6


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("gpt2", "'ln_1' (LayerNorm) is not an RMSNorm"),
        ("gemma3_text", "norm after a sub-layer (post_attention_layernorm)"),
    ],
)
def test_layer_norm_and_post_norm_models_are_refused(kind, words, cached, tmp_path):
    weight = (SCALE * rotation()).T
    refused = rf"architecture '{kind}'.*{re.escape(words)}.*--variant drop"
    with pytest.raises(ValueError, match=refused):
        write_pruned(
            cached(kind), tmp_path / "out", start=2, length=2, variant="rotation", rotation=weight
        )
    assert not (tmp_path / "out").exists()
    m, adapter = make(kind)
    with pytest.raises(ValueError, match=re.escape(words)):
        prune_blocks(m, adapter, 2, 2, rotation=weight)
    assert len(adapter.blocks(m)) == LAYERS  # nothing changed


def test_a_map_that_is_no_rotation_is_refused(cached, tmp_path):
    weight = np.eye(WIDTH) + np.random.default_rng(2).normal(size=(WIDTH, WIDTH))
    with pytest.raises(ValueError, match="not a scaled orthogonal matrix"):
        write_pruned(
            cached("llama"),
            tmp_path / "out",
            start=2,
            length=2,
            variant="rotation",
            rotation=weight,
        )
    with pytest.raises(ValueError, match="'rotation' needs a transform"):
        write_pruned(cached("llama"), tmp_path / "out", start=2, length=2, variant="rotation")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("kind", "tied"), [("llama", True), ("qwen2", False)])
def test_the_fitted_rotation_run_in_memory_is_the_exported_one(kind, tied):
    """The rotation fitted on the model's calibration sums, applied by the in-memory pruned copy
    that the measures run (a hook on the stream, like mat), gives the logits of the same model
    with the rotation folded and the span removed (what the export writes)."""
    m, adapter = model(kind, tied)
    inputs = [np.asarray(TOKENIZER(s)["input_ids"], dtype=np.int64) for s in SENTENCES]
    plan = StatisticsPlan.of(LAYERS, [2], ["rotation"])
    grams = span_statistics(m, adapter, inputs, plan, batch_size=3, pad_id=0)
    fit = fit_span(grams, "rotation", 2, 2, rank=1)
    hooked = pruned_copy(m, adapter, "rotation", 2, 2, ShortcutMap(fit.tensors))
    folded = copy.deepcopy(m)
    prune_blocks(folded, adapter, 2, 2, rotation=fit.tensors["weight"])
    with torch.no_grad():
        want = hooked(**ids(), use_cache=False).logits
        got = folded(**ids(), use_cache=False).logits
    assert float((got - want).abs().max() / want.abs().max()) < 1e-4
    drop = pruned_copy(m, adapter, "drop", 2, 2, None)
    with torch.no_grad():
        dropped = drop(**ids(), use_cache=False).logits
    assert float((dropped - want).abs().max() / want.abs().max()) > 1e-3


def test_cli_prunes_with_a_rotation(cached, tmp_path, capsys):
    folder = cached("llama")
    maps = write_maps(tmp_path / "maps.safetensors", folder, "llama", [(1, 2)])
    argv = ["prune", "--model-dir", str(folder), "--start", "1", "--length", "2"]
    argv += ["--variant", "rotation", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert "--variant rotation needs --maps FILE" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert main([*argv, "--maps", str(maps)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("rotation: removed blocks 2..3 of 5 (3 left); parameters ")
    with pytest.raises(ValueError, match="has no rotation map for start 2, length 2"):
        export(folder, tmp_path / "other", start=2, length=2, variant="rotation", maps=maps)


@pytest.mark.parametrize(("eps", "scale", "written"), [(1e-6, 1.3, True), (1e-2, 20.0, False)])
def test_the_epsilon_share_is_measured_and_a_large_one_refused(eps, scale, written, tmp_path):
    """RMSNorm's epsilon is the fold's one inexact term: with blocks 1..i's epsilon made s²·eps
    the folded model is the hooked one (fold_error_relative); as written it differs by the
    epsilon's share (epsilon_error_relative), recorded, and refused when large."""
    m, _ = make("llama")
    m.config.rms_norm_eps = eps
    m.save_pretrained(tmp_path / "src")
    TOKENIZER.save_pretrained(tmp_path / "src")
    cache_model("llama", {"source": str(tmp_path / "src")}, tmp_path / "m")
    weight = (scale * rotation()).T
    span = {"start": 2, "length": 2, "variant": "rotation", "rotation": weight}
    if not written:
        with pytest.raises(RuntimeError, match="folds exactly but for RMSNorm's epsilon"):
            write_pruned(tmp_path / "m", tmp_path / "out", **span)
        assert not (tmp_path / "out").exists()
        return
    out = write_pruned(tmp_path / "m", tmp_path / "out", **span)
    check = json.loads((out / "pruning.json").read_text())["check"]
    assert check["fold_error_relative"] < 1e-4
    assert 1e-5 < check["epsilon_error_relative"] < 0.05


@pytest.mark.slow  # converting SmolLM2's GGUF file: about 25 s
@pytest.mark.real_model
def test_real_packaged_smollm2_exports_a_fitted_rotation(tmp_path, smollm2_cache):
    """SmolLM2 (Llama, tied embeddings): a rotation fitted on its calibration sums folds and
    exports; the written folder reloads with transformers and reproduces the hooked rotation
    but for RMSNorm's epsilon (measured 1.5e-3 of the largest logit at start 10, s ≈ 12)."""
    cached, info = smollm2_cache  # (conftest.py: cached once per session)
    original, tokenizer, _ = load_cached(cached)
    adapter = find_adapter(original, "causal")
    inputs = [np.asarray(tokenizer(s)["input_ids"], dtype=np.int64) for s in SENTENCES]
    plan = StatisticsPlan.of(info["num_layers"], [2], ["rotation", "rotation_replaceme"])
    grams = span_statistics(original, adapter, inputs, plan, batch_size=8, pad_id=0)
    start, length = 10, 2
    fit = fit_span(grams, "rotation", start, length, rank=1)
    assert fit.loss <= fit_span(grams, "drop", start, length, rank=1).loss
    weight = fit.tensors["weight"].astype(np.float32)
    out = write_pruned(
        cached,
        tmp_path / "out",
        start=start,
        length=length,
        variant="rotation",
        rotation=weight,
    )
    done = json.loads((out / "pruning.json").read_text())
    assert done["check"]["fold_error_relative"] < 1e-4
    assert done["check"]["epsilon_error_relative"] < 1e-2
    # the untied output embeddings (vocab × width) outweigh the two blocks removed
    assert done["parameters_after"] > done["parameters_before"]
    pruned = AutoModelForCausalLM.from_pretrained(out).eval()
    assert pruned.config.num_hidden_layers == info["num_layers"] - length
    batch = tokenizer(["The river flows into the sea, and the city"], return_tensors="pt")
    want = hooked_logits(original, adapter, start, length, None, dict(batch), weight)
    with torch.no_grad():
        got = pruned(**batch, use_cache=False).logits
    assert float((got - want).abs().max() / want.abs().max()) < 1e-2
    # ReplaceMe's transform and the rotation together: both folded, the same checks
    joint = fit_span(grams, "rotation_replaceme", start, length, rank=1)
    assert joint.loss <= min(fit.loss, fit_span(grams, "replaceme", start, length, rank=1).loss)
    both = write_pruned(
        cached,
        tmp_path / "both",
        start=start,
        length=length,
        variant="rotation_replaceme",
        transform=joint.tensors["weight"].astype(np.float32),
        rotation=joint.tensors["rotation"].astype(np.float32),
    )
    done = json.loads((both / "pruning.json").read_text())
    assert done["check"]["fold_error_relative"] < 1e-4
    assert done["check"]["epsilon_error_relative"] < 1e-2
