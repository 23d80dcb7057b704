"""The benchmark tables (from run_benchmarks' documents, jtc.measures.benchmarks): each task's
accuracy (acc, the headline, and acc_norm beside it where lm-eval reports it) for the full model
and each pruned model, with the split scored, the chance level and a paired bootstrap interval of
the difference to the full model; and each pruned model's share of the full model's accuracy
kept ("% retained") both ways the papers compute it: the ratio of averages (the mean over tasks
of the pruned model's accuracy over the mean of the full model's, as ReplaceMe's table) and the
mean over tasks of the per-task ratios (a task on which the full model scored 0 left out).
Every interval resamples the documents of each task (task k's resamples from seed + k), the same
resamples for every subject and both metrics (paired)."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jtc.evaluation.prediction import bootstrap_counts
from jtc.files.io import rows_table
from jtc.measures.subjects import FULL, SUBJECT_COLUMNS
from jtc.settings import IntervalSettings

HEADLINE = "acc"  # the papers' tables: acc, acc_norm beside it
ACCURACY_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),  # the corpus the pruned spans were chosen on
    "task": pa.string(),
    "split": pa.string(),  # the split scored: test where the data package holds its labels
    "shots": pa.int64(),  # few-shot examples before each document
    "metric": pa.string(),  # acc, or acc_norm (log-likelihood per byte)
    "headline": pa.bool_(),  # the metric is the headline (acc), the one the papers report
    **SUBJECT_COLUMNS,
    "documents": pa.int64(),
    "chance": pa.float64(),  # the mean over the documents of 1 / its number of choices
    "accuracy": pa.float64(),
    "accuracy_low": pa.float64(),
    "accuracy_high": pa.float64(),
    "difference": pa.float64(),  # accuracy - the full model's, on the same documents
    "difference_low": pa.float64(),
    "difference_high": pa.float64(),
    "full_above_chance": pa.bool_(),  # the full model's interval lies above chance
}
RETAINED_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "metric": pa.string(),  # acc (every task), or acc_norm (the tasks that report it)
    "headline": pa.bool_(),  # the metric is the headline (acc)
    **SUBJECT_COLUMNS,
    "tasks": pa.int64(),  # tasks averaged (mean of ratios: those the full model scored above 0)
    # 100 · (mean over tasks of accuracy) / (the same of the full model's), ReplaceMe's
    "retained_of_averages": pa.float64(),
    "retained_of_averages_low": pa.float64(),
    "retained_of_averages_high": pa.float64(),
    # 100 · mean over tasks of accuracy / the full model's
    "retained_mean_ratio": pa.float64(),
    "retained_mean_ratio_low": pa.float64(),
    "retained_mean_ratio_high": pa.float64(),
}
_SUBJECT = tuple(SUBJECT_COLUMNS)


def task_scores(documents: pa.Table, task: str, metric: str) -> tuple[list[tuple], np.ndarray]:
    """(subjects in the table's order, (documents, subjects) scores) of one task and metric."""
    rows = documents.filter(pc.equal(documents.column("task"), task)).to_pylist()
    subjects = list(dict.fromkeys(tuple(r[c] for c in _SUBJECT) for r in rows))
    docs = sorted({r["doc_id"] for r in rows})
    where = {d: i for i, d in enumerate(docs)}
    values = np.full((len(docs), len(subjects)), np.nan)
    column = {s: k for k, s in enumerate(subjects)}
    for r in rows:
        value = r[metric]
        values[where[r["doc_id"]], column[tuple(r[c] for c in _SUBJECT)]] = (
            np.nan if value is None else value
        )
    if np.isnan(values).any():
        raise ValueError(f"{task} {metric}: not every subject scored every document")
    if not any(s[0] == FULL for s in subjects):
        raise ValueError(f"{task}: the full model's documents are missing")
    return subjects, values


def chance_level(choices: np.ndarray) -> float:
    """The accuracy of a uniform guess: the mean over the documents of 1 / its choices."""
    return float(np.mean(1.0 / np.asarray(choices, dtype=float)))


def _interval(resampled: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    tail = (1.0 - level) / 2.0
    with np.errstate(invalid="ignore"):
        low, high = np.nanquantile(resampled, [tail, 1.0 - tail], axis=0)
    return low, high


def _ratio(pruned: np.ndarray, full: np.ndarray) -> np.ndarray:
    """pruned / full, NaN where the full model's accuracy is 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(full > 0, pruned / np.where(full > 0, full, 1.0), np.nan)


def retained_shares(means: np.ndarray, full: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ratio of averages, mean of ratios, tasks in the mean of ratios), each in % per subject,
    of per-task accuracies `means` (..., tasks, subjects); the full model is subject `full`. A
    task on which the full model scored 0 has no ratio: the mean is over the others."""
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # every task undefined: NaN
        averages = means.mean(axis=-2)
        of_averages = 100.0 * _ratio(averages, averages[..., [full]])
        ratios = _ratio(means, means[..., [full]])
        mean_ratio = 100.0 * np.nanmean(ratios, axis=-2)
    return of_averages, mean_ratio, np.isfinite(ratios[..., full]).sum(axis=-1)


def benchmark_tables(
    documents: pa.Table, settings: IntervalSettings, seed: int, *, model: str, corpus: str
) -> tuple[pa.Table, pa.Table]:
    """(accuracy table: a row per task, metric and subject; retained table: a row per metric
    and subject), with intervals of `settings`' level from `settings.bootstrap` resamples of
    each task's documents (task k's from seed + k, the same for both metrics)."""
    tasks = list(dict.fromkeys(documents.column("task").to_pylist()))
    level = settings.confidence_level
    accuracy_rows: list[dict] = []
    # metric -> per task (point means (S,), resampled means (B, S))
    per_metric: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"acc": [], "acc_norm": []}
    subjects: list[tuple] = []
    full = 0
    for k, task in enumerate(tasks):
        rows = documents.filter(pc.equal(documents.column("task"), task))
        first = rows.slice(0, 1).to_pylist()[0]
        metrics = ["acc"] + (["acc_norm"] if rows.column("acc_norm").null_count == 0 else [])
        counts = None
        for metric in metrics:
            scored, values = task_scores(documents, task, metric)
            if subjects and scored != subjects:
                raise ValueError(f"{task}: not the subjects of {tasks[0]}")
            subjects = scored
            full = next(j for j, s in enumerate(subjects) if s[0] == FULL)
            full_rows = rows.filter(pc.equal(rows.column("variant"), FULL))
            chance = chance_level(full_rows.column("choices").to_numpy())
            n = len(values)
            if counts is None:
                counts = bootstrap_counts(n, settings.bootstrap, seed + k)
            mean, resampled = values.mean(0), counts @ values / n  # (S,), (B, S)
            low, high = _interval(resampled, level)
            diff_mean = mean - mean[full]
            diff_low, diff_high = _interval(resampled - resampled[:, [full]], level)
            per_metric[metric].append((mean, resampled))
            for j, subject in enumerate(subjects):
                accuracy_rows.append(
                    {
                        "model": model,
                        "corpus": corpus,
                        "task": task,
                        "split": first["split"],
                        "shots": first["shots"],
                        "metric": metric,
                        "headline": metric == HEADLINE,
                        **dict(zip(_SUBJECT, subject, strict=True)),
                        "documents": n,
                        "chance": chance,
                        "accuracy": mean[j],
                        "accuracy_low": low[j],
                        "accuracy_high": high[j],
                        "difference": diff_mean[j],
                        "difference_low": diff_low[j],
                        "difference_high": diff_high[j],
                        "full_above_chance": bool(low[full] > chance),
                    }
                )
    retained_rows = []
    for metric, scored in per_metric.items():
        if not scored:
            continue
        means = np.stack([m for m, _ in scored])  # (T, S)
        resampled = np.stack([r for _, r in scored], axis=1)  # (B, T, S)
        of_averages, mean_ratio, defined = retained_shares(means, full)
        boot_averages, boot_ratio, _ = retained_shares(resampled, full)
        averages_low, averages_high = _interval(boot_averages, level)
        ratio_low, ratio_high = _interval(boot_ratio, level)
        for j, subject in enumerate(subjects):
            retained_rows.append(
                {
                    "model": model,
                    "corpus": corpus,
                    "metric": metric,
                    "headline": metric == HEADLINE,
                    **dict(zip(_SUBJECT, subject, strict=True)),
                    "tasks": int(defined),
                    "retained_of_averages": of_averages[j],
                    "retained_of_averages_low": averages_low[j],
                    "retained_of_averages_high": averages_high[j],
                    "retained_mean_ratio": mean_ratio[j],
                    "retained_mean_ratio_low": ratio_low[j],
                    "retained_mean_ratio_high": ratio_high[j],
                }
            )
    return rows_table(accuracy_rows, ACCURACY_COLUMNS), rows_table(retained_rows, RETAINED_COLUMNS)
