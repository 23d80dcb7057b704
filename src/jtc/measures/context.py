"""Perplexity at a real context (torch), as the depth-pruning literature measures it: held-out
documents of the corpus, their sentences joined in source order, the documents one after the
other (the tokenizer's end-of-sequence token between them, a newline where it has none),
tokenized and cut into non-overlapping windows of `context` tokens; every subject (the full
model, and each pruned one, jtc.measures.subjects) scores every position of a window that has
a next token in it against the full model on the same windows.

Held out: a document that is not a calibration document (one the calibration windows read, or
one holding a calibration sentence: jtc.pruning.windows.calibration_documents), so no map or
selection statistic saw any of its text. Windows are scored plainly (stride = context: the
first tokens of a window see little context); the sliding variant (stride context/2, scoring
only the second half) is not implemented.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import nn

from jtc.data.documents import cut_windows, document_texts, token_stream
from jtc.files.io import rows_table
from jtc.logs import Progress
from jtc.measures.checks import LOGITS_ELEMENTS, context_problem, usable_contexts
from jtc.measures.subjects import (
    SUBJECT_COLUMNS,
    Subject,
    measured_subjects,
    subject_columns,
    subject_model,
)
from jtc.model.adapters import adapter_of
from jtc.pruning.windows import calibration_documents
from jtc.settings import CalibrationText

log = logging.getLogger(__name__)

WINDOW_COLUMNS = {
    "context": pa.int64(),  # the window's tokens
    **SUBJECT_COLUMNS,
    "window": pa.int64(),  # 0-based, in the order of the token stream
    "tokens": pa.int64(),  # positions scored (context - 1)
    "cross_entropy": pa.float64(),  # summed over the window's scored positions, nats
    "cross_entropy_full": pa.float64(),  # the full model's, same positions
    "agreement": pa.int64(),  # positions whose top-1 token is the full model's
    "windows_wanted": pa.int64(),  # pruning.context.windows: more than the corpus gave, if less
}


def held_out_documents(sentences: pa.Table, calibration: set[str]) -> list[str]:
    """The text of every document of the corpus table `sentences` not among the calibration
    documents `calibration` (jtc.pruning.windows.calibration_documents): its sentences in
    source order joined by spaces; the documents in order of their first sentence."""
    left_out = pa.array(sorted(calibration), pa.string())
    kept = sentences.filter(pc.invert(pc.is_in(sentences.column("document"), left_out)))
    return list(document_texts(kept).values())


@torch.inference_mode()
def window_scores(
    model: nn.Module, windows: np.ndarray, batch_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """(cross entropy, top-1 token) at every position of every window with a next token in it,
    each (windows, context - 1), from the model's own logits (float32); batches of at most
    `batch_size` windows and LOGITS_ELEMENTS logits."""
    device = next(model.parameters()).device
    vocab = model.get_output_embeddings().weight.shape[0]
    batch_size = max(1, min(batch_size, LOGITS_ELEMENTS // (windows.shape[1] * vocab)))
    losses, top = [], []
    for first in range(0, len(windows), batch_size):
        ids = torch.as_tensor(windows[first : first + batch_size], device=device)
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1)
        gold = ids[:, 1:]
        losses.append(-logp.gather(-1, gold[..., None])[..., 0].cpu().numpy())
        top.append(logits.argmax(-1).cpu().numpy())
    return np.concatenate(losses).astype(np.float64), np.concatenate(top)


def subject_rows(
    subjects: Sequence[Subject],
    scored: Sequence[tuple[np.ndarray, np.ndarray]],
    context: int,
    wanted: int,
) -> list[dict]:
    """WINDOW_COLUMNS rows of every subject's window_scores (the first subject's is the full
    model's)."""
    full_loss, full_top = scored[0]
    rows = []
    for subject, (loss, top) in zip(subjects, scored, strict=True):
        for w in range(len(loss)):
            rows.append(
                {
                    "context": context,
                    **subject_columns(subject),
                    "window": w,
                    "tokens": int(loss.shape[1]),
                    "cross_entropy": float(loss[w].sum()),
                    "cross_entropy_full": float(full_loss[w].sum()),
                    "agreement": int((top[w] == full_top[w]).sum()),
                    "windows_wanted": wanted,
                }
            )
    return rows


def context_perplexity(
    model: nn.Module,
    tokenizer,
    info: dict,
    sentences: pa.Table,
    selection: pa.Table,
    maps: str | Path,
    *,
    contexts: Sequence[int],
    windows: int,
    rule: str,
    variants: Sequence[str],
    also: Sequence[str] = (),
    calibration: CalibrationText,
    calibration_sentences: int,
    held_out: int | None,
    corpus: str,
    model_name: str,
    batch_size: int,
) -> pa.Table:
    """WINDOW_COLUMNS of every subject (the full model, then each length and variant at the
    span `rule` chose, then `also`: jtc.measures.subjects) on the same windows of held-out
    documents (none of the calibration documents: `calibration`, `calibration_sentences` and
    `held_out` as calibration read them), for each context size."""
    problem = context_problem(contexts, windows, info.get("max_positions"), model_name)
    if problem:
        raise ValueError(problem)
    usable = usable_contexts(contexts, info.get("max_positions"))
    if len(usable) < len(contexts):
        log.warning(
            "model '%s' takes %s positions: pruning.context.lengths %s left out for it",
            model_name, info.get("max_positions"), sorted(set(contexts) - set(usable)),
        )  # fmt: skip
    contexts = usable
    left_out = calibration_documents(
        tokenizer, sentences, calibration, calibration_sentences, held_out, corpus
    )
    documents = held_out_documents(sentences, left_out)
    stream = token_stream(tokenizer, documents, max(contexts) * windows)
    adapter = adapter_of(info)
    subjects = measured_subjects(selection, rule, variants, also)
    cut = {c: cut_windows(stream, c, windows) for c in contexts}
    for context, got in cut.items():
        if len(got) < windows:
            log.warning(
                "corpus '%s' has %d held-out tokens in %d documents: %d windows of %d tokens, "
                "not %d (pruning.context.windows)",
                corpus, len(stream), len(documents), len(got), context, windows,
            )  # fmt: skip
        if len(got) == 0:
            raise ValueError(
                f"corpus '{corpus}' has too few held-out tokens ({len(stream)}) for one window "
                f"of {context} tokens: lower pruning.context.lengths"
            )
    rows: list[dict] = []
    progress = Progress(len(subjects), "context perplexity", "subjects")
    scored: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {c: [] for c in contexts}
    for subject in subjects:
        subject_net = subject_model(model, adapter, subject, maps)
        for context in contexts:
            scored[context].append(window_scores(subject_net, cut[context], batch_size))
        del subject_net
        progress.update(1)
    for context in contexts:
        rows += subject_rows(subjects, scored[context], context, windows)
    return rows_table(rows, WINDOW_COLUMNS)
