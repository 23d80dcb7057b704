"""Prediction metrics from per-position scores (jtc.model.scoring.SCORE_COLUMNS): Precision@k,
Surprisal, KL(final || shortcut) and cross-entropy to the gold token, each averaged over the
validation positions with a paired bootstrap interval (the same resamples for every method and
layer); and the sub-module runs' scores put beside the layer shortcuts' on the same sentences."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jtc.settings import IntervalSettings

SUMMARY_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "method": pa.string(),
    "layer": pa.int32(),
    "metric": pa.string(),
    "mean": pa.float64(),
    "ci_low": pa.float64(),
    "ci_high": pa.float64(),
    "n": pa.int64(),
}


def metric_values(
    scores: pa.Table, top_k: list[int], diverged: bool = False
) -> dict[str, np.ndarray]:
    """Per-position values of every metric for the rows of `scores` (NaN: not defined there);
    with `diverged`, also whether the decoded state overflowed (top1_id -1)."""
    rank = scores.column("final_rank").to_numpy()
    values = {f"precision@{k}": ((rank >= 1) & (rank <= k)).astype(np.float64) for k in top_k}
    for name in ("surprisal", "kl", "cross_entropy"):
        values[name] = scores.column(name).to_numpy().astype(np.float64)
    if diverged:
        values["diverged"] = (scores.column("top1_id").to_numpy() < 0).astype(np.float64)
    return values


def beside_layer_shortcuts(
    runs: pa.Table, shortcuts: Mapping[str, pa.Table]
) -> dict[str, pa.Table]:
    """The per-position scores of the replaced runs (`runs`, one `method` per variant) by
    variant, in the order they first appear, followed by each layer shortcut's scores
    (`shortcuts`: method -> its decode_predictions table) at the sentences the runs scored."""
    variants = dict.fromkeys(runs.column("method").to_pylist())
    scores = {v: runs.filter(pc.equal(runs.column("method"), v)) for v in variants}
    evaluated = pa.array(next(iter(scores.values())).column("sentence_id").unique())
    for method, table in shortcuts.items():
        scores[method] = table.filter(pc.is_in(table.column("sentence_id"), evaluated))
    return scores


def bootstrap_counts(n: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, n) float64: how often each of n units is drawn in each bootstrap resample."""
    rng = np.random.default_rng(seed)
    counts = np.empty((resamples, n), dtype=np.float64)
    for b in range(resamples):
        counts[b] = np.bincount(rng.integers(n, size=n), minlength=n)
    return counts


def bootstrap_means(
    values: np.ndarray, resamples: int, seed: int, level: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(mean, ci_low, ci_high, n) per column of `values` (n_positions, m), ignoring NaN.

    Every column is resampled with the same positions (a paired bootstrap), as counts: one
    (resamples × n) by (n × m) product gives every resampled mean at once."""
    finite = np.isfinite(values)
    filled = np.where(finite, values, 0.0)
    n = len(values)
    counts = bootstrap_counts(n, resamples, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        resampled = (counts @ filled) / (counts @ finite)
        sizes = finite.sum(0)
        mean = filled.sum(0) / sizes
    tail = (1.0 - level) / 2.0
    low = np.full(values.shape[1], np.nan)
    high = np.full(values.shape[1], np.nan)
    defined = sizes > 0
    if defined.any():
        low[defined], high[defined] = np.nanquantile(
            resampled[:, defined], [tail, 1.0 - tail], axis=0
        )
    return mean, low, high, sizes


def prediction_summary(
    scores: dict[str, pa.Table],
    *,
    model: str,
    corpus: str,
    settings: IntervalSettings,
    seed: int,
    diverged: bool = False,
) -> pa.Table:
    """The tidy metrics table: one row per (method, layer, metric), Precision@k for each k of
    `settings` and intervals of its level from its bootstrap resamples; with `diverged`, also
    the share of positions whose decoded state overflowed (runs with parts replaced)."""
    keys: list[tuple[str, int, str]] = []
    columns: list[np.ndarray] = []
    reference_ids: np.ndarray | None = None
    for method in sorted(scores):
        table = scores[method]
        for layer in sorted(set(table.column("layer").to_pylist())):
            rows = table.filter(pc.equal(table.column("layer"), layer))
            ids = rows.column("sentence_id").to_numpy()
            if reference_ids is None:
                reference_ids = ids
            elif not np.array_equal(ids, reference_ids):
                raise ValueError(
                    f"scores of method '{method}' layer {layer} are not on the same positions"
                )
            for name, value in metric_values(rows, settings.top_k, diverged).items():
                keys.append((method, layer, name))
                columns.append(value)
    if not columns:
        raise ValueError("no scores to summarise")
    mean, low, high, sizes = bootstrap_means(
        np.stack(columns, axis=1), settings.bootstrap, seed, settings.confidence_level
    )
    methods, layers, metrics = zip(*keys, strict=True)
    data = {
        "model": [model] * len(keys),
        "corpus": [corpus] * len(keys),
        "method": methods,
        "layer": layers,
        "metric": metrics,
        "mean": mean,
        "ci_low": low,
        "ci_high": high,
        "n": sizes,
    }
    return pa.table({c: pa.array(data[c], t) for c, t in SUMMARY_COLUMNS.items()})
