"""The smoke experiment (.test/config/config.yaml): every stage on the real packaged models, and
docs/outputs.md's own-model example."""

import json
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import waits
import yaml
from disk_use import said_estimate, size
from harness import ROOT, python_example, rules_run, run_snakemake

pytestmark = pytest.mark.workflow


SMOKE = ROOT / ".test/config/config.yaml"
EVERY_STAGE = {
    "prepare_corpus",
    "resolve_model",
    "extract_hidden",
    "fit_map",
    "train_map",
    "r2_table",
    "plot_r2",
    "parameter_table",
    "fit_shortlist",
    "decode_predictions",
    "prediction_table",
    "plot_prediction",
    "prediction_examples",
    "early_exit",
    "plot_early_exit",
    "record_parts",
    "fit_parts",
    "part_r2_table",
    "plot_part_r2",
    "replace_parts",
    "submodule_table",
    "plot_submodules",
    "calibrate_pruning",
    "run_pruned",
    "pruning_tables",
    "plot_pruning",
    "benchmark_tasks",
    "run_benchmarks",
    "benchmark_table",
    "benchmark_pairs",
    "plot_benchmarks",
    "context_perplexity",
    "generation_fidelity",
    "measure_tables",
    "all",
}


@pytest.mark.real_model
def test_smoke_experiment_runs_every_stage(early_runs):
    smoke = yaml.safe_load(SMOKE.read_text())
    shipped = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    assert smoke["models"] == shipped["models"]  # the default experiment's packaged models
    assert smoke["corpora"] == {"news": shipped["corpora"]["news"]}
    # `snakemake all` with SMOKE in a folder of its own, started as the session started
    # (tests/helpers/early.py: conftest.py's early_runs)
    workdir, proc = early_runs["smoke"].result()
    ran = rules_run(proc)
    assert EVERY_STAGE <= set(ran), sorted(EVERY_STAGE - set(ran))
    metrics = workdir / "results/metrics"
    predicting = [m for m, spec in smoke["models"].items() if spec.get("predict", True)]
    for model in smoke["models"]:
        r2 = pq.read_table(metrics / f"{model}/news/r2.parquet")
        assert r2.num_rows and np.isfinite(r2.column("r2").to_numpy()).all(), model
        methods = set(smoke["methods"]) - ({"tuned_lens"} if model not in predicting else set())
        assert set(r2.column("method").to_pylist()) == methods, model
        assert pq.read_table(metrics / f"{model}/news/parameters.parquet").num_rows, model
    for model in predicting:
        for name in ("prediction", "early_exit"):
            table = pq.read_table(metrics / f"{model}/news/{name}.parquet")
            assert table.num_rows, (model, name)
            assert set(table.column("method").to_pylist()) == set(smoke["methods"]), (model, name)
        # both checks on real weights (the shortlist's factorisation fitted to SmolLM2's head)
        sweep = pq.read_table(metrics / f"{model}/news/early_exit.parquet")
        assert {"full", "shortlist"} <= set(sweep.column("check").to_pylist()), model
        # (the layers saved by the methods that reach a target accuracy: maybe not all of them)
        saved = pq.read_table(metrics / f"{model}/news/early_exit_savings.parquet")
        assert set(saved.column("method").to_pylist()) <= set(smoke["methods"]), model
        assert "## Sentence" in (metrics / f"{model}/news/examples.md").read_text()
    for model in smoke["submodules"]["models"]:
        for name in ("parts_r2", "submodules"):
            assert pq.read_table(metrics / f"{model}/news/{name}.parquet").num_rows, (model, name)
    for figure in ("r2.png", "prediction.png", "early_exit.png", "submodules.png"):
        assert (workdir / "results/figures/smollm2/news" / figure).stat().st_size, figure
    # depth pruning on real weights, and the smaller checkpoint it writes
    selected = pq.read_table(metrics / "smollm2/news/pruning_selected.parquet").to_pylist()
    assert {r["variant"] for r in selected} == set(smoke["pruning"]["variants"])
    assert all(r["length"] == 8 and r["perplexity_ratio"] > 1 for r in selected)
    # lm-eval on the full and each pruned SmolLM2 (2 documents of 2 tasks)
    benchmarks = smoke["pruning"]["benchmarks"]
    retained = pq.read_table(metrics / "smollm2/news/benchmark_retained.parquet").to_pylist()
    headline = [r for r in retained if r["headline"]]  # acc; acc_norm rows beside it
    assert [r["variant"] for r in headline] == ["full", *smoke["pruning"]["variants"]]
    accuracy = pq.read_table(metrics / "smollm2/news/benchmark_accuracy.parquet")
    assert set(accuracy.column("task").to_pylist()) == set(benchmarks["tasks"])
    assert set(accuracy.column("documents").to_pylist()) == {benchmarks["limit"]}
    assert set(accuracy.column("split").to_pylist()) == {"validation"}
    assert (workdir / "results/figures/smollm2/news/benchmarks.png").stat().st_size
    # the disk it said it would write, as the jobs started (jtc.pipeline.disk), within a fifth
    # of what it wrote: the real packaged models' caches, their states and maps
    estimate = said_estimate(proc)
    wrote = sum(size(workdir / name) for name in ("results", "logs", "benchmarks"))
    assert 0.8 <= estimate / wrote <= 1.2, (estimate, wrote)
    exported = run_snakemake(workdir, "pruned", configfile=SMOKE)
    assert rules_run(exported) == {"export_pruned": 1, "pruned": 1}
    # what the experiment made outside `all` (lm-eval's task files, the checkpoint) is its own
    assert "not part of this experiment" not in exported.stderr
    written = json.loads((workdir / "results/pruned/smollm2/news/config.json").read_text())
    assert written["num_hidden_layers"] == 30 - 8
    # 2 calibration windows of 160 tokens for a width of 576: the export says what it is worth
    described = json.loads((workdir / "results/pruned/smollm2/news/pruning.json").read_text())
    assert "fewer than the width" in described["caveat"]

    # docs/outputs.md's own-model example: SmolLM2 from its source and exported maps, hooks
    from jtc.cli import main

    export = ["--results", str(workdir / "results"), "--model", "smollm2", "--corpus", "news"]
    assert main(["export", *export, "--out", str(workdir / "shared/smollm2-news-mat")]) == 0
    code = python_example(ROOT / "docs" / "outputs.md", "**Without a workflow folder.**")
    code += "\nassert tuple(h30.shape)[::2] == (1, 576), h30.shape\n"
    proc = waits.run(
        [sys.executable, "-c", code], 300, "docs/outputs.md's example", cwd=workdir, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (workdir / "lens.png").stat().st_size
