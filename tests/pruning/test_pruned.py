"""A pruned model in memory for every stand-in (jtc.pruning.pruned.pruned_copy), what the
literature's measures run on: on tiny random Llama, Qwen2 and GPT-2 models, drop and replaceme
equal the exported checkpoint's computation (the hooked original), mat and low_rank equal the
original with the span skipped and the stand-in applied to h_i, the original is left as it was,
and generate's KV cache agrees with a run without it."""

import numpy as np
import pytest
import torch
from architectures import COMMON
from pruneable import LAYERS, TOKENIZER, make
from tiny import SENTENCES

from jtc.model.hooks import hidden_input
from jtc.model.kept_blocks import running_only
from jtc.pruning.export_check import hooked_logits
from jtc.pruning.pruned import dropped_copy, pruned_copy, stand_in_state
from jtc.shortcuts.maps import ShortcutMap

KINDS = ["llama", "qwen2", "gpt2"]
WIDTH = COMMON["hidden_size"]


def batch():
    return TOKENIZER(SENTENCES[:4], return_tensors="pt", padding=True)


def logits(model, inputs=None):
    with torch.no_grad():
        return model(**(inputs or batch()), use_cache=False).logits


def relative_error(got, want) -> float:
    return float((got - want).abs().max() / want.abs().max())


def random_map(variant: str, seed: int = 0) -> ShortcutMap:
    rng = np.random.default_rng(seed)
    if variant == "low_rank":
        down = rng.normal(size=(3, WIDTH)) / np.sqrt(WIDTH)
        up = rng.normal(size=(WIDTH, 3))
        return ShortcutMap({"down.weight": down, "up.weight": up})
    return ShortcutMap({"weight": np.eye(WIDTH) + rng.normal(size=(WIDTH, WIDTH)) / 8})


def skipped_with_stand_in(model, adapter, variant, start, length, span_map):
    """The reference: the original model running only the blocks outside the span, the input of
    the first block after it (or of the final norm) replaced by the stand-in of h_i."""
    linear = span_map.to_torch()
    blocks = adapter.blocks(model)
    kept = [b for b in range(len(blocks)) if not start <= b < start + length]
    if start + length < len(blocks):
        reader = blocks[start + length]
    else:
        reader = model.get_decoder().norm if hasattr(model, "get_decoder") else None

    def hook(module, args, kwargs):
        h = hidden_input(args, kwargs)
        new = stand_in_state(variant, linear, h.float()).to(h.dtype)
        return ((new, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": new})

    handle = reader.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad(), running_only(model, adapter, kept):
            return model(**batch(), use_cache=False).logits
    finally:
        handle.remove()


@pytest.mark.parametrize("variant", ["mat", "low_rank"])
@pytest.mark.parametrize("kind", KINDS)
def test_stream_stand_ins_equal_the_skipped_original(kind, variant):
    model, adapter = make(kind)
    before = logits(model)
    span_map = random_map(variant)
    pruned = pruned_copy(model, adapter, variant, 2, 2, span_map)
    assert len(adapter.blocks(pruned)) == pruned.config.num_hidden_layers == LAYERS - 2
    want = skipped_with_stand_in(model, adapter, variant, 2, 2, span_map)
    assert relative_error(logits(pruned), want) < 1e-5
    # the map matters: the same span dropped differs
    dropped = logits(pruned_copy(model, adapter, "drop", 2, 2, None))
    assert relative_error(dropped, want) > 1e-2
    assert torch.equal(logits(model), before)  # the original is untouched
    assert len(adapter.blocks(model)) == LAYERS


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_identity_stand_ins_are_drop(kind):
    """mat with A = I and low_rank with a zero up projection compute exactly what drop does, at
    a span in the middle and at one that ends the model (the final norm reads the stand-in)."""
    model, adapter = make(kind)
    identity = ShortcutMap({"weight": np.eye(WIDTH)})
    zero = ShortcutMap({"down.weight": np.ones((2, WIDTH)), "up.weight": np.zeros((WIDTH, 2))})
    for start, length in ((1, 2), (3, 2)):
        dropped = logits(pruned_copy(model, adapter, "drop", start, length, None))
        for variant, span_map in (("mat", identity), ("low_rank", zero)):
            got = logits(pruned_copy(model, adapter, variant, start, length, span_map))
            assert relative_error(got, dropped) < 1e-5, (variant, start, length)


@pytest.mark.parametrize("variant", ["drop", "replaceme"])
@pytest.mark.parametrize("kind", KINDS)
def test_foldable_stand_ins_equal_the_exported_computation(kind, variant):
    model, adapter = make(kind)
    span_map = None if variant == "drop" else random_map("replaceme", seed=1)
    transform = None if span_map is None else span_map.tensors["weight"]
    inputs = dict(batch())
    want = hooked_logits(model, adapter, 2, 2, transform, inputs)
    got = logits(pruned_copy(model, adapter, variant, 2, 2, span_map), inputs)
    assert relative_error(got, want) < 1e-4


@pytest.mark.parametrize("variant", ["drop", "mat", "low_rank"])
def test_generate_with_the_kv_cache_agrees_without_it(variant):
    model, adapter = make("qwen2")
    span_map = None if variant == "drop" else random_map(variant)
    pruned = pruned_copy(model, adapter, variant, 1, 2, span_map)
    prompt = TOKENIZER(SENTENCES[:1], return_tensors="pt")
    runs = [
        pruned.generate(**prompt, max_new_tokens=6, do_sample=False, pad_token_id=0, use_cache=c)
        for c in (True, False)
    ]
    assert runs[0].tolist() == runs[1].tolist()


def test_a_stand_in_without_its_map_is_refused():
    model, adapter = make("llama")
    with pytest.raises(ValueError, match="needs the span's map"):
        pruned_copy(model, adapter, "mat", 1, 2, None)


@pytest.mark.parametrize("kind", KINDS)
def test_blocks_that_are_not_consecutive_are_dropped_as_the_original_skipping_them(kind):
    """ShortGPT's n blocks of lowest Block Influence (pruning.also_measure
    drop@lowest_block_influence): the copy equals the original running only the other blocks,
    its config and KV cache follow, and the original is left as it was."""
    model, adapter = make(kind)
    before = logits(model)
    removed = (1, 3, 4)  # 1-based
    pruned = dropped_copy(model, adapter, removed)
    assert len(adapter.blocks(pruned)) == pruned.config.num_hidden_layers == LAYERS - 3
    kept = [b for b in range(LAYERS) if b + 1 not in removed]
    with torch.no_grad(), running_only(model, adapter, kept):
        want = model(**batch(), use_cache=False).logits
    assert relative_error(logits(pruned), want) < 1e-6
    assert torch.equal(logits(model), before)
    inputs = TOKENIZER(SENTENCES[:1], return_tensors="pt")
    with torch.no_grad():
        cached = pruned.generate(**inputs, max_new_tokens=4, do_sample=False, use_cache=True)
        plain = pruned.generate(**inputs, max_new_tokens=4, do_sample=False, use_cache=False)
    assert torch.equal(cached, plain)
