"""Choosing one map for every layer (jtc.shortcuts.selection, one_jump_selected)."""

import numpy as np
import pytest

from jtc.shortcuts.maps import ShortcutMap
from jtc.shortcuts.selection import mean_cosine, select_one_map


def test_mean_cosine_of_rows():
    a = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    b = np.array([[2.0, 0.0], [0.0, -1.0], [1.0, 1.0]])
    assert mean_cosine(a, b) == pytest.approx((1.0 - 1.0 + 0.0) / 3)  # signed; zero row: 0


def test_the_map_that_serves_every_layer_best_is_chosen():
    rng = np.random.default_rng(0)
    n, d, last = 300, 6, 3
    final = rng.normal(size=(n, d))
    rotations = [np.linalg.qr(rng.normal(size=(d, d)))[0] for _ in range(last)]
    # layers 0 and 1 are the same rotation of h_L plus noise, layer 2 another one
    rotations[1] = rotations[0]
    states = [final @ r + 0.1 * rng.normal(size=(n, d)) for r in rotations] + [final]
    # candidate s undoes layer s's rotation: candidate 0 (= 1) serves two layers of three
    candidates = {s: ShortcutMap({"weight": rotations[s]}) for s in range(last)}
    chosen, scores = select_one_map(candidates, states, last)
    by_hand = {
        s: np.mean([mean_cosine(states[k] @ rotations[s].T, final) for k in range(last)])
        for s in range(last)
    }
    assert scores == pytest.approx(by_hand)
    assert scores[0] == scores[1] > scores[2]
    assert chosen == 0  # a tie goes to the lowest source layer
