"""Which token positions of a sentence give rows (torch-free): extraction draws them from the
sentence's ordinary tokens (jtc.data.extract), and a trained method draws its share of the stored
training rows the same way (`subsample_rows`, config training.<method>.positions), so k
positions drawn from every stored token are the k that extraction with positions_per_sentence k
would store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import numpy as np

ALL = "all"  # positions_per_sentence: every ordinary token of each sentence


def draw_position(seed: int, sentence_id: int, candidates: np.ndarray) -> int:
    """A uniform draw over `candidates` from a generator keyed by (seed, sentence id)."""
    rng = np.random.default_rng([seed, sentence_id])
    return int(candidates[rng.integers(len(candidates))])


def draw_positions(
    seed: int, sentence_id: int, candidates: np.ndarray, count: int | str = 1
) -> np.ndarray:
    """The positions of one sentence, in increasing order: for `count` 1, draw_position's (the
    paper's one position); for k > 1, k distinct draws from a generator keyed by (seed, sentence
    id, k); every candidate for "all" or a k at least their number. The same sentence gets the
    same positions whatever else is extracted with it."""
    if count == 1:
        return np.asarray([draw_position(seed, sentence_id, candidates)], dtype=np.int64)
    if count == ALL or int(count) >= len(candidates):
        return np.asarray(candidates, dtype=np.int64)
    rng = np.random.default_rng([seed, sentence_id, int(count)])
    return np.sort(rng.choice(np.asarray(candidates, dtype=np.int64), int(count), replace=False))


def subsample_rows(
    sentence_ids: np.ndarray, positions: np.ndarray, count: int | str, seed: int
) -> np.ndarray | None:
    """The indices (increasing) of `count` rows of each sentence among stored rows
    (`sentence_ids`, `positions`: each row's sentence and token position, a sentence's rows
    together), drawn by draw_positions over that sentence's stored positions; None for "all"
    (every row). Deterministic: the same seed, sentence and count give the same rows whatever
    else is stored."""
    if count == ALL:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"positions {count!r}: a count of at least 1, or all")
    sentence_ids, positions = np.asarray(sentence_ids), np.asarray(positions)
    order = np.argsort(sentence_ids, kind="stable")  # a sentence's rows, in stored order
    starts = np.flatnonzero(np.r_[True, np.diff(sentence_ids[order]) != 0])
    chosen = []
    for rows in np.split(order, starts[1:]):
        stored = positions[rows]
        picked = draw_positions(seed, int(sentence_ids[rows[0]]), np.sort(stored), count)
        chosen.append(rows[np.isin(stored, picked)])
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)


def training_rows_for(states, count: int | str, seed: int):
    """The training states a trained method reads (config training.<method>.positions):
    `states` itself (jtc.data.states.LayerStates) for "all", else a RowSubset of `count` stored
    rows of each sentence (subsample_rows, over the positions its layer 0 file records)."""
    from jtc.data.states import read_row_positions

    rows = subsample_rows(states.sentence_ids, read_row_positions(states.states_dir), count, seed)
    if rows is None:
        return states
    return RowSubset(states, rows, states.sentence_ids, states.keep_bytes)


class RowSubset(Sequence[np.ndarray]):
    """The same rows (`rows`) of every layer of `states` (a sequence of (n, d) arrays, e.g.
    jtc.data.states.LayerStates), each layer's selection kept once made while they add up to at
    most `keep_bytes`; `sentence_ids` are the chosen rows' sentences."""

    def __init__(
        self,
        states: Sequence[np.ndarray],
        rows: np.ndarray,
        sentence_ids: np.ndarray,
        keep_bytes: int = 8 << 30,
    ):
        self.states, self.rows = states, rows
        self.sentence_ids = np.asarray(sentence_ids)[rows]
        self.keep_bytes = keep_bytes
        self.kept: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.states)

    @overload
    def __getitem__(self, layer: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, layer: slice) -> list[np.ndarray]: ...

    def __getitem__(self, layer):
        if isinstance(layer, slice):
            return [self[i] for i in range(*layer.indices(len(self)))]
        layer = range(len(self))[layer]
        if layer not in self.kept:
            chosen = self.states[layer][self.rows]
            if sum(a.nbytes for a in self.kept.values()) + chosen.nbytes > self.keep_bytes:
                return chosen
            self.kept[layer] = chosen
        return self.kept[layer]
