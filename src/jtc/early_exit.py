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

from .io import CorruptFileError, rows_table

if TYPE_CHECKING:  # torch only where the model runs: the sweep stage is numpy
    from torch import nn

    from .adapters import Adapter
    from .decode import Head

log = logging.getLogger(__name__)

# λ from -0.12 (threshold below 0: every token exits at min_layer) to 1.12 (above 1: none does)
DEFAULT_LAMBDAS = tuple(round(-0.12 + 0.01 * i, 2) for i in range(125))
SWEEP_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "method": pa.string(),
    "policy": pa.string(),  # "confidence" (the exit rule, per λ) or "fixed" (every token at l)
    "lambda": pa.float64(),  # null for fixed exits
    "exit_layer": pa.int32(),  # null for confidence exits
    "mean_layers": pa.float64(),
    "accuracy": pa.float64(),  # Precision@1 against the full model
    "early_fraction": pa.float64(),  # share of tokens that exit before the last layer
}
SAVINGS_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "method": pa.string(),
    "target": pa.float64(),
    "lambda": pa.float64(),
    "mean_layers": pa.float64(),
    "accuracy": pa.float64(),
    "layers_saved": pa.float64(),
    "saved_percent": pa.float64(),  # of the L layers
    "beyond_id_percent": pa.float64(),  # saved_percent minus id's; null without id
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


def exit_layers(confidence: np.ndarray, thresholds: np.ndarray, min_layer: int) -> np.ndarray:
    """Exit layer (m, n) for confidences (n, L+1) over layers 0..L and thresholds (m, n).

    The first layer l in [min_layer, L) whose confidence exceeds the threshold, else L. With the
    running maximum of the confidences from min_layer on, that is min_layer plus the number of
    running maxima not above the threshold: one comparison per (λ, token, layer), no loop."""
    last = confidence.shape[1] - 1
    _check_min_layer(min_layer, last)
    window = confidence[:, min_layer:last]
    running = np.maximum.accumulate(window, axis=1)
    below = (running[None, :, :] <= thresholds[:, :, None]).sum(axis=2)
    return min_layer + below


def layer_arrays(scores: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sentence ids (n,), confidence (n, L+1), correct (n, L+1)) from one method's scores."""
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
        top1 = rows.column("top1_prob").to_numpy()
        confidence.append(top1 - rows.column("top2_prob").to_numpy())
        correct.append(rows.column("final_rank").to_numpy() == 1)
    return ids, np.stack(confidence, axis=1), np.stack(correct, axis=1)


@dataclass
class Sweep:
    lambdas: np.ndarray  # (m,)
    mean_layers: np.ndarray  # (m,)
    accuracy: np.ndarray  # (m,)
    early_fraction: np.ndarray  # (m,)


def sweep(
    confidence: np.ndarray,
    correct: np.ndarray,
    positions: np.ndarray,
    lambdas: np.ndarray,
    rule: ExitRule,
    mean_length: float | None = None,
) -> Sweep:
    """Mean layers run and Precision@1 against the full model, for every λ at once.

    As λ grows, a token's exit moves one layer later each time the threshold passes one of its
    running-maximum confidences, i.e. at λ = (running − offset) / lambda_weight. Sorting those
    n·(L − min_layer) events once and counting them gives every λ's totals by binary search:
    a 100-value sweep costs about what a 1-value sweep does."""
    lambdas = np.asarray(lambdas, dtype=np.float64)
    n, last = len(confidence), confidence.shape[1] - 1
    low = rule.min_layer
    _check_min_layer(low, last)
    length = mean_prefix_length(positions) if mean_length is None else mean_length
    offset = rule.thresholds(np.zeros(1), positions, length)[0]  # (n,) the λ-free part
    running = np.maximum.accumulate(confidence[:, low:last], axis=1)
    events = ((running - offset[:, None]) / rule.lambda_weight).ravel()
    hit = correct.astype(np.float64)
    change = (hit[:, low + 1 :] - hit[:, low:last]).ravel()  # the event's effect on accuracy
    order = np.argsort(events, kind="stable")
    passed = np.searchsorted(events[order], lambdas, side="right")  # events with λ at or past
    gained = np.concatenate([[0.0], np.cumsum(change[order])])[passed]
    # a token runs to the end once its last event has passed
    finals = np.sort(events.reshape(n, -1)[:, -1]) if last > low else np.full(n, -np.inf)
    return Sweep(
        lambdas=lambdas,
        mean_layers=low + passed / n,
        accuracy=(hit[:, low].sum() + gained) / n,
        early_fraction=1.0 - np.searchsorted(finals, lambdas, side="right") / n,
    )


def exit_tables(
    scores: dict[str, pa.Table],
    positions: pa.Table,
    last: int,
    rule: ExitRule,
    lambdas: np.ndarray,
    targets: list[float],
    *,
    model: str,
    corpus: str,
) -> tuple[pa.Table, pa.Table]:
    """(the λ sweep and fixed exits of every method, SWEEP_COLUMNS; the fewest layers at each
    target accuracy, SAVINGS_COLUMNS) from each method's per-position scores on the validation
    `positions`."""
    common = {"model": model, "corpus": corpus}
    t = positions.column("position").to_numpy()
    sweeps, rows = {}, []
    for method, table in sorted(scores.items()):
        ids, confidence, correct = layer_arrays(table)
        if not np.array_equal(ids, positions.column("sentence_id").to_numpy()):
            raise CorruptFileError(
                f"{method}'s scores: positions differ from the validation states"
            )
        result = sweeps[method] = sweep(confidence, correct, t, lambdas, rule)
        for i, lam in enumerate(result.lambdas):
            rows.append(
                {
                    **common,
                    "method": method,
                    "policy": "confidence",
                    "lambda": float(lam),
                    "mean_layers": float(result.mean_layers[i]),
                    "accuracy": float(result.accuracy[i]),
                    "early_fraction": float(result.early_fraction[i]),
                }
            )
        for layer in range(rule.min_layer, last + 1):
            rows.append(
                {
                    **common,
                    "method": method,
                    "policy": "fixed",
                    "exit_layer": layer,
                    "mean_layers": float(layer),
                    "accuracy": float(correct[:, layer].mean()),
                    "early_fraction": float(layer < last),
                }
            )
        log.info(
            "%s: %d λ values, accuracy %.3f..%.3f",
            method,
            len(lambdas),
            result.accuracy.min(),
            result.accuracy.max(),
        )
    saved = [{**common, **row} for row in savings(sweeps, last, targets)]
    return rows_table(rows, SWEEP_COLUMNS), rows_table(saved, SAVINGS_COLUMNS)


def savings(sweeps: dict[str, Sweep], last: int, targets: list[float]) -> list[dict]:
    """Per method and target accuracy: the fewest mean layers among the λ that reach it."""
    rows = []
    for target in targets:
        found = {}
        for method, result in sweeps.items():
            ok = np.flatnonzero(result.accuracy >= target)
            if len(ok) == 0:  # cannot happen with a λ that never exits; kept for odd grids
                continue
            best = ok[np.argmin(result.mean_layers[ok])]
            saved = last - result.mean_layers[best]
            found[method] = {
                "method": method,
                "target": target,
                "lambda": float(result.lambdas[best]),
                "mean_layers": float(result.mean_layers[best]),
                "accuracy": float(result.accuracy[best]),
                "layers_saved": float(saved),
                "saved_percent": float(100.0 * saved / last),
            }
        for row in found.values():
            base = found.get("id")
            row["beyond_id_percent"] = (
                row["saved_percent"] - base["saved_percent"] if base is not None else None
            )
            rows.append(row)
    return rows


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
