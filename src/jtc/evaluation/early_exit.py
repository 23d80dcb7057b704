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

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jtc.files.io import CorruptFileError, rows_table

if TYPE_CHECKING:  # torch only where the model runs: the sweep stage is numpy
    from torch import nn

    from jtc.model.adapters import Adapter
    from jtc.model.head import Head

log = logging.getLogger(__name__)

# λ from -0.12 (threshold below 0: every token exits at min_layer) to 1.12 (above 1: none does)
DEFAULT_LAMBDAS = tuple(round(-0.12 + 0.01 * i, 2) for i in range(125))
SWEEP_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "method": pa.string(),
    "policy": pa.string(),  # "confidence" (the exit rule, per λ) or "fixed" (every token at l)
    # how the confidence is computed: "full" (the whole vocabulary decoded) or "shortlist"
    # (jtc.evaluation.shortlist: exact logits of candidates picked by a low-rank head); null when
    # fixed
    "check": pa.string(),
    "check_every": pa.int32(),  # confidence checked at every k-th layer from min_layer
    "lambda": pa.float64(),  # null for fixed exits
    "exit_layer": pa.int32(),  # null for confidence exits
    "mean_layers": pa.float64(),
    "accuracy": pa.float64(),  # Precision@1 against the full model
    "early_fraction": pa.float64(),  # share of tokens that exit before the last layer
    "checks": pa.float64(),  # confidence checks per token (a map and a decode each)
    "macs_percent": pa.float64(),  # multiply-adds per token, % of the full model's (ExitCost)
}
SAVINGS_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "method": pa.string(),
    # "in_sample": λ chosen on the positions it is scored on (the paper's numbers);
    # "held_out": λ chosen on the other folds of the validation positions, scored on each fold
    "selection": pa.string(),
    "check": pa.string(),
    "check_every": pa.int32(),
    "target": pa.float64(),
    "lambda": pa.float64(),  # null for held_out (one λ per fold)
    "mean_layers": pa.float64(),
    "accuracy": pa.float64(),  # reached (held_out: may fall short of the target)
    "layers_saved": pa.float64(),
    "saved_percent": pa.float64(),  # of the L layers
    "beyond_id_percent": pa.float64(),  # saved_percent minus id's; null without id
    "macs_percent": pa.float64(),  # multiply-adds per token, % of the full model's
    "macs_saved_percent": pa.float64(),  # 100 − macs_percent (negative: exiting costs more)
}


@dataclass(frozen=True)
class ExitRule:
    tau: float = 4.0
    lambda_weight: float = 0.9
    decay_weight: float = 0.1
    min_layer: int = 1

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


def shortlist_macs(info: dict, rank: int, candidates: int) -> float:
    """Multiply-adds of one shortlist check (jtc.evaluation.shortlist) of a cached model (its
    info.json):
    k·w + V·k + c·w, with k and c capped as the check caps them."""
    width, vocab = info["hidden_size"], info["vocab_size"]
    k, c = min(rank, width), min(candidates, vocab)
    return float(k * width + vocab * k + c * width)


@dataclass(frozen=True)
class ExitCost:
    """Multiply-adds per token of what early exit runs: a block (its weights; attention over the
    prefix adds `attention_per_token` per prefix token), one shortcut map, one decode by the head
    (vocabulary × width) and one check's decode (`check`: the whole head for the full check, less
    for the shortlist check)."""

    block: float
    attention_per_token: float
    head: float
    shortcut: float
    check: float

    @classmethod
    def of(cls, info: dict, map_parameters: float, check: float | None = None) -> ExitCost:
        """From a cached model's info.json, the parameters of one of a method's maps and the
        multiply-adds of a check's decode (None: the full check's, the whole head)."""
        layers, width = info["num_layers"], info["hidden_size"]
        head = float(info["vocab_size"]) * width
        return cls(
            block=info["non_embedding_parameters"] / layers,
            attention_per_token=2.0 * width,  # q·k and the weighted sum of v, per prefix token
            head=head,
            shortcut=float(map_parameters),
            check=head if check is None else float(check),
        )

    def per_token(self, result: Sweep) -> np.ndarray:
        """Mean multiply-adds per token of each λ: blocks run, checks (a map and a check's
        decode each; an exiting token takes the check's prediction), and the whole head's decode
        of the tokens that run to the end."""
        blocks = result.mean_layers * self.block + result.context * self.attention_per_token
        checks = result.checks * (self.shortcut + self.check)
        return blocks + checks + (1.0 - result.early_fraction) * self.head

    def fixed_exit(self, layer: int, positions: np.ndarray, last: int) -> float:
        """Mean multiply-adds per token when every token stops at `layer`: its blocks, then one
        map and decode there (the model's own decode at the last layer)."""
        prefix = float(np.mean(np.asarray(positions, dtype=np.float64) + 1.0))
        blocks = layer * (self.block + prefix * self.attention_per_token)
        return blocks + self.head + (self.shortcut if layer < last else 0.0)

    def full(self, positions: np.ndarray, last: int) -> float:
        """Mean multiply-adds per token of the whole model and its decode, no checks."""
        prefix = float(np.mean(np.asarray(positions, dtype=np.float64) + 1.0))
        return last * (self.block + prefix * self.attention_per_token) + self.head


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


