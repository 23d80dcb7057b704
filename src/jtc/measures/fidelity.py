"""Generation fidelity (torch): how long a pruned model's greedy continuation stays the full
model's. Held-out prompts (validation sentences after those the span runs score, each whole,
truncated to the token limit) are continued by `new_tokens` greedy tokens (model.generate,
do_sample False, KV cache), prompts batched and padded on the left, by the full model and each
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
from jtc.measures.checks import generation_problem
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


def prompt_inputs(
    tokenizer, sentences: pa.Table, skip: int, prompts: int, corpus: str, max_tokens: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """The token ids (the tokenizer's special tokens added, at most max_tokens) of validation
    sentences skip+1..skip+prompts in the seeded order, and their sentence ids."""
    key = "pruning.generation.prompts"  # after the evaluation and selected sentences
    table = select_split(sentences, "validation", skip + prompts, corpus, key).slice(skip)
    inputs = [
        np.asarray(tokenizer(text).input_ids[:max_tokens], dtype=np.int64)
        for text in table.column("text").to_pylist()
    ]
    return inputs, table.column("sentence_id").to_numpy()


@torch.inference_mode()
def greedy(
    model: nn.Module, prompts: Sequence[np.ndarray], new_tokens: int, pad_id: int
) -> np.ndarray:
    """(prompts, new_tokens): the model's greedy continuation of each prompt, the prompts in
    one batch padded on the left (-1 after an early end)."""
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.as_tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    out = (
        model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=new_tokens,
            do_sample=False,
            num_beams=1,
            use_cache=True,
            pad_token_id=pad_id,
            temperature=None,
            top_p=None,
            top_k=None,
        )[:, width:]
        .cpu()
        .numpy()
    )
    padded = np.full((len(prompts), new_tokens), -1, dtype=np.int64)
    padded[:, : out.shape[1]] = out
    eos = getattr(model.generation_config, "eos_token_id", None)
    ends = np.atleast_1d(eos) if eos is not None else np.zeros(0, dtype=np.int64)
    for row in padded:
        ended = np.flatnonzero(np.isin(row, ends))
        if len(ended):  # what generate pads with after the end is not generated
            row[ended[0] + 1 :] = -1
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
    also: Sequence[str] = (),
    corpus: str,
    max_tokens: int,
    batch_size: int,
) -> pa.Table:
    """PROMPT_COLUMNS of every subject (the full model, then each length and variant at the
    span `rule` chose, then `also`: jtc.measures.subjects) on the same prompts: validation
    sentences after the first `skip`."""
    problem = generation_problem(prompts, new_tokens)
    if problem:
        raise ValueError(problem)
    inputs, ids = prompt_inputs(tokenizer, sentences, skip, prompts, corpus, max_tokens)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    subjects: list[Subject] = measured_subjects(selection, rule, variants, also)
    adapter = adapter_of(info)
    progress = Progress(len(subjects), "generation fidelity", "subjects")
    full = np.zeros((0, new_tokens), dtype=np.int64)
    rows = []
    for subject in subjects:
        net = subject_model(model, adapter, subject, maps)
        got = np.concatenate(
            [
                greedy(net, inputs[first : first + batch_size], new_tokens, pad)
                for first in range(0, len(inputs), batch_size)
            ]
        )
        if subject == subjects[0]:  # the full model
            full = got
        for p, prompt in enumerate(inputs):
            first, agreement = compared(got[p], full[p])
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
