"""The Snakemake workflow end to end on a tiny config (tiny random models, a small text file):
the first `snakemake all` runs every stage and writes every table, a second one plans nothing,
and the same config in another folder gives identical tables.

The tiny run (conftest.py's tiny_run) is made once and only read: a test that changes a config
reruns in its own copy (harness.copy_run)."""

import re

import pyarrow.parquet as pq
import pytest
from harness import copy_run, link_inputs, read_config, rules_run, run_snakemake, write_config

pytestmark = pytest.mark.workflow


def test_first_run_runs_every_stage_and_writes_every_table(tiny_run, tiny_first_run):
    workdir = tiny_run
    ran = rules_run(tiny_first_run)
    assert ran["fit_map"] == 2 and ran["extract_hidden"] == 4 and ran["r2_table"] == 2
    # job logs read as text: the job's own progress lines, no carriage-return progress bars
    log = (workdir / "logs/extract_hidden/gpt/mini/train.log").read_text()
    assert "\r" not in log and "Loading weights" not in log
    assert re.search(r"extract: (\d+)/\1 sentences \(100%\)", log)
    decoding = (workdir / "logs/decode_predictions/gpt/mini.log").read_text()
    assert "decode: 3/3 layers (100%)" in decoding  # layers 0..2, every method
    # the run ends by saying where its results are and how to get the report
    assert "jtc: done. Tables: results/metrics/" in tiny_first_run.stderr
    assert "--report results/report.html" in tiny_first_run.stderr
    assert ran["decode_predictions"] == 2 and ran["prediction_table"] == 2  # every method in one
    assert ran["plot_prediction"] == 2 and ran["prediction_examples"] == 2
    assert ran["early_exit"] == 2 and ran["plot_early_exit"] == 2

    table = pq.read_table(workdir / "results/metrics/gpt/mini/r2.parquet").to_pandas()
    assert list(table.columns) == [
        "model",
        "corpus",
        "method",
        "source_layer",
        "target_layer",
        "r2",
    ]
    assert len(table) == 2 * 3  # (id, mat) x pairs l < l' of 3 sites
    assert (workdir / "results/metrics/gpt/mini/r2.csv").exists()
    for model in ("gpt", "bert"):  # one panel per method
        for ext in ("png", "pdf"):
            assert (workdir / f"results/figures/{model}/mini/r2.{ext}").stat().st_size
    for model in ("gpt", "bert"):
        prediction = pq.read_table(workdir / f"results/metrics/{model}/mini/prediction.parquet")
        rows = prediction.to_pylist()
        assert len(rows) == 2 * 3 * 6  # (id, mat) x layers 0..2 x 6 metrics
        assert {r["metric"] for r in rows} == {
            "precision@1",
            "precision@5",
            "precision@10",
            "surprisal",
            "kl",
            "cross_entropy",
        }
        for r in rows:
            assert r["n"] > 0 and r["ci_low"] <= r["mean"] <= r["ci_high"]
            if r["layer"] == 2 and r["metric"] == "precision@1":
                assert r["mean"] == 1.0
        assert (workdir / f"results/figures/{model}/mini/prediction.png").stat().st_size
        assert "## Sentence" in (workdir / f"results/metrics/{model}/mini/examples.md").read_text()
        sweep = pq.read_table(workdir / f"results/metrics/{model}/mini/early_exit.parquet")
        confident = [r for r in sweep.to_pylist() if r["policy"] == "confidence"]
        # (id, mat) x the full and shortlist checks x 125 λ x the check intervals 1 and 4
        assert len(confident) == 2 * 2 * 125 * 2 and min(r["mean_layers"] for r in confident) == 1
        assert {r["check"] for r in confident} == {"full", "shortlist"}
        assert all(0 < r["macs_percent"] for r in confident)
        assert max(r["accuracy"] for r in confident) == 1.0
        saved = pq.read_table(workdir / f"results/metrics/{model}/mini/early_exit_savings.parquet")
        assert sorted(set(saved.column("target").to_pylist())) == [0.9, 0.95, 0.99]
        assert set(saved.column("selection").to_pylist()) == {"in_sample", "held_out"}
        assert (workdir / f"results/figures/{model}/mini/early_exit.pdf").stat().st_size


def test_nothing_changed_nothing_runs(tiny_run, tmp_path):
    copy_run(tiny_run, tmp_path)
    again = run_snakemake(tmp_path, "all")
    assert rules_run(again) == {}, again.stderr[-2000:]
    assert "Nothing to be done" in again.stdout + again.stderr


def test_same_config_gives_identical_tables(tiny_run, tmp_path):
    reference = tiny_run / "results/metrics/bert/mini/r2.parquet"
    other = link_inputs(tiny_run, tmp_path / "again")
    write_config(other, read_config(tiny_run))
    run_snakemake(other, "results/metrics/bert/mini/r2.parquet")
    assert pq.read_table(reference).equals(
        pq.read_table(other / "results/metrics/bert/mini/r2.parquet")
    )
