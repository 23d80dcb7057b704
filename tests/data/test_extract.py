"""Hidden-state extraction on tiny random GPT-2, Llama and BERT models."""

import numpy as np
import pyarrow as pa
import pytest
import torch
from extraction import prepare_tiny, run_extract, sentences_table
from tiny import SENTENCES, make_model

from jtc.data.extract import draw_position, draw_positions, extract, prepare_inputs, run_states
from jtc.data.states import read_states
from jtc.model.adapters import get_adapter
from jtc.model.cache import model_info

KINDS = ["gpt2", "llama", "bert-mlm", "bert"]


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


def test_several_positions_per_sentence_are_keyed_and_distinct():
    cand = np.arange(3, 30)
    one = [draw_positions(0, sid, cand, 1) for sid in range(50)]
    assert [int(p[0]) for p in one] == [draw_position(0, sid, cand) for sid in range(50)]
    for sid in range(50):
        four = draw_positions(0, sid, cand, 4)
        assert len(set(four)) == 4 and set(four) <= set(cand) and list(four) == sorted(four)
        assert np.array_equal(four, draw_positions(0, sid, cand, 4))  # keyed, not stateful
    assert any(
        not np.array_equal(draw_positions(0, s, cand, 4), draw_positions(1, s, cand, 4))
        for s in range(50)
    )
    # more positions than the sentence has, or "all": every candidate, never an error
    assert np.array_equal(draw_positions(0, 1, cand, 100), cand)
    assert np.array_equal(draw_positions(0, 1, cand, "all"), cand)


@pytest.mark.parametrize("kind", KINDS)
def test_states_at_several_positions_match_the_model(kind, tmp_path):
    """With 3 positions per sentence (all of them for "all"), each row's states are the
    model's own at that sentence and position: one cut input per sentence for a causal model,
    one masked input per row for a masked LM; the first position drawn is not the k=1 draw's
    business, but the rows are (sentence, position) pairs in order."""
    model, tokenizer = make_model(kind)
    info = model_info(kind, model, tokenizer, "test")
    adapter = get_adapter(info["architecture"])
    table = sentences_table(SENTENCES)
    for count in (3, "all"):
        out = tmp_path / f"{kind}-{count}"
        out.mkdir()
        summary = extract(
            model, tokenizer, info, table, out, seed=0, batch_size=3, max_tokens=64,
            dtype="float32", positions=count,
        )  # fmt: skip
        ids = table.column("sentence_id").to_numpy()
        prepared = prepare_inputs(
            tokenizer, SENTENCES, ids, adapter.task, 0, 64, tokenizer.mask_token_id, count
        )
        stored_ids, first = read_states(out, 1)
        assert np.array_equal(stored_ids, prepared.sentence_ids)
        assert summary["sentences"] == len(SENTENCES) and summary["rows"] == len(stored_ids)
        per_sentence = np.unique(stored_ids, return_counts=True)[1]
        if count == "all":
            masks = tokenizer(SENTENCES, return_special_tokens_mask=True)["special_tokens_mask"]
            ordinary = [len(m) - sum(m) for m in masks]
            assert list(per_sentence) == ordinary
        else:
            assert (per_sentence == 3).all()
        rows = len(stored_ids)
        assert len(prepared.inputs) == (len(SENTENCES) if adapter.task == "causal" else rows)
        for row in range(rows):
            inp = prepared.inputs[prepared.input_of[row]]
            ref = reference_states(model, kind, inp.tolist())
            np.testing.assert_allclose(first[row], ref[1][prepared.positions[row]], atol=1e-5)
            if adapter.task == "masked":
                assert inp[prepared.positions[row]] == tokenizer.mask_token_id
                assert (inp == tokenizer.mask_token_id).sum() == 1


def test_gold_tokens_at_several_causal_positions():
    _, tokenizer = make_model("gpt2")
    prepared = prepare_inputs(
        tokenizer, SENTENCES, np.arange(len(SENTENCES)), "causal", 0, 64, None, 4
    )
    for row, (sid, pos, gold) in enumerate(
        zip(prepared.sentence_ids, prepared.positions, prepared.gold_ids, strict=True)
    ):
        full = tokenizer(SENTENCES[sid])["input_ids"]
        assert (
            list(prepared.inputs[prepared.input_of[row]])
            == full[: len(prepared.inputs[prepared.input_of[row]])]
        )
        assert len(prepared.inputs[prepared.input_of[row]]) > pos
        assert gold == (full[pos + 1] if pos + 1 < len(full) else -1)


def test_positions_chunking_bounds_rows_and_keeps_states(tmp_path, monkeypatch):
    """Inputs run in chunks of at most max_rows rows (an input with more runs alone): the same
    states as one chunk."""
    import jtc.data.extract as extraction

    model, tokenizer = make_model("gpt2")
    info = model_info("g", model, tokenizer, "test")
    outs = {}
    for name, chunk_bytes in (("one", 1 << 30), ("small", 5 * 32 * 4 * (info["num_layers"] + 1))):
        monkeypatch.setattr(extraction, "CHUNK_BYTES", chunk_bytes)
        outs[name] = tmp_path / name
        outs[name].mkdir()
        extract(
            model, tokenizer, info, sentences_table(SENTENCES), outs[name], seed=0,
            batch_size=4, max_tokens=64, dtype="float32", positions="all",
        )  # fmt: skip
    prepared = prepare_inputs(
        tokenizer, SENTENCES, np.arange(len(SENTENCES)), "causal", 0, 64, None, "all"
    )
    chunks = list(extraction.input_chunks(prepared, 2048, 5))
    assert chunks[0][0] == 0 and chunks[-1][1] == len(prepared.inputs)
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:], strict=False))
    assert len(chunks) == len(prepared.inputs)  # every sentence has more than 5 tokens
    for layer in (0, 2):
        a, b = read_states(outs["one"], layer), read_states(outs["small"], layer)
        assert np.array_equal(a[0], b[0])
        np.testing.assert_allclose(a[1], b[1], atol=1e-5)
