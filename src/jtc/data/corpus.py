"""Corpora as sentences: split raw text into clean sentences and make the sentence table (the
raw text comes from jtc.data.sources).

The sentence table (Parquet) has one row per distinct sentence: `sentence_id` (its index in
source order), `text`, `split` ("train" or "validation", from a seeded hash of the text, so the
split of a sentence never depends on the others), `order` (a seeded rank used to pick the first
n sentences of a split), `source` and `document`.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger(__name__)

MIN_WORDS = 4
MAX_WORDS = 80


class CorpusError(RuntimeError):
    """A corpus that cannot be read or is too small."""


# --- sentences ---------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREV = re.compile(
    r"\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|Mt|Gen|Gov|Sen|Rep|Rev|Col|Lt|Sgt|Capt|Inc|Ltd|Co|Corp|vs|etc|"
    r"No|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec|U\.S|e\.g|i\.e|[A-Z])\.$"
)


def split_sentences(text: str) -> list[str]:
    """Split running text into sentences at ., ! or ? followed by a capital or digit."""
    pieces, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        candidate = text[start : match.start()].rstrip()
        if _ABBREV.search(candidate):
            continue
        pieces.append(text[start : match.end()].strip())
        start = match.end()
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffd]")


def clean_sentence(text: str) -> str | None:
    """Normalise whitespace; return None for text that is not a usable English sentence.

    Rule: kept if it has MIN_WORDS..MAX_WORDS words, no control or replacement characters,
    mostly letters, and no leftover markup.
    """
    text = " ".join(text.split())
    words = text.split(" ")
    if not MIN_WORDS <= len(words) <= MAX_WORDS or _CONTROL.search(text):
        return None
    letters = sum(c.isalpha() for c in text)
    if letters < 0.6 * len(text.replace(" ", "")):
        return None
    if any(mark in text for mark in ("{{", "}}", "[[", "]]", "|", "<", ">", "http", "==")):
        return None
    return text


# --- the sentence table --------------------------------------------------------------------


def _unit_hash(seed: int, text: str, salt: str) -> float:
    digest = hashlib.blake2b(f"{seed}\x00{salt}\x00{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def sentence_table(
    pairs: Iterable[tuple[str, str]],
    source: str,
    seed: int,
    validation_fraction: float,
    max_sentences: int | None = None,
) -> pa.Table:
    """Clean, de-duplicate and split sentences into the sentence table."""
    texts, documents, seen = [], [], set()
    dropped = 0
    for raw, document in pairs:
        text = clean_sentence(raw)
        if text is None or text in seen:
            dropped += 1
            continue
        seen.add(text)
        texts.append(text)
        documents.append(document)
        if max_sentences is not None and len(texts) >= max_sentences:
            break
    log.info(
        "%s: kept %d sentences, dropped %d (too short/long, markup, duplicates)",
        source,
        len(texts),
        dropped,
    )
    if not texts:
        raise CorpusError(f"corpus source '{source}' gave no usable sentences")
    split = [
        "validation" if _unit_hash(seed, t, "split") < validation_fraction else "train"
        for t in texts
    ]
    order_key = np.array([_unit_hash(seed, t, "order") for t in texts])
    order = np.empty(len(texts), dtype=np.int64)
    order[np.argsort(order_key, kind="stable")] = np.arange(len(texts))
    return pa.table(
        {
            "sentence_id": pa.array(np.arange(len(texts)), pa.int64()),
            "text": pa.array(texts, pa.string()),
            "split": pa.array(split, pa.string()),
            "order": pa.array(order, pa.int64()),
            "source": pa.array([source] * len(texts), pa.string()),
            "document": pa.array(documents, pa.string()),
        }
    )


def select_split(
    table: pa.Table, split: str, n: int, corpus: str, key: str | None = None
) -> pa.Table:
    """The first `n` sentences of `split` in the table's seeded order (`key`: the config key
    that asks for them, named if there are fewer; None: sizes.<split>)."""
    rows = table.filter(pc.equal(table.column("split"), split))
    if rows.num_rows < n:
        key = key or f"sizes.{split}"
        raise CorpusError(
            f"config key '{key}': corpus '{corpus}' has {rows.num_rows} {split} sentences but "
            f"{n} were requested; lower {key} or use a larger corpus"
        )
    order = np.argsort(rows.column("order").to_numpy(), kind="stable")[:n]
    return rows.take(pa.array(order))
