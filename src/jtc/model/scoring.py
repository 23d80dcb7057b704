"""Scoring states through the model's own head against its final prediction, position by
position: what every job that judges a prediction needs (the prediction tables, the tuned lens's
loss, sub-module replacement, depth pruning).

The head is D(h) = W · transform(h) + b (GPT-2: W_E · ln_f(h); Llama: lm_head(norm(h)); BERT
masked LM: the cls head; jtc.model.head.Head). Whole-vocabulary logits exist only for one chunk
of rows at a time (at most jtc.model.head.DECODE_BYTES), so memory stays bounded for any
vocabulary. What is kept of the final prediction per position is O(width): enough to score any
number of layers and methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa
import torch

from jtc.model.head import Head

SCORE_COLUMNS = (
    "top1_id",  # the shortcut's top-1 token; -1 where the state overflowed (inf or NaN)
    "top1_prob",  # its probability under the shortcut's distribution
    "top2_prob",  # the runner-up's probability (confidence = top1_prob - top2_prob)
    "final_rank",  # rank of top1_id in the final prediction (1-based), 0 if beyond max k
    "surprisal",  # -ln p_final(top1_id), nats
    "kl",  # KL(final || shortcut), nats
    "cross_entropy",  # -ln p_shortcut(gold token), nats; NaN where there is no gold token
)
# the shortlist exit check's (jtc.evaluation.shortlist), where scoring is given one
SHORTLIST_COLUMNS = (
    "shortlist_top1_prob",  # p̂ of the shortlist's prediction
    "shortlist_top2_prob",  # p̂ of its runner-up (the check's confidence is their difference)
    "shortlist_final_rank",  # rank of its prediction in the final prediction, 0 beyond max k
)
_INTEGER = ("top1_id", "final_rank", "shortlist_final_rank")  # the other columns are float64


class ShortlistCheck(Protocol):
    """What scoring asks of a shortlist exit check (jtc.evaluation.shortlist.Shortlist)."""

    def check(
        self, features: torch.Tensor, exact: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


@dataclass
class Reference:
    """The model's own final prediction at each position, in O(width) per position."""

    features: torch.Tensor  # (n, w) transform(h_L)
    log_norm: torch.Tensor  # (n,) log-sum-exp of the final logits
    top_ids: torch.Tensor  # (n, k) the final top-k tokens, best first
    expected_weight: torch.Tensor  # (n, w) sum_v p_final(v) W_v
    expected_bias: torch.Tensor  # (n,) sum_v p_final(v) b_v
    neg_entropy: torch.Tensor  # (n,) sum_v p_final(v) ln p_final(v)


def float_rows(states: np.ndarray, rows: slice) -> torch.Tensor:
    """A float32 tensor of some rows (a copy: stored states may be read-only Arrow memory)."""
    return torch.tensor(states[rows], dtype=torch.float32)


def row_chunks(n: int, size: int):
    """Slices of at most `size` rows covering rows 0..n-1, in order (the chunks decoding uses,
    of the head's rows_per_chunk)."""
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


@torch.inference_mode()
def final_reference(head: Head, final_states: np.ndarray, k: int) -> Reference:
    """Decode h_L chunk by chunk and keep what scoring needs."""
    n = len(final_states)
    parts: dict[str, list[torch.Tensor]] = {f: [] for f in Reference.__dataclass_fields__}
    for rows in row_chunks(n, head.rows_per_chunk()):
        feats = head.features(float_rows(final_states, rows))
        logits = head.unembed(feats)
        log_probs = torch.log_softmax(logits, dim=1)
        probs = log_probs.exp()
        parts["features"].append(feats)
        parts["log_norm"].append(torch.logsumexp(logits, dim=1))
        parts["top_ids"].append(torch.topk(logits, min(k, head.vocab_size), dim=1).indices)
        parts["expected_weight"].append(probs @ head.weight)
        parts["expected_bias"].append(
            probs @ head.bias if head.bias is not None else probs.new_zeros(len(probs))
        )
        parts["neg_entropy"].append((probs * log_probs).sum(1))
    return Reference(**{f: torch.cat(v) for f, v in parts.items()})


