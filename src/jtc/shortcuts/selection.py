"""Choosing the one map that early exit uses from every layer (one_jump_selected).

The candidates are per-layer maps into the last layer L, one from each source layer s. Each is
applied to the states of every layer l < L (not only its own source), and scored by the mean
cosine similarity between its prediction and the true h_L, over positions, then over layers;
the candidate with the highest score is the one map. "One Jump Is All You Need" (arXiv
2504.13984) selects one of its per-layer N-NJTC maps by a cosine-similarity criterion; its exact
definition was not available here, so this is our criterion after it, not the paper's.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from jtc.shortcuts.maps import ShortcutMap

MAX_ROWS = 4096  # positions per layer scored (the first ones: the training split is shuffled)


def mean_cosine(predicted: np.ndarray, target: np.ndarray) -> float:
    """The mean over rows of the cosine similarity of two (n, d) arrays (0 for a zero row)."""
    dot = np.einsum("ij,ij->i", predicted, target)
    norms = np.linalg.norm(predicted, axis=1) * np.linalg.norm(target, axis=1)
    return float(np.mean(np.divide(dot, norms, out=np.zeros_like(dot), where=norms > 0)))


def select_one_map(
    candidates: Mapping[int, ShortcutMap], states: list[np.ndarray], last: int
) -> tuple[int, dict[int, float]]:
    """(the chosen candidate's source layer, every candidate's score): the score is the mean,
    over layers l < L, of the mean cosine similarity of candidate(h_l) and h_L on at most
    MAX_ROWS positions; ties go to the lowest source layer."""
    target = np.asarray(states[last][:MAX_ROWS], dtype=np.float64)
    sources = [states[layer][:MAX_ROWS] for layer in range(last)]
    scores = {
        source: float(np.mean([mean_cosine(candidate(h), target) for h in sources]))
        for source, candidate in sorted(candidates.items())
    }
    best = max(scores.values())
    return min(s for s, v in scores.items() if v == best), scores
