"""Generation fidelity (torch): how long a pruned model's greedy continuation stays the full
model's. Held-out prompts (validation sentences after those the span runs score, each whole,
truncated to the token limit) are continued by `new_tokens` greedy tokens (model.generate,
do_sample False, KV cache), one prompt at a time (no padding), by the full model and each
pruned subject (jtc.measures.subjects); per prompt, the tokens generated before the first
difference from the full model's continuation and the positions that agree. A continuation
that ends early (the end-of-sequence token) is padded with -1: positions where both ended
agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from jtc.data.corpus import select_split
from jtc.files.io import rows_table
from jtc.logs import Progress
from jtc.measures.subjects import (
    SUBJECT_COLUMNS,
    Subject,
    measured_subjects,
    subject_columns,
    subject_model,
)
from jtc.model.adapters import adapter_of

PROMPT_COLUMNS = {
    **SUBJECT_COLUMNS,
    "sentence_id": pa.int64(),  # the prompt's validation sentence
    "prompt_tokens": pa.int64(),
    "new_tokens": pa.int64(),  # tokens generated (pruning.generation.new_tokens)
    "first_difference": pa.int64(),  # tokens before the first that differs (new_tokens: none)
    "agreement": pa.int64(),  # positions whose token is the full model's
}


def generation_problem(prompts: int, new_tokens: int) -> str | None:
    """What is wrong with the generation settings, or None."""
    if prompts < 1:
        return f"pruning.generation.prompts is {prompts}: it must be at least 1"
    if new_tokens < 1:
        return f"pruning.generation.new_tokens is {new_tokens}: it must be at least 1"
    return None


def prompt_inputs(
    tokenizer, sentences: pa.Table, skip: int, prompts: int, corpus: str, max_tokens: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """The token ids (the tokenizer's special tokens added, at most max_tokens) of validation
    sentences skip+1..skip+prompts in the seeded order, and their sentence ids."""
    table = select_split(sentences, "validation", skip + prompts, corpus).slice(skip)
    inputs = [
        np.asarray(tokenizer(text).input_ids[:max_tokens], dtype=np.int64)
        for text in table.column("text").to_pylist()
    ]
    return inputs, table.column("sentence_id").to_numpy()


@torch.inference_mode()
def greedy(model: nn.Module, prompt: np.ndarray, new_tokens: int, pad_id: int) -> np.ndarray:
    """The model's greedy continuation of one prompt, `new_tokens` long (-1 after an early
    end)."""
    device = next(model.parameters()).device
    ids = torch.as_tensor(prompt[None], device=device)
    out = (
        model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            do_sample=False,
            num_beams=1,
            use_cache=True,
            pad_token_id=pad_id,
            temperature=None,
            top_p=None,
            top_k=None,
        )[0, len(prompt) :]
        .cpu()
        .numpy()
    )
    padded = np.full(new_tokens, -1, dtype=np.int64)
    padded[: len(out)] = out
    eos = getattr(model.generation_config, "eos_token_id", None)
    ends = np.atleast_1d(eos) if eos is not None else np.zeros(0, dtype=np.int64)
    ended = np.flatnonzero(np.isin(padded, ends))
    if len(ended):  # what generate pads with after the end is not generated
        padded[ended[0] + 1 :] = -1
    return padded


def compared(continuation: np.ndarray, full: np.ndarray) -> tuple[int, int]:
    """(tokens before the first difference, positions that agree) of a continuation with the
    full model's."""
    same = continuation == full
    first = int(np.argmin(same)) if not same.all() else len(same)
    return first, int(same.sum())


def generation_fidelity(
    model: nn.Module,
    tokenizer,
    info: dict,
    sentences: pa.Table,
    selection: pa.Table,
    maps: str | Path,
    *,
    prompts: int,
    new_tokens: int,
    skip: int,
    rule: str,
    variants: Sequence[str],
    corpus: str,
    max_tokens: int,
) -> pa.Table:
    """PROMPT_COLUMNS of every subject (the full model, then each length and variant at the
    span `rule` chose) on the same prompts: validation sentences after the first `skip`."""
    problem = generation_problem(prompts, new_tokens)
    if problem:
        raise ValueError(problem)
    inputs, ids = prompt_inputs(tokenizer, sentences, skip, prompts, corpus, max_tokens)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    subjects: list[Subject] = measured_subjects(selection, rule, variants)
    adapter = adapter_of(info)
    progress = Progress(len(subjects), "generation fidelity", "subjects")
    full: list[np.ndarray] = []
    rows = []
    for subject in subjects:
        net = subject_model(model, adapter, subject, maps)
        for p, prompt in enumerate(inputs):
            got = greedy(net, prompt, new_tokens, pad)
            if not full or len(full) <= p:
                full.append(got)  # the first subject is the full model
            first, agreement = compared(got, full[p])
            rows.append(
                {
                    **subject_columns(subject),
                    "sentence_id": int(ids[p]),
                    "prompt_tokens": len(prompt),
                    "new_tokens": new_tokens,
                    "first_difference": first,
                    "agreement": agreement,
                }
            )
        del net
        progress.update(1)
    return rows_table(rows, PROMPT_COLUMNS)
