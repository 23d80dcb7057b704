"""The benchmark ranking two by two (jtc.measures.benchmark_pairs) against a direct
computation with numpy."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from benchmark_documents import documents_table

from jtc.evaluation.prediction import bootstrap_counts
from jtc.measures.benchmark_pairs import documents_to_separate, pair_table
from jtc.measures.subjects import FULL_MODEL, Subject
from jtc.settings import IntervalSettings

SUBJECTS = {
    "full": FULL_MODEL,
    "drop": Subject("drop", 2, 1, "3-4"),
    "replaceme": Subject("replaceme", 2, 1, "3-4"),
}
CHOICES = {"piqa": 2, "boolq": 2, "arc_easy": 4}
SETTINGS = IntervalSettings.defaults(bootstrap=300, confidence_level=0.9)


def _documents(scores: dict[tuple[str, str], list[int]], norm: set[str]) -> pa.Table:
    """(variant, task) -> acc per document; acc_norm the same on the tasks in `norm`."""
    return documents_table(scores, SUBJECTS, lambda t, d: CHOICES[t], norm)


def _scores(rng: np.random.Generator) -> dict[tuple[str, str], list[int]]:
    """arc_easy: the full model far above chance (1/4); piqa: at chance (1/2); boolq: the
    full model above chance, of another length."""
    accuracy = {
        ("full", "arc_easy"): 0.9,
        ("drop", "arc_easy"): 0.4,
        ("replaceme", "arc_easy"): 0.7,
        ("full", "piqa"): 0.5,
        ("drop", "piqa"): 0.5,
        ("replaceme", "piqa"): 0.5,
        ("full", "boolq"): 0.95,
        ("drop", "boolq"): 0.6,
        ("replaceme", "boolq"): 0.6,
    }
    length = {"arc_easy": 60, "piqa": 40, "boolq": 50}
    return {(v, t): list((rng.random(length[t]) < p).astype(int)) for (v, t), p in accuracy.items()}


def _by_hand(scores, tasks: dict[str, int], a: str, b: str, seed: int):
    """(difference, low, high) of a - b averaged over `tasks` (task -> its position k)."""
    diffs, boots = [], []
    for task, k in tasks.items():
        x = np.array(scores[a, task], float) - np.array(scores[b, task], float)
        counts = bootstrap_counts(len(x), SETTINGS.bootstrap, seed + k)
        diffs.append(x.mean())
        boots.append(counts @ x / len(x))
    low, high = np.quantile(np.mean(boots, axis=0), [0.05, 0.95])
    return np.mean(diffs), low, high


def _rows(table: pa.Table) -> dict[tuple, dict]:
    return {
        (r["metric"], r["task_set"], r["variant"], r["versus_variant"]): r
        for r in table.to_pylist()
    }


def test_every_two_models_difference_and_interval_against_a_direct_computation():
    scores = _scores(np.random.default_rng(0))
    table = pair_table(_documents(scores, {"arc_easy"}), SETTINGS, 7, model="m", corpus="c")
    rows = _rows(table)
    # three models: three pairs a metric and task set, the full model first
    assert {(k[2], k[3]) for k in rows} == {
        ("full", "drop"),
        ("full", "replaceme"),
        ("drop", "replaceme"),
    }
    every = {"arc_easy": 0, "piqa": 1, "boolq": 2}
    for first, second in (("full", "drop"), ("drop", "replaceme")):
        row = rows["acc", "all", first, second]
        diff, low, high = _by_hand(scores, every, first, second, 7)
        assert row["difference"] == pytest.approx(diff)
        assert (row["difference_low"], row["difference_high"]) == pytest.approx((low, high))
        assert row["separated"] is bool(low > 0 or high < 0)
        assert (row["tasks"], row["documents"]) == (3, 60)
        half = (high - low) / 2
        assert row["documents_to_separate"] == math.ceil(60 * (half / abs(diff)) ** 2)
    # the full model far above drop: separated, already at fewer documents than it has
    full_drop = rows["acc", "all", "full", "drop"]
    assert full_drop["separated"] and full_drop["documents_to_separate"] < 60
    # deterministic
    assert pair_table(_documents(scores, {"arc_easy"}), SETTINGS, 7, model="m", corpus="c").equals(
        table
    )


def test_the_tasks_above_chance_and_acc_norm_where_reported():
    scores = _scores(np.random.default_rng(1))
    rows = _rows(pair_table(_documents(scores, {"arc_easy"}), SETTINGS, 0, model="m", corpus="c"))
    # piqa (the full model at chance) is left out; each task keeps its own resamples' seed
    above = rows["acc", "full_above_chance", "drop", "replaceme"]
    assert above["tasks"] == 2
    diff, low, high = _by_hand(scores, {"arc_easy": 0, "boolq": 2}, "drop", "replaceme", 0)
    assert above["difference"] == pytest.approx(diff)
    assert (above["difference_low"], above["difference_high"]) == pytest.approx((low, high))
    # acc_norm: only arc_easy reports it
    norm = rows["acc_norm", "all", "drop", "replaceme"]
    diff, low, high = _by_hand(scores, {"arc_easy": 0}, "drop", "replaceme", 0)
    assert norm["tasks"] == 1 and norm["difference"] == pytest.approx(diff)
    assert norm["headline"] is False and above["headline"] is True


def test_documents_to_separate_scales_with_the_square_of_the_spread():
    assert documents_to_separate(100, 0.1, 0.05) == 400  # twice the half-width: 4 times
    assert documents_to_separate(100, 0.1, -0.2) == 25
    assert documents_to_separate(100, 0.1, 0.0) is None  # equal: no count separates them
    assert documents_to_separate(100, 0.1, 1e-17) is None  # differences that cancel, rounded
    # two models whose per-task differences cancel (+1/10 on one task, -1/10 on the other):
    # their mean differs by rounding alone, and counts as equal
    cancel = {
        ("full", "arc_easy"): [1] * 10,
        ("full", "boolq"): [1] * 10,
        ("drop", "arc_easy"): [1] * 7 + [0] * 3,
        ("replaceme", "arc_easy"): [1] * 6 + [0] * 4,
        ("drop", "boolq"): [1] * 3 + [0] * 7,
        ("replaceme", "boolq"): [1] * 4 + [0] * 6,
    }
    row = _rows(pair_table(_documents(cancel, set()), SETTINGS, 0, model="m", corpus="c"))[
        "acc", "all", "drop", "replaceme"
    ]
    assert row["difference"] == 0 and row["documents_to_separate"] is None
    # two identical models: difference 0, not separated, no count
    scores = _scores(np.random.default_rng(2))
    same = {**scores, **{("replaceme", t): scores["drop", t] for t in CHOICES}}
    row = _rows(pair_table(_documents(same, set()), SETTINGS, 0, model="m", corpus="c"))[
        "acc", "all", "drop", "replaceme"
    ]
    assert row["difference"] == 0 and not row["separated"]
    assert row["documents_to_separate"] is None


def test_the_stage_writes_the_table_its_csv_and_page(tmp_path):
    from jtc.files.io import read_table, write_table
    from jtc.stages.benchmarks import benchmark_pairs

    scores = _scores(np.random.default_rng(3))
    write_table(_documents(scores, set()), tmp_path / "benchmarks.parquet")
    settings = IntervalSettings.param({"prediction": IntervalSettings.defaults().__dict__})
    out = tmp_path / "benchmark_pairs.parquet"
    benchmark_pairs(
        str(tmp_path / "benchmarks.parquet"),
        str(out),
        model="m",
        corpus="c",
        settings=settings,
        seed=0,
    )
    table = read_table(out)
    assert set(table.column("metric").to_pylist()) == {"acc"}  # no task reports acc_norm
    assert out.with_suffix(".csv").is_file() and out.with_suffix(".html").is_file()
