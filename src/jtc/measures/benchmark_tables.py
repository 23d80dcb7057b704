"""The benchmark tables (from run_benchmarks' documents, jtc.measures.benchmarks): each task's
accuracy for the full model and each pruned model, with a paired bootstrap interval of the
difference to the full model; and each pruned model's share of the full model's accuracy kept,
ReplaceMe's "% retained": the mean over tasks of accuracy pruned / accuracy full, each task's
metric acc_norm where lm-eval reports it, else acc (a task on which the full model scored 0
left out). Every interval resamples the documents of
each task, the same resamples for every subject (paired)."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jtc.evaluation.prediction import bootstrap_counts
from jtc.files.io import rows_table
from jtc.measures.subjects import FULL, SUBJECT_COLUMNS
from jtc.measures.tasks import TASKS
from jtc.settings import IntervalSettings

ACCURACY_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),  # the corpus the pruned spans were chosen on
    "task": pa.string(),
    "metric": pa.string(),  # acc, or acc_norm (log-likelihood per byte)
    "primary": pa.bool_(),  # the task's metric in the retained share
    **SUBJECT_COLUMNS,
    "documents": pa.int64(),
    "accuracy": pa.float64(),
    "accuracy_low": pa.float64(),
    "accuracy_high": pa.float64(),
    "difference": pa.float64(),  # accuracy - the full model's, on the same documents
    "difference_low": pa.float64(),
    "difference_high": pa.float64(),
}
RETAINED_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    **SUBJECT_COLUMNS,
    "tasks": pa.int64(),  # tasks on which the full model's accuracy is above 0
    "retained_percent": pa.float64(),  # 100 · mean over tasks of accuracy / the full model's
    "retained_low": pa.float64(),
    "retained_high": pa.float64(),
}
_SUBJECT = tuple(SUBJECT_COLUMNS)


def primary_metric(task: str, documents: pa.Table) -> str:
    """acc_norm where the task reports it (lm-eval's definition; for a task jtc does not know,
    where its documents have it), else acc."""
    if task in TASKS:
        return TASKS[task].primary
    return "acc" if documents.column("acc_norm").null_count == len(documents) else "acc_norm"


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


def _interval(resampled: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    tail = (1.0 - level) / 2.0
    with np.errstate(invalid="ignore"):
        low, high = np.nanquantile(resampled, [tail, 1.0 - tail], axis=0)
    return low, high


def _ratio(pruned: np.ndarray, full: np.ndarray) -> np.ndarray:
    """pruned / full, NaN where the full model's accuracy is 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(full > 0, pruned / np.where(full > 0, full, 1.0), np.nan)


def benchmark_tables(
    documents: pa.Table, settings: IntervalSettings, seed: int, *, model: str, corpus: str
) -> tuple[pa.Table, pa.Table]:
    """(accuracy table: a row per task, metric and subject; retained table: a row per
    subject), with intervals of `settings`' level from `settings.bootstrap` resamples of each
    task's documents (task k's from seed + k)."""
    tasks = list(dict.fromkeys(documents.column("task").to_pylist()))
    accuracy_rows: list[dict] = []
    ratios, resampled_ratios = [], []
    subjects: list[tuple] = []
    for k, task in enumerate(tasks):
        rows = documents.filter(pc.equal(documents.column("task"), task))
        primary = primary_metric(task, rows)
        metrics = ["acc"] + (["acc_norm"] if rows.column("acc_norm").null_count == 0 else [])
        for metric in metrics:
            scored, values = task_scores(documents, task, metric)
            if subjects and scored != subjects:
                raise ValueError(f"{task}: not the subjects of {tasks[0]}")
            subjects = scored
            full = next(j for j, s in enumerate(subjects) if s[0] == FULL)
            n = len(values)
            counts = bootstrap_counts(n, settings.bootstrap, seed + k)
            mean, resampled = values.mean(0), counts @ values / n  # (S,), (B, S)
            low, high = _interval(resampled, settings.confidence_level)
            diff_mean = mean - mean[full]
            diff_low, diff_high = _interval(
                resampled - resampled[:, [full]], settings.confidence_level
            )
            for j, subject in enumerate(subjects):
                accuracy_rows.append(
                    {
                        "model": model,
                        "corpus": corpus,
                        "task": task,
                        "metric": metric,
                        "primary": metric == primary,
                        **dict(zip(_SUBJECT, subject, strict=True)),
                        "documents": n,
                        "accuracy": mean[j],
                        "accuracy_low": low[j],
                        "accuracy_high": high[j],
                        "difference": diff_mean[j],
                        "difference_low": diff_low[j],
                        "difference_high": diff_high[j],
                    }
                )
            if metric == primary:
                ratios.append(_ratio(mean, mean[full]))
                resampled_ratios.append(_ratio(resampled, resampled[:, [full]]))
    retained_rows = []
    if ratios:
        # a task whose full model scored 0 has no ratio: the mean is over the other tasks
        defined = int(np.isfinite(np.array(ratios)[:, full]).sum())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # every task undefined: NaN
            retained = 100.0 * np.nanmean(ratios, axis=0)
            resampled = 100.0 * np.nanmean(np.array(resampled_ratios), axis=0)
        low, high = _interval(resampled, settings.confidence_level)
        for j, subject in enumerate(subjects):
            retained_rows.append(
                {
                    "model": model,
                    "corpus": corpus,
                    **dict(zip(_SUBJECT, subject, strict=True)),
                    "tasks": defined,
                    "retained_percent": retained[j],
                    "retained_low": low[j],
                    "retained_high": high[j],
                }
            )
    return rows_table(accuracy_rows, ACCURACY_COLUMNS), rows_table(retained_rows, RETAINED_COLUMNS)
