"""Greedy generation with early exit (jtc.evaluation.generate) on a tiny random Llama model."""

import pytest
import torch
from tiny import make_model

from jtc.evaluation.generate import generate
from jtc.evaluation.shortlist import Shortlist, fit_factors
from jtc.model.adapters import UnsupportedArchitecture, get_adapter
from jtc.model.head import Head

PROMPT = "the king of the city was"


def identity(_layer, state):
    return state


@pytest.fixture(scope="module")
def llama():
    model, tokenizer = make_model("llama", layers=4, width=32)
    adapter = get_adapter("llama")
    return model, adapter, Head.from_model(model, adapter), tokenizer(PROMPT)["input_ids"]


def test_with_a_threshold_no_confidence_passes_it_is_plain_greedy_decoding(llama):
    model, adapter, head, prompt = llama
    want = model.generate(
        torch.tensor([prompt]), max_new_tokens=16, min_new_tokens=16, do_sample=False
    )[0, len(prompt) :].tolist()
    got = generate(model, adapter, head, identity, prompt, 16, threshold=lambda t: 2.0)
    assert got.tokens == want and got.exit_layers == [4] * 16
    assert got.tokens_per_second > 0


def test_every_token_exits_at_the_first_check_and_the_caches_stay_aligned(llama):
    model, adapter, head, prompt = llama
    got = generate(model, adapter, head, identity, prompt, 6, threshold=lambda t: -1.0)
    assert got.exit_layers == [4] + [1] * 5  # the first new token: the whole model
    # the second token is read from layer 1 after the prompt and the first token, all of
    # whose caches are the whole model's: the same state as a plain forward pass
    ids = torch.tensor([[*prompt, got.tokens[0]]])
    with torch.no_grad():
        states = model(input_ids=ids, output_hidden_states=True).hidden_states
    assert got.tokens[1] == int(head.logits(states[1][0, -1:]).argmax())
    # checking every 2nd layer from layer 1: exits at layer 1, never at 2
    every = generate(model, adapter, head, identity, prompt, 4, lambda t: -1.0, 2, 2)
    assert every.exit_layers == [4, 2, 2, 2]


def test_a_shortlist_check_decides_the_exits(llama):
    model, adapter, head, prompt = llama
    x = torch.randn(64, head.weight.shape[1], generator=torch.Generator().manual_seed(0))
    factors = fit_factors(head.weight, [x], rank=4)
    every = Shortlist(head, factors, candidates=head.vocab_size)  # every token a candidate
    full = generate(model, adapter, head, identity, prompt, 6, threshold=lambda t: -1.0)
    got = generate(model, adapter, head, identity, prompt, 6, lambda t: -1.0, shortlist=every)
    assert got.tokens == full.tokens and got.exit_layers == full.exit_layers
    # two candidates: a token that exits is one of the two the low-rank head picked
    few = Shortlist(head, factors, candidates=2)
    got = generate(model, adapter, head, identity, prompt, 3, lambda t: -1.0, shortlist=few)
    ids = torch.tensor([[*prompt, got.tokens[0]]])
    with torch.no_grad():
        state = model(input_ids=ids, output_hidden_states=True).hidden_states[1][0, -1:]
    picked = few.approximate(head.features(state)).topk(2, dim=1).indices[0].tolist()
    assert got.tokens[1] in picked and got.exit_layers[1] == 1
    # and with a threshold no confidence passes, plain greedy decoding again
    plain = generate(model, adapter, head, identity, prompt, 6, threshold=lambda t: 2.0)
    assert (
        generate(model, adapter, head, identity, prompt, 6, lambda t: 2.0, shortlist=few).tokens
        == plain.tokens
    )


def test_models_the_loop_cannot_run_are_named():
    bert, _ = make_model("bert-mlm", layers=2, width=16)
    adapter = get_adapter("bert")
    with pytest.raises(UnsupportedArchitecture, match="needs a causal LM"):
        generate(bert, adapter, Head.from_model(bert, adapter), identity, [2, 5], 2)
    gpt2, _ = make_model("gpt2", layers=2, width=16)
    adapter = get_adapter("gpt2")
    with pytest.raises(UnsupportedArchitecture, match="Llama family"):
        generate(gpt2, adapter, Head.from_model(gpt2, adapter), identity, [2, 5], 2)
