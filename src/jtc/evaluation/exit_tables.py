"""The early-exit tables a run writes (docs/method.md, "Early exit"): the λ sweep and the fixed
exits of every method, and the fewest layers and multiply-adds at each target accuracy with λ
chosen in sample and held out, each priced in multiply-adds per token (ExitCost)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from jtc.evaluation.early_exit import (
    Arrays,
    ExitRule,
    Sweep,
    checks_in,
    fewest_layers,
    held_out,
    layer_arrays,
    sweep,
)
from jtc.files.io import CorruptFileError, rows_table
from jtc.settings import EarlyExitSettings

log = logging.getLogger(__name__)


SWEEP_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "method": pa.string(),
    "policy": pa.string(),  # "confidence" (the exit rule, per λ) or "fixed" (every token at l)
    # how the confidence is computed: "full" (the whole vocabulary decoded) or "shortlist"
    # (jtc.evaluation.shortlist: exact logits of candidates picked by a low-rank head); null
    # when fixed
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


def shortlist_macs(info: dict, rank: int, candidates: int) -> float:
    """Multiply-adds of one shortlist check (jtc.evaluation.shortlist) of a cached model (its
    info.json): k·w + V·k + c·w, with k and c capped as the check caps them."""
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


def exit_costs(info: dict, parameters: pa.Table, methods: Iterable[str]) -> dict[str, ExitCost]:
    """The full check's ExitCost of each of `methods` (in their order) in a cached model (its
    info.json), each map's size from the parameter table (a method it lacks, id: no map)."""
    sizes = {r["method"]: r["parameters"] for r in parameters.to_pylist()}
    return {method: ExitCost.of(info, sizes.get(method, 0)) for method in methods}


def _at(result: Sweep, i: int) -> Sweep:
    return Sweep(*(np.asarray(getattr(result, f))[i : i + 1] for f in Sweep.__dataclass_fields__))


def exit_tables(
    scores: dict[str, pa.Table],
    positions: pa.Table,
    last: int,
    settings: EarlyExitSettings,
    costs: dict[str, ExitCost],
    *,
    model: str,
    corpus: str,
    seed: int = 0,
    shortlist: float | None = None,
) -> tuple[pa.Table, pa.Table]:
    """(the λ sweep and fixed exits of every method, SWEEP_COLUMNS; the fewest layers at each
    target accuracy, in sample and held out, SAVINGS_COLUMNS) from each method's per-position
    scores on the validation `positions`, for each check the scores hold (checks_in) and each
    check interval of `settings`; `costs` per method (the full check's), `shortlist` the
    multiply-adds of one shortlist check (shortlist_macs), needed where the scores hold that
    check."""
    rule, lambdas = ExitRule.of(settings), np.asarray(settings.lambda_grid(), dtype=np.float64)
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
            for every in settings.check_every:
                result = sweep(confidence, correct, t, lambdas, rule, every=every)
                rows += _sweep_rows(key, every, result, priced)
                for target in settings.targets:
                    best = fewest_layers(result, target)
                    if best is not None:
                        picked = _at(result, best)
                        saved.append(_saving(key, "in_sample", every, target, picked, priced))
                    outside = held_out(data, lambdas, rule, target, every, settings.folds, seed)
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
