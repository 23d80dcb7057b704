"""A cheaper early-exit check: the confidence computed on a shortlist of candidate tokens.

The full check decodes the whole vocabulary: V·w multiply-adds for the unembedding W (V × w) of
the head's features x (w = the width they have). The shortlist check computes, for one state:

1. approximate logits ẑ = U (D x) + b, with D (k × w) and U = W B (V × k) a rank-k
   factorisation of W fitted to the features the head sees (below): k·w + V·k multiply-adds;
2. the candidates C: the c tokens with the largest ẑ;
3. their exact logits z_C = W_C x + b_C: c·w multiply-adds;
4. the prediction: the candidate with the largest exact logit; the confidence: p̂(first) −
   p̂(second) of the two best candidates, p̂ the softmax over the candidates' exact logits
   alone. It leaves out the probability outside the shortlist, so it is higher than the full
   check's confidence; the exit threshold λ is chosen on the shortlist check's own confidences.
   (A normaliser over the whole vocabulary, exact on C and ẑ elsewhere, tracked the full
   confidence more closely but needs V exponentials a check, which cost as much as the rest of
   the check on a CPU.)

A model that soft-caps its logits has ẑ and z_C capped the same way.

The factorisation is the rank-k P = B D that minimises E‖W x − W P x‖² over the head's features
x of the last layer's states h_L on the training split: with S = E[x xᵀ] (S^{1/2} its root, S^{+1/2}
the pseudo-inverse of that) and Q_k the top k eigenvectors of S^{1/2} WᵀW S^{1/2}, D = Q_kᵀ S^{+1/2}
and B = S^{1/2} Q_k. Weighting by S matters: the top singular directions of W alone miss the
few directions the final states actually use, and a plain rank-128 factorisation of SmolLM2's
unembedding shortlisted the final top-1 token for under 20% of h_L's positions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from jtc.files.tensors import TensorWriter, read_tensor_file

FORMAT = "jtc-shortlist-v1"


@dataclass(frozen=True)
class Factors:
    """D (k × w) and B (w × k) of the rank-k factorisation W ≈ W B D, as fitted."""

    down: np.ndarray
    basis: np.ndarray

    @property
    def rank(self) -> int:
        return int(self.down.shape[0])


def _root(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(S^{1/2}, S^{+1/2}) of a symmetric positive semi-definite matrix; directions with an
    eigenvalue below 1e-12 of the largest count as absent."""
    values, vectors = torch.linalg.eigh(matrix)
    values = values.clamp(min=0.0)
    kept = values > 1e-12 * values.max().clamp(min=torch.finfo(values.dtype).tiny)
    root = values.sqrt()
    inverse = torch.where(kept, 1.0 / root.clamp(min=torch.finfo(values.dtype).tiny), 0.0)
    return (vectors * root) @ vectors.T, (vectors * inverse) @ vectors.T


@torch.inference_mode()
def fit_factors(weight: torch.Tensor, features: Iterable[torch.Tensor], rank: int) -> Factors:
    """The rank-min(rank, w) factorisation of the unembedding `weight` (V × w) weighted by the
    second moment of `features` (chunks of rows, each (n, w)); float64 throughout."""
    if rank < 1:
        raise ValueError(f"shortlist rank {rank} is not a positive number")
    width = int(weight.shape[1])
    k = min(rank, width)
    second = torch.zeros(width, width, dtype=torch.float64, device=weight.device)
    count = 0
    for chunk in features:
        x = chunk.to(weight.device, torch.float64)
        second += x.T @ x
        count += len(x)
    if count == 0:
        raise ValueError("no states to fit the shortlist factorisation on")
    root, inverse = _root(second / count)
    w64 = weight.to(torch.float64)
    gram = w64.T @ w64
    _, vectors = torch.linalg.eigh(root @ gram @ root)
    top = vectors.flip(1)[:, :k]  # eigh: ascending
    return Factors(
        down=(top.T @ inverse).float().cpu().numpy(),
        basis=(root @ top).float().cpu().numpy(),
    )


def save_factors(path: str | Path, factors: Factors, metadata: dict[str, object]) -> None:
    writer = TensorWriter(path)
    writer.add("down", factors.down)
    writer.add("basis", factors.basis)
    meta = {"format": FORMAT, "rank": factors.rank, **metadata}
    writer.close({k: v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()})


def load_factors(path: str | Path) -> Factors:
    tensors, _ = read_tensor_file(path, FORMAT, "shortlist factorisation")
    return Factors(down=tensors["down"], basis=tensors["basis"])


class Shortlist:
    """The shortlist check of a head (jtc.model.head.Head) with c candidates."""

    def __init__(self, head, factors: Factors, candidates: int):
        if candidates < 2:
            raise ValueError(f"a shortlist of {candidates} candidates has no runner-up")
        if factors.down.shape[1] != head.weight.shape[1]:
            raise ValueError(
                f"shortlist factors of width {factors.down.shape[1]} for a head of width "
                f"{head.weight.shape[1]}"
            )
        self.head = head
        self.candidates = min(candidates, head.vocab_size)
        self.down = torch.tensor(factors.down, device=head.device)  # (k, w)
        basis = torch.tensor(factors.basis, device=head.device, dtype=torch.float64)
        self.up = (head.weight.to(torch.float64) @ basis).float()  # (V, k) = W B

    @property
    def rank(self) -> int:
        return int(self.down.shape[0])

    def macs(self) -> float:
        """Multiply-adds of one check: k·w + V·k for ẑ, c·w for the candidates' logits."""
        vocab, width = self.head.weight.shape
        return float(self.rank * width + vocab * self.rank + self.candidates * width)

    def approximate(self, features: torch.Tensor) -> torch.Tensor:
        """ẑ (n, V) of features (n, w)."""
        low = torch.nn.functional.linear(features @ self.down.T, self.up, self.head.bias)
        return self.head.cap(low)

    @torch.inference_mode()
    def check(
        self, features: torch.Tensor, exact: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(prediction, p̂ of it, p̂ of the runner-up), each (n,), for features (n, w).

        `exact`: the whole-vocabulary logits where a caller has them anyway (scoring does), read
        at the candidates only; else the candidates' logits are computed, c·w a row."""
        approx = self.approximate(features)
        candidates = torch.topk(approx, self.candidates, dim=1).indices
        if exact is None:
            logits = self.head.token_logit(features, candidates)  # c·w a row
        else:
            logits = exact.gather(1, candidates)
        log_norm = torch.logsumexp(logits, dim=1)
        best = torch.topk(logits, 2, dim=1)
        prediction = candidates.gather(1, best.indices[:, :1])[:, 0]
        probs = (best.values - log_norm[:, None]).exp()
        return prediction, probs[:, 0], probs[:, 1]
