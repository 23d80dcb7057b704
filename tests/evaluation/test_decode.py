"""Decoder heads and per-position prediction scores on tiny random GPT-2, Llama and BERT-MLM."""

import numpy as np
import pytest
import torch
from extraction import prepare_tiny, run_extract
from tiny import make_model

import jtc.model.head as head_mod
from jtc.data.states import read_states
from jtc.evaluation.decode import top_tokens
from jtc.model.adapters import get_adapter
from jtc.model.head import Head, NoDecoderHead
from jtc.model.scoring import final_reference, score

HEAD_KINDS = ["gpt2", "llama", "bert-mlm"]


def head_of(model):
    return Head.from_model(model, get_adapter(model.config.model_type), "tiny")


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_decoding_stored_final_state_reproduces_model_logits(kind, tmp_path):
    model, tokenizer, info, out, _ = run_extract(kind, tmp_path)
    adapter = get_adapter(info["architecture"])
    ids, final = read_states(out, info["num_layers"], np.float32)
    prepared = prepare_tiny(tokenizer, adapter.task)
    assert np.array_equal(ids, prepared.sentence_ids)
    with torch.no_grad():
        decoded = head_of(model).logits(torch.tensor(final)).numpy()
        for row, (inp, pos) in enumerate(zip(prepared.inputs, prepared.positions, strict=True)):
            own = model(input_ids=torch.from_numpy(inp[None])).logits[0, pos].numpy()
            np.testing.assert_allclose(decoded[row], own, atol=1e-4)


def test_bare_encoder_has_no_head():
    model, _ = make_model("bert")
    with pytest.raises(NoDecoderHead, match="model 'tiny' .*BertModel.*masked-token prediction"):
        head_of(model)


def direct_scores(head, final, states, gold):
    """The metrics computed the plain way, from full log-probabilities."""
    with torch.no_grad():
        lp_final = torch.log_softmax(head.logits(torch.from_numpy(final)), 1).double()
        lp = torch.log_softmax(head.logits(torch.from_numpy(states)), 1).double()
    top = lp.topk(2, 1)
    top1 = top.indices[:, 0]
    final_order = lp_final.argsort(1, descending=True)
    rank = (final_order == top1[:, None]).int().argmax(1) + 1
    kl = (lp_final.exp() * (lp_final - lp)).sum(1)
    ce = torch.where(
        torch.from_numpy(gold) >= 0,
        -lp.gather(1, torch.from_numpy(gold).clamp(min=0)[:, None])[:, 0],
        torch.nan,
    )
    return {
        "top1_id": top1.numpy(),
        "top1_prob": top.values[:, 0].exp().numpy(),
        "top2_prob": top.values[:, 1].exp().numpy(),
        "rank": rank.numpy(),
        "surprisal": -lp_final.gather(1, top1[:, None])[:, 0].numpy(),
        "kl": kl.numpy(),
        "cross_entropy": ce.numpy(),
    }


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_scores_equal_the_plain_computation(kind, monkeypatch):
    model, _ = make_model(kind, width=24)
    head = head_of(model)
    rng = np.random.default_rng(1)
    final = rng.normal(size=(37, 24)).astype(np.float32) * 3
    states = (final + rng.normal(size=final.shape) * 2).astype(np.float32)
    gold = rng.integers(-1, head.vocab_size, size=37)
    # several chunks, one of them partial
    monkeypatch.setattr(head_mod, "DECODE_BYTES", 4 * head.vocab_size * 10)
    ref = final_reference(head, final, 10)
    got = score(head, ref, states, gold)
    want = direct_scores(head, final, states, gold)
    assert np.array_equal(got["top1_id"], want["top1_id"])
    expected_rank = np.where(want["rank"] <= 10, want["rank"], 0)
    assert np.array_equal(got["final_rank"], expected_rank)
    for column in ("top1_prob", "top2_prob", "surprisal", "kl", "cross_entropy"):
        np.testing.assert_allclose(got[column], want[column], atol=1e-4, rtol=1e-4)
    assert np.isnan(got["cross_entropy"][gold < 0]).all()


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_at_the_last_layer_precision_is_one_and_surprisal_is_minus_log_pmax(kind):
    model, _ = make_model(kind, width=24)
    head = head_of(model)
    final = np.random.default_rng(2).normal(size=(50, 24)).astype(np.float32)
    got = score(head, final_reference(head, final, 10), final, np.full(50, -1))
    assert (got["final_rank"] == 1).all()
    with torch.no_grad():
        pmax = torch.softmax(head.logits(torch.from_numpy(final)).double(), 1).max(1).values
    np.testing.assert_allclose(got["surprisal"], -np.log(pmax.numpy()), atol=1e-5)
    np.testing.assert_allclose(got["top1_prob"], pmax.numpy(), atol=1e-6)
    np.testing.assert_allclose(got["kl"], 0.0, atol=1e-5)


def test_chunking_does_not_change_scores(monkeypatch):
    model, _ = make_model("llama", width=24)
    head = head_of(model)
    rng = np.random.default_rng(3)
    final = rng.normal(size=(41, 24)).astype(np.float32)
    states = rng.normal(size=(41, 24)).astype(np.float32)
    gold = rng.integers(0, head.vocab_size, size=41)
    whole = score(head, final_reference(head, final, 10), states, gold)
    monkeypatch.setattr(head_mod, "DECODE_BYTES", 4 * head.vocab_size * 3)
    assert head.rows_per_chunk() == 3
    chunked = score(head, final_reference(head, final, 10), states, gold)
    for column, values in whole.items():
        np.testing.assert_allclose(chunked[column], values, atol=1e-5)
    ids, probs = top_tokens(head, states, 5)
    assert ids.shape == (41, 5) and (np.diff(probs, axis=1) <= 0).all()
    assert np.array_equal(ids[:, 0], whole["top1_id"])


def test_an_overflowed_state_predicts_nothing():
    """A state that overflowed (a run with parts replaced can) is a miss with undefined
    surprisal, not whatever token argmax picks among NaN logits."""
    model, _ = make_model("gpt2")
    head = head_of(model)
    rng = np.random.default_rng(0)
    final = rng.normal(size=(4, 32)).astype(np.float32)
    states = final.copy()
    states[1] = np.inf
    states[2, 0] = np.nan
    got = score(head, final_reference(head, final, 5), states, np.array([3, 4, 5, 6]))
    assert got["top1_id"].tolist()[1:3] == [-1, -1] and got["top1_id"][0] >= 0
    assert got["final_rank"].tolist() == [1, 0, 0, 1]
    for column in ("surprisal", "kl", "cross_entropy", "top1_prob"):
        assert np.isnan(got[column][1:3]).all() and np.isfinite(got[column][[0, 3]]).all()
