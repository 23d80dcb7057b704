"""An orthonormal Hadamard matrix of any width d (numpy): the basis LinearPatch (arXiv
2505.24680) scales the residual stream in (jtc.pruning.compensation).

LinearPatch's code builds H as QuIP#'s does: d = 2^m·K with K = 1 (Sylvester's construction) or
one of a fixed list of orders K (12, 20, 28, 36, 40, 52, 60, 108, 140, 156, 172) whose K × K
Hadamard matrix it stores, H = H_{2^m} ⊗ H_K / √d; any other width fails. jtc builds the core
itself, by Paley's constructions from a prime q (I: K = q + 1, q ≡ 3 mod 4; II: K = 2(q + 1),
q ≡ 1 mod 4), which covers most of that list and the widths of the models jtc runs (576 = 16·36,
960 = 16·60, 896 = 4·224, 2,048, 4,096): its H is a Hadamard matrix of the same order, not
the same matrix. For a width with no such factorisation (Hadamard matrices of other orders
exist, but need constructions jtc does not have) H is block-diagonal: orthonormal Hadamard
blocks of the largest orders jtc can build, taken greedily (d = 100: 96 + 4), which mixes only
channels within a block.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


def _is_prime(q: int) -> bool:
    return q >= 2 and all(q % p for p in range(2, int(q**0.5) + 1))


def _jacobsthal(q: int) -> np.ndarray:
    """Q_ab = χ(a − b) for a prime q, χ the quadratic character mod q (χ(0) = 0)."""
    squares = {(x * x) % q for x in range(1, q)}
    chi = np.array([0] + [1 if x in squares else -1 for x in range(1, q)], dtype=np.float64)
    index = np.arange(q)
    return chi[(index[:, None] - index[None, :]) % q]


def _paley(order: int) -> np.ndarray | None:
    """A ±1 Hadamard matrix of `order` by Paley's construction I or II from a prime q, or None
    when neither applies."""
    if _is_prime(order - 1) and (order - 1) % 4 == 3:  # I: I + [[0, 1ᵀ], [−1, Q]]
        q = order - 1
        core = np.zeros((order, order))
        core[0, 1:], core[1:, 0], core[1:, 1:] = 1.0, -1.0, _jacobsthal(q)
        return np.eye(order) + core
    q = order // 2 - 1
    if order % 2 == 0 and _is_prime(q) and q % 4 == 1:  # II: C ⊗ [[1, −1], [−1, −1]] + I ⊗ H_2
        conference = np.zeros((q + 1, q + 1))
        conference[0, 1:], conference[1:, 0], conference[1:, 1:] = 1.0, 1.0, _jacobsthal(q)
        return np.kron(conference, [[1.0, -1.0], [-1.0, -1.0]]) + np.kron(
            np.eye(q + 1), [[1.0, 1.0], [1.0, -1.0]]
        )
    return None


def _plus_minus(order: int) -> np.ndarray | None:
    """A ±1 Hadamard matrix of `order` as H_{2^m} ⊗ H_K (Sylvester times a Paley core, the
    smallest core that works), or None."""
    power = 1
    while order % (2 * power) == 0:
        power *= 2
    while power >= 1:
        core = np.ones((1, 1)) if order == power else _paley(order // power)
        if core is not None:
            sylvester = np.ones((1, 1))
            while len(sylvester) < power:
                sylvester = np.kron([[1.0, 1.0], [1.0, -1.0]], sylvester)
            return np.kron(sylvester, core)
        power //= 2
    return None


@lru_cache(maxsize=4)
def hadamard(width: int) -> np.ndarray:
    """An orthonormal d × d matrix (float64, read-only): a Hadamard matrix divided by √d, or
    for a width jtc has no construction of, a block-diagonal one (module docstring)."""
    blocks, rest = [], width
    while rest > 0:
        block = next(b for b in map(_plus_minus, range(rest, 0, -1)) if b is not None)
        blocks.append(block / np.sqrt(len(block)))
        rest -= len(block)
    matrix = np.zeros((width, width))
    at = 0
    for block in blocks:
        matrix[at : at + len(block), at : at + len(block)] = block
        at += len(block)
    matrix.setflags(write=False)
    return matrix


def is_full_hadamard(width: int) -> bool:
    """Whether hadamard(width) is one Hadamard matrix rather than block-diagonal."""
    return _plus_minus(width) is not None
