"""The ranking of the measured models on the benchmarks (from run_benchmarks' documents,
jtc.measures.benchmarks): for every two of them, the difference of their accuracy averaged over
the tasks, with a paired bootstrap interval over each task's documents (the resamples of
jtc.measures.benchmark_tables: task k's from seed + k), whether that interval leaves out 0 (the
two are separated), and how many documents a task the measured spread says would separate them.

Two sets of tasks: every task scored, and the tasks on which the full model's `acc` interval lies
above chance (on the others every model guesses, and a difference is noise)."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jtc.evaluation.prediction import bootstrap_counts
from jtc.files.io import rows_table
from jtc.measures.benchmark_tables import HEADLINE, chance_level, task_scores
from jtc.measures.subjects import FULL, SUBJECT_COLUMNS
from jtc.settings import IntervalSettings

EVERY_TASK, ABOVE_CHANCE = "all", "full_above_chance"
VERSUS = "versus_"  # the second model's SUBJECT_COLUMNS
PAIR_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "metric": pa.string(),  # acc (the headline), or acc_norm (the tasks that report it)
    "headline": pa.bool_(),
    "task_set": pa.string(),  # all, or full_above_chance
    "tasks": pa.int64(),  # tasks averaged
    "documents": pa.int64(),  # documents of the largest task
    **SUBJECT_COLUMNS,
    **{VERSUS + name: kind for name, kind in SUBJECT_COLUMNS.items()},
    # mean over the tasks of the first model's accuracy minus the second's, on the same documents
    "difference": pa.float64(),
    "difference_low": pa.float64(),
    "difference_high": pa.float64(),
    "separated": pa.bool_(),  # the interval leaves out 0
    # documents a task at which the interval's half-width would equal |difference| (the
    # half-width shrinks as 1/√documents); null where the difference is 0
    "documents_to_separate": pa.int64(),
}
_SUBJECT = tuple(SUBJECT_COLUMNS)
# a difference of mean accuracy below this is rounding (one document of a million moves it 1e-6)
TIE = 1e-9


def documents_to_separate(documents: int, half_width: float, difference: float) -> int | None:
    """The documents a task at which a paired interval of half-width `half_width` at
    `documents` would shrink to |difference| (None where the difference is 0: below TIE, the
    rounding of a mean over tasks whose differences cancel)."""
    if abs(difference) < TIE or not math.isfinite(half_width):
        return None
    return max(1, math.ceil(documents * (half_width / abs(difference)) ** 2))


def _scored(
    documents: pa.Table,
    tasks: dict[str, int],
    metric: str,
    settings: IntervalSettings,
    seed: int,
) -> tuple[list[tuple], np.ndarray, np.ndarray, int]:
    """(subjects, mean over `tasks` of each subject's accuracy (S,), the same in each bootstrap
    resample (B, S), documents of the largest task); `tasks`: each task's position k among the
    documents' tasks, its resamples drawn from seed + k."""
    subjects: list[tuple] = []
    means, resampled, most = [], [], 0
    for task, k in tasks.items():
        scored, values = task_scores(documents, task, metric)
        if subjects and scored != subjects:
            raise ValueError(f"{task}: not the subjects of the first task")
        subjects, n = scored, len(values)
        means.append(values.mean(0))
        resampled.append(bootstrap_counts(n, settings.bootstrap, seed + k) @ values / n)
        most = max(most, n)
    return subjects, np.mean(means, axis=0), np.mean(resampled, axis=0), most


def _task_rows(documents: pa.Table, task: str) -> pa.Table:
    return documents.filter(pc.equal(documents.column("task"), task))


def _above_chance(
    documents: pa.Table, tasks: list[str], settings: IntervalSettings, seed: int
) -> list[str]:
    """The tasks on which the full model's acc interval lies above chance (task k's resamples
    from seed + k, as jtc.measures.benchmark_tables' full_above_chance)."""
    tail = (1.0 - settings.confidence_level) / 2.0
    kept = []
    for k, task in enumerate(tasks):
        subjects, values = task_scores(documents, task, HEADLINE)
        full = next(j for j, s in enumerate(subjects) if s[0] == FULL)
        draws = bootstrap_counts(len(values), settings.bootstrap, seed + k)
        low = np.quantile(draws @ values[:, full] / len(values), tail)
        rows = _task_rows(documents, task)
        chance = chance_level(
            rows.filter(pc.equal(rows.column("variant"), FULL))["choices"].to_numpy()
        )
        if low > chance:
            kept.append(task)
    return kept


def pair_table(
    documents: pa.Table, settings: IntervalSettings, seed: int, *, model: str, corpus: str
) -> pa.Table:
    """A row per metric, task set and two measured models (in the documents' order, the full
    model first): their difference in accuracy averaged over the tasks, its paired interval at
    `settings`' level from `settings.bootstrap` resamples, and the documents that would
    separate them."""
    every = list(dict.fromkeys(documents.column("task").to_pylist()))
    task_sets = {EVERY_TASK: every, ABOVE_CHANCE: _above_chance(documents, every, settings, seed)}
    tail = (1.0 - settings.confidence_level) / 2.0
    rows: list[dict] = []
    for metric in (HEADLINE, "acc_norm"):
        reported = [t for t in every if _task_rows(documents, t).column(metric).null_count == 0]
        for task_set, tasks in task_sets.items():
            kept = {t: every.index(t) for t in tasks if t in reported}
            if not kept:
                continue
            subjects, mean, boot, most = _scored(documents, kept, metric, settings, seed)
            for a, b in combinations(range(len(subjects)), 2):
                diff = float(mean[a] - mean[b])
                diff = 0.0 if abs(diff) < TIE else diff
                low, high = np.quantile(boot[:, a] - boot[:, b], [tail, 1.0 - tail])
                rows.append(
                    {
                        "model": model,
                        "corpus": corpus,
                        "metric": metric,
                        "headline": metric == HEADLINE,
                        "task_set": task_set,
                        "tasks": len(kept),
                        "documents": most,
                        **dict(zip(_SUBJECT, subjects[a], strict=True)),
                        **{VERSUS + c: v for c, v in zip(_SUBJECT, subjects[b], strict=True)},
                        "difference": diff,
                        "difference_low": float(low),
                        "difference_high": float(high),
                        "separated": bool(low > 0 or high < 0),
                        "documents_to_separate": documents_to_separate(
                            most, float(high - low) / 2.0, diff
                        ),
                    }
                )
    return rows_table(rows, PAIR_COLUMNS)
