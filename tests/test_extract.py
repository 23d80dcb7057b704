"""Hidden-state extraction on tiny random GPT-2, Llama and BERT models."""

import numpy as np
import pyarrow as pa
import pytest
import torch
from tiny import SENTENCES, make_model

from jtc.data.extract import draw_position, extract, prepare_inputs, run_states
from jtc.data.states import read_states
from jtc.model.adapters import get_adapter
from jtc.model.cache import model_info

KINDS = ["gpt2", "llama", "bert-mlm", "bert"]


def sentences_table(texts):
    return pa.table({"sentence_id": np.arange(len(texts)) * 7 + 3, "text": texts})


def run_extract(kind, tmp_path, batch_size=3, seed=0):
    model, tokenizer = make_model(kind)
    info = model_info(kind, model, tokenizer, "test")
    out = tmp_path / f"{kind}-{batch_size}"
    out.mkdir()
    summary = extract(
        model,
        tokenizer,
        info,
        sentences_table(SENTENCES),
        out,
        seed=seed,
        batch_size=batch_size,
        max_tokens=64,
        dtype="float32",
    )
    return model, tokenizer, info, out, summary


def prepare_tiny(tokenizer, task):
    """The model inputs run_extract used (same ids, seed and length limit)."""
    ids = sentences_table(SENTENCES).column("sentence_id").to_numpy()
    return prepare_inputs(tokenizer, SENTENCES, ids, task, 0, 64, tokenizer.mask_token_id)


def reference_states(model, kind, input_ids):
    """Hidden states of one unpadded sequence from transformers' own output_hidden_states."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([input_ids]), output_hidden_states=True)
    return [h[0].numpy() for h in out.hidden_states]


@pytest.mark.parametrize("kind", KINDS)
def test_states_match_model_and_final_state_is_pre_norm(kind, tmp_path):
    model, tokenizer, info, out, summary = run_extract(kind, tmp_path)
    adapter = get_adapter(info["architecture"])
    n_layers = info["num_layers"]
    assert summary["sentences"] == len(SENTENCES)
    ids, _ = read_states(out, 0)
    prepared = prepare_tiny(tokenizer, adapter.task)
    assert np.array_equal(ids, prepared.sentence_ids)
    stored = [read_states(out, layer)[1] for layer in range(n_layers + 1)]
    for row, (inp, pos) in enumerate(zip(prepared.inputs, prepared.positions, strict=True)):
        ref = reference_states(model, kind, inp.tolist())
        for layer in range(n_layers):
            np.testing.assert_allclose(stored[layer][row], ref[layer][pos], atol=1e-5)
        final = torch.tensor(stored[n_layers][row], dtype=torch.float32)
        norm = adapter.final_norm(model)
        if norm is None:  # post-LN encoder: hidden_states are used as they are
            np.testing.assert_allclose(final.numpy(), ref[n_layers][pos], atol=1e-5)
        else:
            # transformers' last hidden state has the final norm applied; ours is before it
            with torch.no_grad():
                np.testing.assert_allclose(norm(final).numpy(), ref[n_layers][pos], atol=1e-5)
            assert not np.allclose(final.numpy(), ref[n_layers][pos], atol=1e-3)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_prefix_cut_leaves_state_at_position_unchanged(kind):
    model, tokenizer = make_model(kind)
    adapter = get_adapter(model.config.model_type)
    full = [np.asarray(tokenizer(s)["input_ids"]) for s in SENTENCES]
    positions = np.array([len(x) // 2 for x in full], dtype=np.int32)
    cut = [x[: p + 1] for x, p in zip(full, positions, strict=True)]
    a = run_states(model, adapter, full, positions, batch_size=4, pad_id=0)
    b = run_states(model, adapter, cut, positions, batch_size=4, pad_id=0)
    np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_batching_does_not_change_positions_or_states(kind, tmp_path):
    *_, out1, _ = run_extract(kind, tmp_path, batch_size=1)
    *_, out8, _ = run_extract(kind, tmp_path, batch_size=8)
    ids1, s1 = read_states(out1, 2)
    ids8, s8 = read_states(out8, 2)
    assert np.array_equal(ids1, ids8)
    np.testing.assert_allclose(s1, s8, atol=1e-5)


def test_position_draw_is_keyed_by_seed_and_sentence():
    cand = np.arange(40)
    draws = [draw_position(0, sid, cand) for sid in range(200)]
    assert draws == [draw_position(0, sid, cand) for sid in range(200)]
    assert draws != [draw_position(1, sid, cand) for sid in range(200)]
    assert min(draws) == 0 and max(draws) == 39  # uniform over all positions, 0 included


def test_masked_lm_gets_mask_at_drawn_ordinary_token():
    _, tokenizer = make_model("bert-mlm")
    ids = np.arange(len(SENTENCES))
    prepared = prepare_inputs(tokenizer, SENTENCES, ids, "masked", 0, 64, tokenizer.mask_token_id)
    for inp, pos, tok, gold in zip(
        prepared.inputs, prepared.positions, prepared.token_ids, prepared.gold_ids, strict=True
    ):
        assert 0 < pos < len(inp) - 1  # never [CLS] or [SEP]
        assert inp[pos] == tokenizer.mask_token_id
        assert gold == tok != tokenizer.mask_token_id
        assert (inp == tokenizer.mask_token_id).sum() == 1


def test_causal_cut_and_gold_next_token():
    _, tokenizer = make_model("gpt2")
    ids = np.arange(len(SENTENCES))
    prepared = prepare_inputs(tokenizer, SENTENCES, ids, "causal", 0, 64, None)
    for text, inp, pos, gold in zip(
        SENTENCES, prepared.inputs, prepared.positions, prepared.gold_ids, strict=True
    ):
        full = tokenizer(text)["input_ids"]
        assert list(inp) == full[: pos + 1]
        assert gold == (full[pos + 1] if pos + 1 < len(full) else -1)


def test_truncation_to_max_tokens():
    _, tokenizer = make_model("gpt2")
    prepared = prepare_inputs(tokenizer, SENTENCES, np.arange(len(SENTENCES)), "causal", 0, 4, None)
    assert prepared.n_tokens.max() == 4 and prepared.positions.max() <= 3


def test_float16_storage(tmp_path):
    model, tokenizer = make_model("gpt2")
    info = model_info("g", model, tokenizer, "test")
    extract(
        model,
        tokenizer,
        info,
        sentences_table(SENTENCES),
        tmp_path,
        seed=0,
        batch_size=4,
        max_tokens=64,
        dtype="float16",
    )
    ids, states = read_states(tmp_path, 1, dtype=np.float32)
    import pyarrow.parquet as pq

    assert (
        pq.read_schema(tmp_path / "layer_001.parquet").field("state").type.value_type
        == pa.float16()
    )
    assert states.shape == (len(SENTENCES), 32)
