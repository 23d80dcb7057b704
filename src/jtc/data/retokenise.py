"""The first sentences of a validation states folder tokenised again, with their stored positions,
gold tokens and final states: the inputs of a run over them that must see exactly the positions
extraction drew (the sub-module replacement runs, jtc.shortcuts.replace)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jtc.data.extract import prepare_sentences
from jtc.data.states import read_aligned, read_positions
from jtc.files.io import CorruptFileError, read_table


@dataclass(frozen=True)
class ValidationInputs:
    """The model inputs of some validation sentences and their stored rows (one per drawn
    position, in the states folder's order)."""

    inputs: list[np.ndarray]  # token ids of each input, as extraction built them
    sentence_ids: np.ndarray  # (rows,)
    positions: np.ndarray  # (rows,) the drawn position
    gold_ids: np.ndarray  # (rows,) the stored gold token; -1 where there is none
    final_states: np.ndarray  # (rows, d) float32: the stored h_L at the rows


def validation_inputs(
    val_dir: str | os.PathLike,
    sentences: str | os.PathLike,
    tokenizer,
    info: dict,
    count: int | None,
) -> ValidationInputs:
    """The first `count` rows (None: all) of the validation states `val_dir` (the first: the split
    is stored in seeded random order), their sentences (from the sentence table `sentences`)
    tokenised again as extraction did with the folder's seed and token limit (`info`: the cached
    model's info.json). A CorruptFileError if the table lacks a sentence or the tokens give other
    positions than the stored ones. The final states are read in float32 whatever the folder's
    storage dtype."""
    validation, val_info = read_positions(val_dir)
    chosen = validation.slice(0, count or len(validation))
    ids = chosen.column("sentence_id").to_numpy()
    positions = chosen.column("position").to_numpy()
    text = read_table(sentences, ["sentence_id", "text"])
    rows = pc.index_in(pa.array(ids), text.column("sentence_id"))
    if rows.null_count:
        raise CorruptFileError(f"{sentences} lacks sentences of the validation states {val_dir}")
    prepared, _ = prepare_sentences(
        tokenizer, info, text.take(rows), val_info["seed"], val_info["max_tokens"]
    )
    if not (
        np.array_equal(prepared.sentence_ids, ids) and np.array_equal(prepared.positions, positions)
    ):
        raise CorruptFileError(f"{val_dir}: its positions differ from {sentences} tokenised again")
    all_ids = validation.column("sentence_id").to_numpy()
    final = read_aligned(val_dir, val_info["num_layers"], all_ids, np.float32)[: len(ids)]
    return ValidationInputs(
        inputs=prepared.inputs,
        sentence_ids=ids,
        positions=positions,
        gold_ids=chosen.column("gold_id").to_numpy(),
        final_states=final,
    )