@torch.inference_mode()
def score(
    head: Head,
    reference: Reference,
    states: np.ndarray,
    gold_ids: np.ndarray,
    shortlist: ShortlistCheck | None = None,
) -> dict[str, np.ndarray]:
    """Per-position scores (SCORE_COLUMNS, and SHORTLIST_COLUMNS with a `shortlist` check) of
    D(states) against the final prediction.

    `states` are already mapped to the last layer; `gold_ids` is -1 where there is no gold token.
    Chunks are the same as final_reference's, so states equal to h_L give bit-identical logits.
    A state whose logits are not finite (a run that overflowed) predicts nothing: top1_id -1, a
    miss at every k (final_rank 0), and NaN for the probabilities, surprisal, KL and
    cross-entropy, which are then averaged over the other positions.
    """
    n = len(states)
    columns = SCORE_COLUMNS + (SHORTLIST_COLUMNS if shortlist is not None else ())
    out = {c: np.empty(n, dtype=np.int64 if c in _INTEGER else np.float64) for c in columns}
    gold_all = torch.tensor(gold_ids, dtype=torch.long)
    for rows in row_chunks(n, head.rows_per_chunk()):
        feats = head.features(float_rows(states, rows))
        logits = head.unembed(feats)
        top_vals, top_ids = torch.topk(logits, 2, dim=1)
        values = {}
        if shortlist is not None:  # before the logits are overwritten below
            values.update(_shortlist_scores(shortlist, feats, logits, reference.top_ids[rows]))
        # every logit finite <=> the largest and the smallest are (a NaN wins both): two
        # reductions instead of a whole-vocabulary isfinite mask
        finite = torch.isfinite(top_vals[:, 0]) & torch.isfinite(logits.amin(1))
        gold = gold_all[rows].to(head.device)
        has_gold = gold >= 0
        gold_logit = logits.gather(1, gold.clamp(min=0)[:, None])[:, 0]
        if head.softcap is None:  # E_final[logit], linear in the features: O(width) a row
            expected_logit = (reference.expected_weight[rows] * feats).sum(1)
            expected_logit = expected_logit + reference.expected_bias[rows]
        else:  # soft-capped logits are not: the final distribution decoded again
            final = torch.softmax(head.unembed(reference.features[rows]), dim=1)
            expected_logit = (final * logits).sum(1)
        # log-sum-exp in place: the logits are not needed after this
        log_norm = top_vals[:, 0] + logits.sub_(top_vals[:, :1]).exp_().sum(1).log_()
        top1 = top_ids[:, 0]
        final_top1_logit = head.token_logit(reference.features[rows], top1)
        kl = reference.neg_entropy[rows] - (expected_logit - log_norm)
        values |= {
            "top1_id": top1,
            "top1_prob": (top_vals[:, 0] - log_norm).exp(),
            "top2_prob": (top_vals[:, 1] - log_norm).exp(),
            "final_rank": _final_rank(reference.top_ids[rows], top1),
            "surprisal": reference.log_norm[rows] - final_top1_logit,
            "kl": kl.clamp(min=0.0),
            "cross_entropy": torch.where(has_gold, log_norm - gold_logit, torch.nan),
        }
        for column, value in values.items():
            if column == "top1_id":
                value = torch.where(finite, value, -1)
            elif column in _INTEGER:
                value = torch.where(finite, value, 0)
            else:
                value = torch.where(finite, value, torch.nan)
            out[column][rows] = value.cpu().numpy()
    return out


def _final_rank(final_top: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The 1-based rank of each token among the final top-k tokens (n, k), 0 if absent."""
    matches = final_top == tokens[:, None]
    return torch.where(matches.any(1), matches.int().argmax(1) + 1, 0)


def _shortlist_scores(
    shortlist: ShortlistCheck, features: torch.Tensor, logits: torch.Tensor, final_top: torch.Tensor
) -> dict[str, torch.Tensor]:
    """SHORTLIST_COLUMNS of a chunk: the candidates' exact logits read from the whole-vocabulary
    `logits` that scoring computes anyway (the same values a deployed check computes for them
    alone)."""
    prediction, first, second = shortlist.check(features, logits)
    return {
        "shortlist_top1_prob": first,
        "shortlist_top2_prob": second,
        "shortlist_final_rank": _final_rank(final_top, prediction),
    }


def score_table(method: str, layer: int, sentence_ids: np.ndarray, scores: dict) -> pa.Table:
    """One row per position: method, layer, sentence_id and the SCORE_COLUMNS of `score`."""
    n = len(sentence_ids)
    return pa.table(
        {
            "method": pa.array([method] * n, pa.string()),
            "layer": pa.array(np.full(n, layer), pa.int32()),
            "sentence_id": pa.array(sentence_ids, pa.int64()),
            **scores,
        }
    )
