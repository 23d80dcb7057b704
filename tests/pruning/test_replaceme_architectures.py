"""ReplaceMe on blocks without separable parts and on mixture-of-experts blocks: parallel
attention and MLP (GPT-NeoX, GPT-J, Falcon old and new, Phi, Cohere), Mixtral, Qwen2-MoE with its
shared expert, Qwen3-MoE and OLMoE, each a tiny random model built from its transformers config.
The calibration hooks' X is what the fold transforms (the stand-in r_i + X·T of the hooked
states is the pruned model's state after block i), the export reproduces the hooked reference
and reloads with plain transformers, and the in-memory pruned copy is the exported checkpoint.
What still cannot be folded is refused by name while planning and at export, writing nothing."""

import json

import numpy as np
import pytest
import torch
from architectures import COMMON
from pruneable import TOKENIZER, make
from tiny import SENTENCES
from transformers import AutoModelForCausalLM

from jtc.model.adapters import UnsupportedArchitecture, adapter_of
from jtc.model.cache import cache_model, load_cached
from jtc.pruning.calibrate import fit_span
from jtc.pruning.checkpoint import prune_blocks, write_pruned
from jtc.pruning.mlp_fold import final_linear, fold_problem
from jtc.pruning.pruned import pruned_copy, stand_in_state
from jtc.pruning.spans import StatisticsPlan, pruning_problem
from jtc.pruning.sums import every_state, span_statistics
from jtc.shortcuts.maps import ShortcutMap

LAYERS, START, LENGTH = 4, 1, 2  # blocks 2 and 3 of 4 removed; the transform folded into block 1
MOE = {"num_experts": 4, "num_experts_per_tok": 2}
# name: (model type, config settings besides the matrix's, where the transform is folded)
CASES = {
    "gpt_neox": ("gpt_neox", {}, "mlp.dense_4h_to_h"),
    "gpt_neox_sequential": ("gpt_neox", {"use_parallel_residual": False}, "mlp.dense_4h_to_h"),
    "gptj": ("gptj", {}, "mlp.fc_out"),
    "falcon": ("falcon", {}, "mlp.dense_4h_to_h"),
    "falcon_new": ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}, None),
    "phi": ("phi", {}, "mlp.fc2"),
    "cohere": ("cohere", {}, "mlp.down_proj"),
    "mixtral": ("mixtral", {}, "mlp.experts.down_proj"),
    "qwen2_moe": ("qwen2_moe", {}, "mlp.experts.down_proj, mlp.shared_expert.down_proj"),
    "qwen3_moe": ("qwen3_moe", {}, "mlp.experts.down_proj"),
    "olmoe": ("olmoe", MOE, "mlp.experts.down_proj"),
}
PARALLEL = ("gpt_neox", "gptj", "falcon", "falcon_new", "phi", "cohere")


def build(name: str):
    """(model, adapter) of a case, its routers random (not uniform) so that tokens take
    different experts."""
    kind, settings, _ = CASES[name]
    model, adapter = make(kind, layers=LAYERS, **settings)
    with torch.no_grad():
        for path, param in model.named_parameters():
            if path.endswith(("gate.weight", "router.weight")):
                param.normal_(0, 1.0)
    return model, adapter


def random_transform(seed: int = 0) -> np.ndarray:
    """A (d, d) weight far from the identity and from symmetric, so that a transpose shows."""
    width = COMMON["hidden_size"]
    rng = np.random.default_rng(seed)
    return (np.eye(width) + rng.normal(size=(width, width)) / np.sqrt(width)).astype(np.float32)


def batch():
    return TOKENIZER(SENTENCES[:3], return_tensors="pt", padding=True)


def logits(model):
    with torch.no_grad():
        return model(**batch(), use_cache=False).logits


