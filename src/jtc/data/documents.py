"""Running text from the sentence table (jtc.data.corpus): each document's sentences joined in
source order, documents one after the other with the tokenizer's end-of-sequence token between
them (a newline where it has none), as one token stream. Depth pruning's calibration windows
(jtc.pruning.windows) and the context perplexity's windows (jtc.measures.context) are both
cut from such streams."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa


def document_texts(sentences: pa.Table) -> dict[str, str]:
    """Each document of the sentence table `sentences` (any subset of its rows) as text: its
    sentences in source order (sentence_id) joined by spaces; the documents in order of their
    first sentence."""
    rows = sentences.sort_by("sentence_id")
    texts: dict[str, list[str]] = {}
    for document, text in zip(
        rows.column("document").to_pylist(), rows.column("text").to_pylist(), strict=True
    ):
        texts.setdefault(document, []).append(text)
    return {document: " ".join(parts) for document, parts in texts.items()}


def separator_ids(tokenizer) -> list[int]:
    """What goes between two documents: the end-of-sequence token, or a newline's tokens."""
    eos = tokenizer.eos_token_id
    return [eos] if eos is not None else tokenizer("\n", add_special_tokens=False).input_ids


def joined_tokens(tokenizer, documents: Sequence[str], wanted: int) -> tuple[np.ndarray, int]:
    """(stream, used): the documents' tokens one after the other, the separator between them,
    stopping once `wanted` tokens are there (each document tokenized whole; the stream cut to
    `wanted`), and how many documents it read."""
    separator = separator_ids(tokenizer)
    stream: list[int] = []
    used = 0
    for document in documents:
        if len(stream) >= wanted:
            break
        if stream:
            stream += separator
        stream += tokenizer(document, add_special_tokens=False).input_ids
        used += 1
    return np.asarray(stream[:wanted], dtype=np.int64), used


def token_stream(tokenizer, documents: Sequence[str], wanted: int) -> np.ndarray:
    """The documents' tokens one after the other, the separator between them, stopping once
    `wanted` tokens are there (each document is tokenized whole)."""
    return joined_tokens(tokenizer, documents, wanted)[0]


def cut_windows(stream: np.ndarray, context: int, windows: int) -> np.ndarray:
    """(count, context) non-overlapping windows from the start of the stream, at most
    `windows` of them (fewer where the stream is shorter)."""
    count = min(windows, len(stream) // context)
    return stream[: count * context].reshape(count, context)
