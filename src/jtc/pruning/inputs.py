"""The sentences depth pruning runs on, as model inputs: the first sentences of a split, every
ordinary token of each (truncated to the token limit), nothing drawn."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from jtc.data.corpus import select_split
from jtc.data.extract import ALL, prepare_sentences


def every_token(
    tokenizer,
    info: dict,
    sentences: pa.Table,
    split: str,
    count: int,
    corpus: str,
    max_tokens: int,
    key: str | None = None,
) -> tuple[list[np.ndarray], np.ndarray]:
    """The token ids of the first `count` sentences of `split` in the corpus table `sentences`
    (each truncated to max_tokens), every position used, and the sentence ids of those inputs
    (`key`: the config key asking for `count`, named if the split has fewer)."""
    table = select_split(sentences, split, count, corpus, key)
    # every position: nothing is drawn, so the seed plays no part
    prepared, _ = prepare_sentences(tokenizer, info, table, 0, max_tokens, positions=ALL)
    first_rows = np.searchsorted(prepared.input_of, np.arange(len(prepared.inputs)))
    return prepared.inputs, prepared.sentence_ids[first_rows]
