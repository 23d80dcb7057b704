"""Decoding states to tokens through the model's own head, a chunk of rows at a time: the most
likely tokens of states (the worked examples, the API) and the head's features of states (what
the shortlist factorisation is fitted on). Scoring a prediction against the model's final one
is jtc.model.scoring.
"""

from __future__ import annotations

import numpy as np
import torch

from jtc.model.head import Head
from jtc.model.scoring import float_rows, row_chunks


def features_in_chunks(head: Head, states: np.ndarray):
    """The head's features of `states`, chunk by chunk (the chunks decoding uses)."""
    for rows in row_chunks(len(states), head.rows_per_chunk()):
        yield head.features(float_rows(states, rows))


@torch.inference_mode()
def top_tokens(head: Head, states: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, probabilities), each (n, k), of the k most likely tokens of D(states)."""
    ids, probs = [], []
    for rows in row_chunks(len(states), head.rows_per_chunk()):
        log_probs = torch.log_softmax(head.logits(float_rows(states, rows)), dim=1)
        values, indices = torch.topk(log_probs, k, dim=1)
        ids.append(indices.cpu().numpy())
        probs.append(values.exp().cpu().numpy())
    return np.concatenate(ids), np.concatenate(probs)
