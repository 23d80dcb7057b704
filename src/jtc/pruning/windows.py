"""The text depth pruning calibrates on (config pruning.calibration, docs/method.md "Depth
pruning"): windows of running text, as the pruning literature calibrates, or the first
calibration_sentences training sentences on their own (kept for comparison).

Windows: training documents in a seeded order (each document ranked by the smallest `order` of
its training sentences), each one's training sentences joined in source order, the documents
one after the other with the end-of-sequence token between them (jtc.data.documents, as the
context perplexity joins its documents), cut into `windows` windows of `window_tokens` tokens.
Documents holding a sentence of the held-out measures (the first held_out_sentences validation
sentences: the evaluation and selected sentences, then the generation prompts) are left out,
and the context perplexity leaves out the calibration documents (calibration_documents, the one
definition both read), so no held-out measure shares a document with the calibration text.
The planning checks are torch-free; the rest needs the model's tokenizer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jtc.data.corpus import select_split
from jtc.data.documents import cut_windows, document_texts, joined_tokens
from jtc.settings import CalibrationText

SENTENCES_KEY = "pruning.calibration_sentences"
WINDOWS_KEY = "pruning.calibration.windows"
WINDOW_TOKENS_KEY = "pruning.calibration.window_tokens"


def held_out_sentences(
    text: str, evaluation_sentences: int, selected_sentences: int, prompts: int
) -> int | None:
    """The validation sentences the held-out measures read (config pruning: the evaluation and
    selected sentences, then the generation prompts after them), whose documents the
    calibration windows leave out; None with `text` (pruning.calibration.text) sentences:
    nothing is left out. The rules give each key on its own (jtc.pipeline.rule_reads)."""
    if text != "windows":
        return None
    return max(evaluation_sentences, selected_sentences) + prompts


def calibration_problem(
    name: str, max_positions: int | None, calibration: Mapping[str, Any]
) -> str | None:
    """What is wrong with pruning.calibration for model `name` of `max_positions` positions
    (None: unknown), or None."""
    if calibration["text"] != "windows":
        return None
    if calibration["windows"] < 1:
        return f"config key '{WINDOWS_KEY}' is {calibration['windows']}: it must be at least 1"
    if calibration["window_tokens"] < 2:
        return (
            f"config key '{WINDOW_TOKENS_KEY}' is {calibration['window_tokens']}: a window needs "
            "at least 2 tokens"
        )
    if max_positions is not None and calibration["window_tokens"] > max_positions:
        return (
            f"config key '{WINDOW_TOKENS_KEY}' is {calibration['window_tokens']} tokens, more "
            f"than model '{name}' takes ({max_positions} positions): lower it to at most "
            f"{max_positions}"
        )
    return None


def size_label(windows: int, window_tokens: int) -> str:
    """The windows' size in words: "8 windows × 512 tokens = 4,096 tokens"."""
    return f"{windows} windows × {window_tokens} tokens = {windows * window_tokens:,} tokens"


@dataclass(frozen=True)
class CalibrationWindows:
    """The calibration windows (windows, window_tokens) and the documents they read, in the
    order read."""

    windows: np.ndarray
    documents: tuple[str, ...]


def held_out_documents(sentences: pa.Table, held_out: int) -> set[str]:
    """The documents of the first `held_out` validation sentences (all of them where there are
    fewer: the draws name the keys asking for more, jtc.pipeline.draws)."""
    validation = sentences.filter(pc.equal(sentences.column("split"), "validation"))
    count = min(held_out, validation.num_rows)
    rows = select_split(sentences, "validation", count, "")
    return set(rows.column("document").to_pylist())


def window_documents(sentences: pa.Table, held_out: int) -> dict[str, str]:
    """The text of every training document outside the held-out ones (its training sentences
    in source order), in the seeded order the windows read them."""
    train = sentences.filter(pc.equal(sentences.column("split"), "train"))
    left_out = pa.array(sorted(held_out_documents(sentences, held_out)), pa.string())
    train = train.filter(pc.invert(pc.is_in(train.column("document"), left_out)))
    texts = document_texts(train)
    ranks = train.group_by("document").aggregate([("order", "min")])
    rank = dict(
        zip(
            ranks.column("document").to_pylist(),
            ranks.column("order_min").to_pylist(),
            strict=True,
        )
    )
    return {document: texts[document] for document in sorted(texts, key=rank.__getitem__)}


def calibration_windows(
    tokenizer, sentences: pa.Table, text: CalibrationText, held_out: int, corpus: str
) -> CalibrationWindows:
    """text.windows windows of text.window_tokens tokens of running text (the module's
    docstring), refused by key where the documents outside the held-out ones are too short,
    saying how many windows fit."""
    texts = window_documents(sentences, held_out)
    stream, used = joined_tokens(tokenizer, list(texts.values()), text.tokens)
    if len(stream) < text.tokens:
        fit = len(stream) // text.window_tokens
        raise ValueError(
            f"config key '{WINDOWS_KEY}': {size_label(text.windows, text.window_tokens)} asked "
            f"of corpus '{corpus}', whose training documents outside the held-out measures' "
            f"give {len(stream):,} tokens ({len(texts)} documents): {fit} windows of "
            f"{text.window_tokens} tokens fit; lower {WINDOWS_KEY} to at most {fit} (or "
            f"{WINDOW_TOKENS_KEY}), or give the corpus more text (corpora.{corpus}.max_sentences)"
        )
    windows = cut_windows(stream, text.window_tokens, text.windows)
    return CalibrationWindows(windows, tuple(list(texts)[:used]))


def calibration_documents(
    tokenizer,
    sentences: pa.Table,
    text: CalibrationText,
    calibration_sentences: int,
    held_out: int | None,
    corpus: str,
) -> set[str]:
    """The documents calibration reads, which every held-out measure leaves out: those of the
    calibration windows (text windows), or of the first calibration_sentences training
    sentences (text sentences)."""
    if text.text == "windows":
        if held_out is None:
            raise ValueError("calibration windows need held_out (held_out_sentences)")
        return set(calibration_windows(tokenizer, sentences, text, held_out, corpus).documents)
    rows = select_split(sentences, "train", calibration_sentences, corpus, SENTENCES_KEY)
    return set(rows.column("document").to_pylist())
