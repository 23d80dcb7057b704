"""Generation fidelity (jtc.measures.fidelity) on a tiny random Llama: the full model against
itself agrees everywhere, a pruned copy's first difference and agreeing positions match a
step-by-step greedy comparison without a KV cache, and bad settings are refused naming the
key."""

import numpy as np
import pyarrow as pa
import pytest
import torch
from pruneable import TOKENIZER, make
from tiny import SENTENCES

from jtc.measures.checks import generation_problem
from jtc.measures.fidelity import compared, generation_fidelity, prompt_inputs
from jtc.pruning.pruned import pruned_copy

NEW = 6


def corpus() -> pa.Table:
    n = 16
    return pa.table(
        {
            "sentence_id": np.arange(n),
            "text": [SENTENCES[i % len(SENTENCES)] for i in range(n)],
            "split": ["validation"] * n,
            "order": np.arange(n)[::-1].copy(),
            "source": ["test"] * n,
            "document": [f"doc-{i}" for i in range(n)],
        }
    )


def selection() -> pa.Table:
    row = {"length": 2, "selection": "measured", "variant": "drop", "start": 2, "removed": "3-4"}
    return pa.Table.from_pylist([{**row, "fraction_removed": 0.4}])


def stepwise(model, prompt: np.ndarray) -> np.ndarray:
    """Greedy decoding by whole forward passes, no cache."""
    ids = torch.as_tensor(prompt[None])
    with torch.no_grad():
        for _ in range(NEW):
            nxt = model(input_ids=ids, use_cache=False).logits[0, -1].argmax()
            ids = torch.cat([ids, nxt.view(1, 1)], 1)
    return ids[0, len(prompt) :].numpy()


def test_compared():
    assert compared(np.array([1, 2, 3]), np.array([1, 2, 3])) == (3, 3)
    assert compared(np.array([1, 5, 3]), np.array([1, 2, 3])) == (1, 2)


@pytest.mark.parametrize(
    ("prompts", "new", "key"),
    [(0, 4, "pruning.generation.prompts"), (4, 0, "pruning.generation.new_tokens")],
)
def test_bad_settings_are_refused_naming_the_key(prompts, new, key):
    problem = generation_problem(prompts, new)
    assert problem and key in problem


def test_full_agrees_with_itself_and_pruned_matches_stepwise():
    model, adapter = make("llama")
    model.generation_config.eos_token_id = None
    info = {"adapter": adapter.to_json(), "max_positions": 64}
    got = generation_fidelity(
        model, TOKENIZER, info, corpus(), selection(), "unused.safetensors",
        prompts=3, new_tokens=NEW, skip=2, rule="measured", variants=["drop"],
        corpus="test", max_tokens=64, batch_size=2,
    ).to_pylist()  # fmt: skip
    full = [r for r in got if r["variant"] == "full"]
    drop = [r for r in got if r["variant"] == "drop"]
    assert len(full) == len(drop) == 3
    assert all(r["first_difference"] == r["agreement"] == NEW for r in full)
    inputs, ids = prompt_inputs(TOKENIZER, corpus(), 2, 3, "test", 64)
    assert [r["sentence_id"] for r in drop] == list(ids) == [13, 12, 11]  # after the first 2
    pruned = pruned_copy(model, adapter, "drop", 2, 2, None)
    for prompt, row in zip(inputs, drop, strict=True):
        want = compared(stepwise(pruned, prompt), stepwise(model, prompt))
        assert (row["first_difference"], row["agreement"]) == want
    assert any(r["first_difference"] < NEW for r in drop)  # the test can tell