def _fewest_layers(result: Sweep, target: float) -> int | None:
    ok = np.flatnonzero(result.accuracy >= target)
    return int(ok[np.argmin(result.mean_layers[ok])]) if len(ok) else None


def _at(result: Sweep, i: int) -> Sweep:
    return Sweep(*(np.asarray(getattr(result, f))[i : i + 1] for f in Sweep.__dataclass_fields__))


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
        best = _fewest_layers(calibration, target)
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


def exit_tables(
    scores: dict[str, pa.Table],
    positions: pa.Table,
    last: int,
    rule: ExitRule,
    lambdas: np.ndarray,
    targets: list[float],
    costs: dict[str, ExitCost],
    *,
    model: str,
    corpus: str,
    check_every: tuple[int, ...] = (1,),
    folds: int = 2,
    seed: int = 0,
    shortlist: float | None = None,
) -> tuple[pa.Table, pa.Table]:
    """(the λ sweep and fixed exits of every method, SWEEP_COLUMNS; the fewest layers at each
    target accuracy, in sample and held out, SAVINGS_COLUMNS) from each method's per-position
    scores on the validation `positions`, for each check the scores hold (checks_in) and each
    check interval; `costs` per method (the full check's), `shortlist` the multiply-adds of one
    shortlist check (shortlist_macs), needed where the scores hold that check."""
    common = {"model": model, "corpus": corpus}
    t = positions.column("position").to_numpy()
    rows, saved = [], []
    for method, table in sorted(scores.items()):
        arrays = {check: layer_arrays(table, check) for check in checks_in(table)}
        for check, (ids, confidence, correct) in arrays.items():
            if check == "shortlist" and shortlist is None:
                raise ValueError(f"{method}'s scores hold a shortlist check, but no cost for it")
            if not np.array_equal(ids, positions.column("sentence_id").to_numpy()):
                raise CorruptFileError(
                    f"{method}'s scores: positions differ from the validation states"
                )
            data = Arrays(confidence, correct, t, ids)
            cost = costs[method]
            if check == "shortlist":
                cost = dataclasses.replace(cost, check=shortlist)
            priced = (cost, cost.full(t, last), last)
            key = {**common, "method": method, "check": check}
            for every in check_every:
                result = sweep(confidence, correct, t, lambdas, rule, every=every)
                rows += _sweep_rows(key, every, result, priced)
                for target in targets:
                    best = _fewest_layers(result, target)
                    if best is not None:
                        picked = _at(result, best)
                        saved.append(_saving(key, "in_sample", every, target, picked, priced))
                    outside = held_out(data, lambdas, rule, target, every, folds, seed)
                    saved.append(_saving(key, "held_out", every, target, outside, priced))
        _, _, correct = arrays["full"]
        cost = costs[method]
        for layer in range(rule.min_layer, last + 1):  # every token at one layer: no checks
            rows.append(
                {
                    **common,
                    "method": method,
                    "policy": "fixed",
                    "exit_layer": layer,
                    "mean_layers": float(layer),
                    "accuracy": float(correct[:, layer].mean()),
                    "early_fraction": float(layer < last),
                    "checks": 0.0,
                    "macs_percent": 100.0 * cost.fixed_exit(layer, t, last) / cost.full(t, last),
                }
            )
    same = ("selection", "check", "check_every", "target")
    for row in saved:
        base = next(
            (r for r in saved if r["method"] == "id" and all(r[k] == row[k] for k in same)),
            None,
        )
        row["beyond_id_percent"] = (
            row["saved_percent"] - base["saved_percent"] if base is not None else None
        )
    return rows_table(rows, SWEEP_COLUMNS), rows_table(saved, SAVINGS_COLUMNS)


def _sweep_rows(key: dict, every: int, result: Sweep, cost) -> list[dict]:
    """The sweep table's rows of one method, check and interval: one per λ."""
    exit_cost, full, _ = cost
    macs = 100.0 * exit_cost.per_token(result) / full
    log.info(
        "%s, %s check every %d: %d λ values, accuracy %.3f..%.3f",
        key["method"],
        key["check"],
        every,
        len(result.lambdas),
        result.accuracy.min(),
        result.accuracy.max(),
    )
    return [
        {
            **key,
            "policy": "confidence",
            "check_every": every,
            "lambda": float(lam),
            "mean_layers": float(result.mean_layers[i]),
            "accuracy": float(result.accuracy[i]),
            "early_fraction": float(result.early_fraction[i]),
            "checks": float(result.checks[i]),
            "macs_percent": float(macs[i]),
        }
        for i, lam in enumerate(result.lambdas)
    ]


def _saving(key: dict, selection: str, every: int, target: float, result: Sweep, cost) -> dict:
    """A savings row from a one-λ result; `key`: model, corpus, method and check; `cost`: (the
    ExitCost, the full model's multiply-adds, the last layer L)."""
    exit_cost, full, last = cost
    macs = 100.0 * float(exit_cost.per_token(result)[0]) / full
    saved = last - float(result.mean_layers[0])
    return {
        **key,
        "selection": selection,
        "check_every": every,
        "target": target,
        "lambda": float(result.lambdas[0]) if selection == "in_sample" else None,
        "mean_layers": float(result.mean_layers[0]),
        "accuracy": float(result.accuracy[0]),
        "layers_saved": saved,
        "saved_percent": 100.0 * saved / last,
        "macs_percent": macs,
        "macs_saved_percent": 100.0 - macs,
    }


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