def relative_error(got, want) -> float:
    return float((got - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("name", CASES)
def test_the_hooked_feed_forward_output_is_what_the_fold_transforms(name):
    """The X the calibration hooks keep (jtc.pruning.sums.every_state) is block i's
    feed-forward output as the fold sees it: r_i + X·T with r_i = h_i − X, from the original
    model's hooks, is the pruned model's state after block i (the transform folded there)."""
    model, adapter = build(name)
    if name in PARALLEL:  # no parts, so no sub-module shortcuts; the MLP found for ReplaceMe
        assert adapter.parts == () and adapter.parallel_ffn == "mlp"
    else:
        assert adapter.parts and adapter.parallel_ffn is None
    weight = random_transform()
    inputs = batch()
    mask = inputs["attention_mask"].bool()
    with torch.no_grad(), every_state(model, adapter, ffn=True) as kept:
        adapter.backbone(model)(**inputs, use_cache=False)
        h, x = kept["states"][START].clone(), kept["ffn"][START - 1].clone()
    assert not torch.allclose(x, torch.zeros_like(x))
    map_ = ShortcutMap({"weight": weight}).to_torch()
    with torch.no_grad():
        want = stand_in_state("replaceme", map_, h, x)
    pruned = pruned_copy(
        model, adapter, "replaceme", START, LENGTH, ShortcutMap({"weight": weight})
    )
    with torch.no_grad(), every_state(pruned, adapter, ffn=False) as after:
        adapter.backbone(pruned)(**inputs, use_cache=False)
        got = after["states"][START]
    assert relative_error(got[mask], want[mask]) < 1e-5
    dropped = h  # the transform changes block i's output: the test would see a missed fold
    assert relative_error(dropped[mask], want[mask]) > 1e-2


@pytest.mark.parametrize("name", CASES)
def test_the_fitted_transform_is_least_squares_in_the_pruned_model(name):
    """Calibration (span_statistics, fit_span) on the hooked X: in the pruned model (T folded),
    the error of the state after block i against the original's h_{i+n} is orthogonal to X,
    the normal equations of X·T ≈ h_{i+n} − r_i; a wrong X in the sums (e.g. Falcon's MLP
    output with attention added to it in place) would leave it correlated."""
    model, adapter = build(name)
    inputs = [np.asarray(TOKENIZER(s)["input_ids"], dtype=np.int64) for s in SENTENCES]
    plan = StatisticsPlan.of(LAYERS, [LENGTH], ["replaceme"])
    grams = span_statistics(model, adapter, inputs, plan, batch_size=3, pad_id=0)
    weight = fit_span(grams, "replaceme", START, LENGTH, rank=2).tensors["weight"]
    pruned = pruned_copy(
        model, adapter, "replaceme", START, LENGTH, ShortcutMap({"weight": weight})
    )
    x_error, x_target = 0.0, 0.0
    for ids in inputs:
        ids = torch.from_numpy(ids)[None]
        with torch.no_grad(), every_state(model, adapter, ffn=True) as kept:
            adapter.backbone(model)(input_ids=ids, use_cache=False)
            h, x = kept["states"][START][0], kept["ffn"][START - 1][0]
            target = kept["states"][START + LENGTH][0]
        with torch.no_grad(), every_state(pruned, adapter, ffn=False) as after:
            adapter.backbone(pruned)(input_ids=ids, use_cache=False)
            got = after["states"][START][0]
        x, error = x.double(), (target - got).double()
        x_error = x_error + x.T @ error
        x_target = x_target + x.T @ (target - h + x).double()
    assert float(x_error.abs().max()) < 1e-4 * float(x_target.abs().max())


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    """{case: a cached model folder (jtc.model.cache)}, made on first use."""
    folders = {}

    def get(name: str):
        if name not in folders:
            work = tmp_path_factory.mktemp(name)
            model, _ = build(name)
            model.save_pretrained(work / "src")
            TOKENIZER.save_pretrained(work / "src")
            cache_model(name, {"source": str(work / "src")}, work / "m")
            folders[name] = work / "m"
        return folders[name]

    return get


@pytest.mark.parametrize("name", CASES)
def test_export_reproduces_the_hooked_reference_and_the_pruned_copy(name, cached, tmp_path):
    """write_pruned's own checks pass (the folded model's logits against the hooked reference,
    the written folder reloaded with plain transformers); the checkpoint loads with
    AutoModelForCausalLM and gives the logits of the in-memory pruned copy (pruned_copy), which
    differ from drop's."""
    weight = random_transform()
    folder = write_pruned(
        cached(name), tmp_path / "out", start=START, length=LENGTH, variant="replaceme",
        transform=weight,
    )  # fmt: skip
    done = json.loads((folder / "pruning.json").read_text())
    assert done["check"]["fold_error_relative"] <= 1e-3
    assert done["check"]["reload_error_relative"] <= 1e-3
    folded = CASES[name][2] or "mlp.dense_4h_to_h"
    assert done["folded_into"] == f"block {START}: {folded}"
    assert done["num_layers_after"] == LAYERS - LENGTH
    exported = AutoModelForCausalLM.from_pretrained(folder).eval()
    original, _, info = load_cached(cached(name))
    # what planning reads (info.json's adapter): the feed-forward module of parallel blocks
    assert info["adapter"]["parallel_ffn"] == ("mlp" if name in PARALLEL else None)
    adapter = adapter_of(info)
    assert pruning_problem(name, "causal", adapter, LAYERS, [LENGTH], ["replaceme"]) is None
    in_memory = pruned_copy(
        original, adapter, "replaceme", START, LENGTH, ShortcutMap({"weight": weight})
    )
    want = logits(in_memory)
    assert relative_error(logits(exported), want) < 1e-4
    dropped = logits(pruned_copy(original, adapter, "drop", START, LENGTH, None))
    assert relative_error(dropped, want) > 1e-3


def test_a_misread_expert_layout_is_refused_not_folded_wrong():
    """Fused experts whose down_proj is square (d_ff = d) read with the wrong layout: the
    check (their output channels rolled by one) refuses, naming the tensors, and prune_blocks
    changes nothing."""
    model, adapter = make("mixtral", layers=3, intermediate_size=COMMON["hidden_size"])
    assert fold_problem(model, adapter) is None
    for block in adapter.blocks(model):
        block.mlp.experts.is_transposed = True  # down_proj is (E, d, d_ff), not transposed
    problem = fold_problem(model, adapter)
    assert problem and "'mixtral'" in problem and "mlp.experts.down_proj" in problem, problem
    assert "rolling their output channels" in problem and "--variant drop" in problem
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(UnsupportedArchitecture):
        prune_blocks(model, adapter, 1, 1, random_transform())
    assert len(adapter.blocks(model)) == 3
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize(
    "kind, words",
    [
        ("bloom", ["'bloom'", "no feed-forward module", "inside their MLP"]),
        ("gemma2", ["'gemma2'", "norm after its MLP", "post_feedforward_layernorm"]),
    ],
)
def test_what_cannot_be_folded_is_refused_while_planning_and_at_export(kind, words, tmp_path):
    """BLOOM (its MLP adds the residual itself) and Gemma 2 (a norm after the MLP): refused by
    the planning check (the adapter alone, as info.json stores it) and by the export, which
    writes nothing."""
    model, adapter = make(kind, layers=3)
    planned = pruning_problem("m", "causal", adapter, 3, [1], ["drop", "replaceme"])
    assert planned and "'pruning.variants': replaceme" in planned, planned
    assert all(w in planned for w in words), planned
    assert pruning_problem("m", "causal", adapter, 3, [1], ["drop", "mat"]) is None
    found = final_linear(model, adapter, 1)
    assert isinstance(found, str) and all(w in found for w in words), found
    model.save_pretrained(tmp_path / "src")
    TOKENIZER.save_pretrained(tmp_path / "src")
    cache_model(kind, {"source": str(tmp_path / "src")}, tmp_path / "m")
    with pytest.raises(ValueError, match="--variant drop"):
        write_pruned(
            tmp_path / "m", tmp_path / "out", start=1, length=1, variant="replaceme",
            transform=random_transform(),
        )  # fmt: skip
    assert not (tmp_path / "out").exists()
