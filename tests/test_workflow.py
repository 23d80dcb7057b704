"""The Snakemake workflow end to end on a tiny config (tiny random models, a small text file)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from tiny import WORDS, save_model

ROOT = Path(__file__).parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
pytestmark = pytest.mark.workflow


def run_snakemake(workdir, *args, check=True):
    cmd = [
        *SNAKEMAKE,
        "-s",
        str(ROOT / "Snakefile"),
        "-d",
        str(workdir),
        "--configfile",
        str(workdir / "config.yaml"),
        "--cores",
        "2",
        *args,
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONHASHSEED": "0"}
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def rules_run(proc):
    """Names of the rules that ran, with counts."""
    names = re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):", proc.stdout + proc.stderr, re.M)
    return {n: names.count(n) for n in set(names)} if names else {}


def write_config(workdir, **changes):
    config = {
        "seed": 0,
        "sizes": {"train": 48, "validation": 16},
        "validation_fraction": 0.3,
        "batch_size": 8,
        "max_tokens": 24,
        "threads": 1,
        "corpora": {"mini": {"source": "text_file", "path": str(workdir / "text.txt")}},
        "models": {
            "gpt": {"source": str(workdir / "tiny-gpt2")},
            "bert": {"source": str(workdir / "tiny-bert")},
        },
    }
    for key, value in changes.items():
        config[key] = value
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    work = tmp_path_factory.mktemp("wf")
    save_model("gpt2", work / "tiny-gpt2", layers=2, width=16)
    save_model("bert-mlm", work / "tiny-bert", layers=2, width=16)
    rng = np.random.default_rng(0)
    lines = [
        " ".join(rng.choice(WORDS, size=rng.integers(5, 14))).capitalize() + "." for _ in range(200)
    ]
    (work / "text.txt").write_text("\n".join(lines) + "\n")
    write_config(work)
    return work


def test_workflow_runs_caches_and_reruns_only_what_changed(workdir):
    first = run_snakemake(workdir, "all")
    ran = rules_run(first)
    assert ran["fit_mat"] == 4 and ran["extract_hidden"] == 4 and ran["r2_table"] == 2
    assert ran["decode_predictions"] == 4 and ran["prediction_table"] == 2
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
    for model in ("gpt", "bert"):
        for method in ("id", "mat"):
            for ext in ("png", "pdf"):
                assert (workdir / f"results/figures/{model}/mini/r2_{method}.{ext}").stat().st_size
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
        assert len(confident) == 2 * 125 and min(r["mean_layers"] for r in confident) == 1.0
        assert max(r["accuracy"] for r in confident) == 1.0
        saved = pq.read_table(workdir / f"results/metrics/{model}/mini/early_exit_savings.parquet")
        assert sorted(set(saved.column("target").to_pylist())) == [0.9, 0.95, 0.99]
        assert (workdir / f"results/figures/{model}/mini/early_exit.pdf").stat().st_size
    maps = workdir / "results/maps/gpt/mini/mat/from_0.safetensors"
    before = {p: p.stat().st_mtime_ns for p in (workdir / "results").rglob("*") if p.is_file()}

    # nothing changed: nothing runs
    second = run_snakemake(workdir, "all")
    assert rules_run(second) == {}, second.stderr[-2000:]
    assert "Nothing to be done" in second.stdout + second.stderr

    # the validation size changes: validation states and what reads them, nothing else
    write_config(workdir, sizes={"train": 48, "validation": 12})
    third = run_snakemake(workdir, "all")
    assert rules_run(third) == {
        "extract_hidden": 2,
        "r2_table": 2,
        "plot_r2": 4,
        "decode_predictions": 4,
        "prediction_table": 2,
        "plot_prediction": 2,
        "prediction_examples": 2,
        "early_exit": 2,
        "plot_early_exit": 2,
        "all": 1,
    }
    assert maps.stat().st_mtime_ns == before[maps]
    assert (
        pq.read_table(workdir / "results/hidden/gpt/mini/validation/positions.parquet").num_rows
        == 12
    )

    # the training size changes: training states, fits, and everything after them
    write_config(workdir, sizes={"train": 40, "validation": 12})
    fourth = run_snakemake(workdir, "all")
    # (id's predictions do not read the training split: they stay)
    assert rules_run(fourth) == {
        "extract_hidden": 2,
        "fit_mat": 4,
        "r2_table": 2,
        "plot_r2": 4,
        "decode_predictions": 2,
        "prediction_table": 2,
        "plot_prediction": 2,
        "prediction_examples": 2,
        "early_exit": 2,
        "plot_early_exit": 2,
        "all": 1,
    }

    # a summary setting: only the summary and its figure
    write_config(workdir, sizes={"train": 40, "validation": 12}, prediction={"bootstrap": 200})
    fifth = run_snakemake(workdir, "all")
    assert rules_run(fifth) == {"prediction_table": 2, "plot_prediction": 2, "all": 1}

    # an early-exit setting: only the sweep and its figure (the confidences are not recomputed)
    write_config(
        workdir,
        sizes={"train": 40, "validation": 12},
        prediction={"bootstrap": 200},
        early_exit={"tau": 2.0},
    )
    sixth = run_snakemake(workdir, "all")
    assert rules_run(sixth) == {"early_exit": 2, "plot_early_exit": 2, "all": 1}


def test_same_config_gives_identical_tables(workdir, tmp_path):
    run_snakemake(workdir, "all")
    reference = workdir / "results/metrics/bert/mini/r2.parquet"
    other = tmp_path / "again"
    other.mkdir()
    for name in ("tiny-gpt2", "tiny-bert", "text.txt"):
        os.symlink(workdir / name, other / name)
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    (other / "config.yaml").write_text(yaml.safe_dump(config))
    run_snakemake(other, "results/metrics/bert/mini/r2.parquet")
    assert pq.read_table(reference).equals(
        pq.read_table(other / "results/metrics/bert/mini/r2.parquet")
    )


def test_bad_config_fails_before_any_job(workdir, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["sizes"]["validation"] = 0
    (bad / "config.yaml").write_text(yaml.safe_dump(config))
    proc = run_snakemake(bad, "all", check=False)
    assert proc.returncode != 0
    assert "config key 'sizes.validation'" in proc.stderr
    assert not (bad / "results").exists()


def test_prediction_from_a_bare_encoder_fails_while_planning(workdir, tmp_path):
    save_model("bert", tmp_path / "encoder", layers=2, width=16)
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["models"] = {"enc": {"source": str(tmp_path / "encoder")}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    proc = run_snakemake(tmp_path, "all", check=False)
    assert proc.returncode != 0
    assert "model 'enc' (BertModel) has no decoder head" in proc.stderr
    assert "masked-token prediction" in proc.stderr and "models.enc.predict: false" in proc.stderr
    assert not (tmp_path / "results").exists()
    config["models"]["enc"]["predict"] = False
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    planned = run_snakemake(tmp_path, "all", "-n")
    assert "decode_predictions" not in planned.stdout and "extract_hidden" in planned.stdout


def test_paper_config_plans_offline(tmp_path):
    (tmp_path / "config.yaml").write_text((ROOT / "configs/paper.yaml").read_text())
    proc = run_snakemake(tmp_path, "all", "-n")
    out = proc.stdout + proc.stderr
    for model in ("gpt2", "gpt2-xl", "bert-large-uncased"):
        assert f"model={model}" in out
    assert "download_corpus" in out and "resolve_model" in out
    assert not (tmp_path / "results").exists()
