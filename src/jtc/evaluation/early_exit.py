"""Early exit with shortcuts (docs/method.md, "Early exit").

At each layer l >= min_layer the state is mapped to the last layer and decoded; the confidence
is the top-1 minus the top-2 probability. A token exits at the first layer whose confidence
exceeds `lambda_weight·λ + decay_weight·exp(−τ·t/N)` (t its 0-based position, N the mean
prefix length t+1 over the validation set); if none does, the model runs to the last layer L.

The confidences do not depend on λ, so they are computed once (decode_predictions' tables) and
a whole λ sweep is one vectorised pass over them (`sweep`). `run_with_early_exit` is the plain
implementation: it runs a model block by block and stops at the first layer that passes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jtc.settings import EarlyExitSettings

if TYPE_CHECKING:  # torch only where the model runs: the sweep stage is numpy
    from torch import nn

    from jtc.model.adapters import Adapter
    from jtc.model.head import Head

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExitRule:
    """The exit threshold lambda_weight·λ + decay_weight·exp(−tau·t/N), from min_layer on."""

    tau: float
    lambda_weight: float
    decay_weight: float
    min_layer: int

    @classmethod
    def of(cls, settings: EarlyExitSettings) -> ExitRule:
        return cls(settings.tau, settings.lambda_weight, settings.decay_weight, settings.min_layer)

    def thresholds(self, lambdas: np.ndarray, positions: np.ndarray, mean_length: float):
        """(len(lambdas), len(positions)) thresholds."""
        lambdas = np.asarray(lambdas, dtype=np.float64)
        decay = np.exp(-self.tau * np.asarray(positions, dtype=np.float64) / mean_length)
        return self.lambda_weight * lambdas[:, None] + self.decay_weight * decay[None, :]


def mean_prefix_length(positions: np.ndarray) -> float:
    """N: the mean number of tokens up to and including the position (t + 1)."""
    return float(np.mean(np.asarray(positions, dtype=np.float64) + 1.0))


def _check_min_layer(min_layer: int, last: int) -> None:
    if not 1 <= min_layer <= last:
        raise ValueError(f"min_layer {min_layer} is outside 1..{last}")


def check_layers(min_layer: int, last: int, every: int = 1) -> np.ndarray:
    """The layers a token's prediction is checked at: min_layer, min_layer + every, ... below
    the last layer (at the last layer the model's own prediction is read, unchecked)."""
    _check_min_layer(min_layer, last)
    if every < 1:
        raise ValueError(f"check_every {every} is not a positive number of layers")
    return np.arange(min_layer, last, every)


def exit_layers(
    confidence: np.ndarray, thresholds: np.ndarray, min_layer: int, every: int = 1
) -> np.ndarray:
    """Exit layer (m, n) for confidences (n, L+1) over layers 0..L and thresholds (m, n).

    The first checked layer (check_layers) whose confidence exceeds the threshold, else L. With
    the running maximum of the checked confidences, that is the checked layer whose index is
    the number of running maxima not above the threshold: one comparison per (λ, token, check),
    no loop."""
    last = confidence.shape[1] - 1
    checked = check_layers(min_layer, last, every)
    outcomes = np.append(checked, last)
    running = np.maximum.accumulate(confidence[:, checked], axis=1)
    below = (running[None, :, :] <= thresholds[:, :, None]).sum(axis=2)
    return outcomes[below]


CHECK_COLUMNS = {  # the score columns each check's confidence and prediction come from
    "full": ("top1_prob", "top2_prob", "final_rank"),
    "shortlist": ("shortlist_top1_prob", "shortlist_top2_prob", "shortlist_final_rank"),
}


def checks_in(scores: pa.Table) -> list[str]:
    """The checks whose columns a method's scores have ("full" always)."""
    names = set(scores.column_names)
    return [check for check, columns in CHECK_COLUMNS.items() if set(columns) <= names]


def layer_arrays(
    scores: pa.Table, check: str = "full"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sentence ids (n,), confidence (n, L+1), correct (n, L+1)) from one method's scores, of
    one check (CHECK_COLUMNS). A token that reaches the last layer is decoded by the whole head
    whatever the check, so the last layer's hits are the full check's."""
    first, second, rank = CHECK_COLUMNS[check]
    layers = sorted(set(scores.column("layer").to_pylist()))
    if layers != list(range(len(layers))):
        raise ValueError(f"scores do not cover layers 0..{len(layers) - 1}")
    ids, confidence, correct = None, [], []
    for layer in layers:
        rows = scores.filter(pc.equal(scores.column("layer"), layer))
        layer_ids = rows.column("sentence_id").to_numpy()
        if ids is None:
            ids = layer_ids
        elif not np.array_equal(ids, layer_ids):
            raise ValueError(f"layer {layer} scores are not on the same positions as layer 0")
        top1 = rows.column(first).to_numpy()
        confidence.append(top1 - rows.column(second).to_numpy())
        hit = rank if layer < layers[-1] else CHECK_COLUMNS["full"][2]
        correct.append(rows.column(hit).to_numpy() == 1)
    return ids, np.stack(confidence, axis=1), np.stack(correct, axis=1)


@dataclass
class Sweep:
    lambdas: np.ndarray  # (m,)
    mean_layers: np.ndarray  # (m,) blocks run per token
    accuracy: np.ndarray  # (m,)
    early_fraction: np.ndarray  # (m,)
    checks: np.ndarray  # (m,) confidence checks (a map and a decode each) per token
    context: np.ndarray  # (m,) sum over blocks run of the prefix length t + 1, per token


def sweep(
    confidence: np.ndarray,
    correct: np.ndarray,
    positions: np.ndarray,
    lambdas: np.ndarray,
    rule: ExitRule,
    mean_length: float | None = None,
    every: int = 1,
) -> Sweep:
    """Mean layers run, checks made and Precision@1 against the full model, for every λ at once,
    checking every `every`-th layer from min_layer on (check_layers).

    As λ grows, a token's exit moves to the next checked layer (or to L) each time the threshold
    passes one of its running-maximum confidences, i.e. at λ = (running − offset) /
    lambda_weight. Sorting those n·(checks) events once and counting them gives every λ's
    totals by binary search: a 100-value sweep costs about what a 1-value sweep does."""
    lambdas = np.asarray(lambdas, dtype=np.float64)
    n, last = len(confidence), confidence.shape[1] - 1
    checked = check_layers(rule.min_layer, last, every)
    prefix = np.asarray(positions, dtype=np.float64) + 1.0
    if len(checked) == 0:  # min_layer = L: nothing is checked, every token runs to the end
        m = len(lambdas)
        return Sweep(
            lambdas=lambdas,
            mean_layers=np.full(m, float(last)),
            accuracy=np.full(m, correct[:, last].mean()),
            early_fraction=np.zeros(m),
            checks=np.zeros(m),
            context=np.full(m, last * prefix.mean()),
        )
    outcomes = np.append(checked, last)  # where a token stops, by number of events passed
    length = mean_prefix_length(positions) if mean_length is None else mean_length
    offset = rule.thresholds(np.zeros(1), positions, length)[0]  # (n,) the λ-free part
    running = np.maximum.accumulate(confidence[:, checked], axis=1)
    events = ((running - offset[:, None]) / rule.lambda_weight).ravel()
    hit = correct[:, outcomes].astype(np.float64)
    steps = np.diff(outcomes).astype(np.float64)  # layers added by each event
    # each event's effect: on hits, layers, checks (none for the move to L) and context
    effects = {
        "hit": (hit[:, 1:] - hit[:, :-1]).ravel(),
        "layers": np.broadcast_to(steps, running.shape).ravel(),
        "checks": np.broadcast_to((np.arange(1, len(checked) + 1) < len(checked)).astype(float),
                                  running.shape).ravel(),
        "context": (prefix[:, None] * steps[None, :]).ravel(),
    }  # fmt: skip
    order = np.argsort(events, kind="stable")
    passed = np.searchsorted(events[order], lambdas, side="right")  # events with λ at or past
    total = {
        name: np.concatenate([[0.0], np.cumsum(effect[order])])[passed]
        for name, effect in effects.items()
    }
    # a token runs to the end once its last event has passed
    finals = np.sort(events.reshape(n, -1)[:, -1])
    first = float(outcomes[0])
    return Sweep(
        lambdas=lambdas,
        mean_layers=first + total["layers"] / n,
        accuracy=(hit[:, 0].sum() + total["hit"]) / n,
        early_fraction=1.0 - np.searchsorted(finals, lambdas, side="right") / n,
        checks=1.0 + total["checks"] / n,
        context=(first * prefix.sum() + total["context"]) / n,
    )


def fold_of(sentence_ids: np.ndarray, seed: int, folds: int) -> np.ndarray:
    """A fold 0..folds-1 per sentence, from a hash of (seed, sentence id): the same sentence
    is always in the same fold."""
    with np.errstate(over="ignore"):  # splitmix64: wraps around by design
        x = np.asarray(sentence_ids, dtype=np.uint64)
        x = x + np.uint64(seed % 2**64) * np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(folds)).astype(np.int64)


@dataclass
class Arrays:
    """One method's per-position confidences (n, L+1) and hits (n, L+1) on the validation
    positions (t, sentence ids)."""

    confidence: np.ndarray
    correct: np.ndarray
    positions: np.ndarray
    sentence_ids: np.ndarray


def fewest_layers(result: Sweep, target: float) -> int | None:
    ok = np.flatnonzero(result.accuracy >= target)
    return int(ok[np.argmin(result.mean_layers[ok])]) if len(ok) else None


def held_out(
    data: Arrays,
    lambdas: np.ndarray,
    rule: ExitRule,
    target: float,
    every: int,
    folds: int,
    seed: int,
) -> Sweep:
    """The exit rule with λ chosen without the positions it is scored on: for each fold of the
    validation positions (fold_of), the λ with the fewest mean layers that reaches `target` on
    the other folds; each fold scored at its own λ, and the folds pooled. Its `lambdas` holds
    the λ of each fold."""
    last = data.confidence.shape[1] - 1
    length = mean_prefix_length(data.positions)  # N of the rule: over all validation positions
    fold = fold_of(data.sentence_ids, seed, folds)
    checked = check_layers(rule.min_layer, last, every)
    layers = np.empty(len(fold), dtype=np.int64)
    chosen = []
    for f in range(folds):
        calibrate, score = fold != f, fold == f
        calibration = sweep(
            data.confidence[calibrate],
            data.correct[calibrate],
            data.positions[calibrate],
            lambdas,
            rule,
            length,
            every,
        )
        best = fewest_layers(calibration, target)
        lam = lambdas[best] if best is not None else np.inf  # none reaches it: never exit
        chosen.append(float(lam))
        thresholds = rule.thresholds(np.array([lam]), data.positions[score], length)
        layers[score] = exit_layers(data.confidence[score], thresholds, rule.min_layer, every)[0]
    checks = np.minimum(np.searchsorted(checked, layers, side="left") + 1, len(checked))
    return Sweep(
        lambdas=np.array(chosen),
        mean_layers=np.array([layers.mean()]),
        accuracy=np.array([data.correct[np.arange(len(layers)), layers].mean()]),
        early_fraction=np.array([np.mean(layers < last)]),
        checks=np.array([checks.mean()]),
        context=np.array([np.mean(layers * (data.positions + 1.0))]),
    )


# --- the plain implementation: run the model and stop -----------------------------------


class _Exit(Exception):
    pass


def run_with_early_exit(
    model: nn.Module,
    adapter: Adapter,
    head: Head,
    to_last: Callable[[int, np.ndarray], np.ndarray],
    input_ids: np.ndarray,
    position: int,
    threshold: float,
    min_layer: int = 1,
) -> tuple[int, int]:
    """(exit layer, predicted token) for one sequence, running the blocks one after another and
    stopping the forward pass at the first layer whose mapped prediction is confident enough.

    `to_last(l, h)` maps a state (1, d) of layer l to the last layer (a shortcut method)."""
    import torch

    with torch.inference_mode():
        return _run_with_early_exit(
            model, adapter, head, to_last, input_ids, position, threshold, min_layer
        )


def _run_with_early_exit(model, adapter, head, to_last, input_ids, position, threshold, min_layer):
    import torch

    blocks = adapter.blocks(model)
    last = len(blocks)
    decision: dict[str, int] = {}

    def make_hook(layer: int):
        def hook(module, args, output):
            if not min_layer <= layer < last:
                return
            hidden = output[0] if isinstance(output, tuple) else output
            state = hidden[0, position][None].float().cpu().numpy()
            logits = head.logits(torch.tensor(to_last(layer, state), dtype=torch.float32))
            top = torch.softmax(logits, dim=1).topk(2, dim=1)
            if float(top.values[0, 0] - top.values[0, 1]) > threshold:
                decision.update(layer=layer, token=int(top.indices[0, 0]))
                raise _Exit

        return hook

    def keep_last(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        decision["final_state"] = hidden[0, position][None]

    handles = [block.register_forward_hook(make_hook(i)) for i, block in enumerate(blocks, 1)]
    handles.append(blocks[-1].register_forward_hook(keep_last))
    try:
        ids = torch.as_tensor(input_ids, device=next(model.parameters()).device)[None]
        adapter.backbone(model)(input_ids=ids)
    except _Exit:
        return decision["layer"], decision["token"]
    finally:
        for handle in handles:
            handle.remove()
    token = int(head.logits(decision["final_state"]).argmax(dim=1)[0])
    return last, token
