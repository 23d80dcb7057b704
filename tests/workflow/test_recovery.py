"""The documented recoveries work as written, on the finished tiny run: an output of any kind
deleted by hand is made again by the same command; an output copied over another, or left by a
run with other settings, is refused before any job starts (naming it and the command that
rebuilds it) and nothing under results/ changes; `--config key=value` alone sets keys of
config/config.yaml; a YAML error there is named with its line."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest
import waits
import yaml
from harness import (
    TINY_PRUNING,
    copy_run,
    read_config,
    rules_run,
    run_snakemake,
    snakemake_command,
    snakemake_env,
    snapshot,
)

pytestmark = pytest.mark.workflow

# one output of every kind, each deleted by hand
DELETED = [
    "results/models/bert",  # a cached model (folder)
    "results/hidden/gpt/mini/validation",  # a states folder
    "results/maps/gpt/mini/mat.safetensors",  # a map
    "results/maps/gpt/mini/shortlist.safetensors",  # the shortlist's factorisation
    "results/predictions/gpt/mini/id.parquet",  # a per-position file
    "results/metrics/gpt/mini/parameters.parquet",  # a table
    "results/metrics/gpt/mini/r2.csv",  # a CSV beside a table
    "results/figures/gpt/mini/r2.png",  # a figure
]
TABLES = ["r2", "prediction", "early_exit", "parameters"]


def values(folder, model, table):
    return pq.read_table(folder / f"results/metrics/{model}/mini/{table}.parquet").to_pydict()


def test_outputs_copied_over_others_or_edited_are_refused_and_every_kind_deleted_is_made_again(
    tiny_run, tmp_path
):
    """Found while the run plans, even when nothing else is to be done; the commands the
    messages give, and deleting one output of every kind, then one rerun: all made again, with
    the same tables."""
    work = copy_run(tiny_run, tmp_path / "work")
    maps = work / "results/maps/gpt/mini"
    shutil.copy(maps / "mat.safetensors", maps / "shortlist.safetensors")
    csv = work / "results/metrics/bert/mini/r2.csv"
    csv.write_text(csv.read_text().replace("0.", "1.", 1))  # one number edited
    before = snapshot(work)
    proc = run_snakemake(work, "all", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "results/maps/gpt/mini/shortlist.safetensors is not the output it is read as" in out
    assert "holds results/maps/gpt/mini/mat.safetensors" in out
    assert "rm results/maps/gpt/mini/shortlist.safetensors" in out
    assert "results/metrics/bert/mini/r2.csv is not the file its job wrote" in out
    assert snapshot(work) == before  # refused before any job: nothing touched
    for name in [*DELETED, "results/metrics/bert/mini/r2.csv"]:
        path = work / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    run_snakemake(work, "all")
    for name in DELETED:
        assert (work / name).exists(), f"{name} was not made again"
    assert csv.read_bytes() == (tiny_run / "results/metrics/bert/mini/r2.csv").read_bytes()
    for model in ("gpt", "bert"):
        for table in TABLES:
            assert values(work, model, table) == values(tiny_run, model, table), (model, table)
    assert rules_run(run_snakemake(work, "all", "-n")) == {}


def test_an_output_of_a_run_with_other_settings_is_refused(tiny_run, tmp_path):
    """Another experiment in a copy (early exit's tau changed) names what it replaces; its
    early-exit table put into the first run's folder is refused, not plotted."""
    other = copy_run(tiny_run, tmp_path / "other")
    config = read_config(other)
    config["early_exit"] = {"tau": 2.0}
    (other / "config.yaml").write_text(yaml.safe_dump(config))
    proc = run_snakemake(other, "all")
    replaced = "jtc: this run replaces"
    assert replaced in proc.stderr and "results/metrics/gpt/mini/early_exit.parquet" in proc.stderr
    assert "results/maps" not in proc.stderr.split(replaced)[1].splitlines()[0]

    work = copy_run(tiny_run, tmp_path / "work")
    table = "results/metrics/gpt/mini/early_exit.parquet"
    # the table alone: the CSV beside it still has this run's settings, found while planning
    shutil.copy(other / table, work / table)  # newer than its plot: the plot would be remade
    before = snapshot(work)
    proc = run_snakemake(work, "all", "-n", check=False)
    assert proc.returncode != 0
    assert f"{table} was made by the same job as" in proc.stdout + proc.stderr
    # every output of that job, with their records: refused before any job starts
    names = [n for n in (other / "results/metrics/gpt/mini").iterdir() if "early_exit" in n.name]
    records = other / "results/.stamps/metrics/gpt/mini"
    for name in names:
        shutil.copy(name, work / table.replace("early_exit.parquet", name.name))
        if (records / f"{name.name}.json").exists():
            shutil.copy(records / f"{name.name}.json", work / records.relative_to(other))
    before = snapshot(work)
    proc = run_snakemake(work, "all", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"{table} was made with other settings than this run's" in out
    assert snapshot(work) == before
    for name in names:
        (work / table.replace("early_exit.parquet", name.name)).unlink()
    run_snakemake(work, "all")
    assert values(work, "gpt", "early_exit") == values(tiny_run, "gpt", "early_exit")


def without_configfile(work, *args):
    """Snakemake on `work` with its config/config.yaml, no --configfile (as the README runs it)."""
    cmd = snakemake_command(work, *args, cores=1)
    at = cmd.index("--configfile")
    del cmd[at : at + 2]
    return waits.run(
        cmd, 600, f"snakemake to finish: {' '.join(cmd)}", text=True, env=snakemake_env()
    )


def test_config_on_the_command_line_alone_sets_keys_of_the_default_config(tiny_run, tmp_path):
    work = copy_run(tiny_run, tmp_path / "work")
    (work / "config").mkdir()
    shutil.move(work / "config.yaml", work / "config/config.yaml")
    assert rules_run(without_configfile(work, "all", "-n")) == {}
    proc = without_configfile(work, "all", "-n", "--config", "seed=3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert rules_run(proc)["extract_hidden"] == 4  # the seed draws other positions
    # a YAML error in config/config.yaml: named with its file and line
    text = (work / "config/config.yaml").read_text()
    (work / "config/config.yaml").write_text(text + "models: [gpt\n")
    bad = without_configfile(work, "all", "-n")
    out = bad.stdout + bad.stderr
    assert bad.returncode != 0
    assert "config file config/config.yaml is not valid YAML" in out
    assert f'in "config/config.yaml", line {len(text.splitlines()) + 1}' in out, out[-2000:]


# a pruning block of the tiny GPT-2 (2 blocks, length 1) with one benchmark task, two documents
BENCHMARKED = {**TINY_PRUNING, "benchmarks": {"tasks": ["piqa"], "limit": 2}}


def test_a_task_file_edited_with_its_size_and_mtime_kept_is_refused_and_rebuilt(tmp_path):
    """A PIQA gold label changed, still valid JSON, the size and mtime put back: planning
    cannot see it, and run_benchmarks, rerun, refuses it (not a wrong accuracy and exit 0),
    naming the file; the recovery it names, `rm -r` the folder and `snakemake benchmarks`
    (`all` does not make the task files here), writes them again and scores them."""
    import os

    from harness import make_tiny_project, write_config
    from transformers import AutoTokenizer

    work = make_tiny_project(tmp_path / "work", models=("gpt",))
    tokenizer = AutoTokenizer.from_pretrained(work / "tiny-gpt2")
    tokenizer.eos_token = "[SEP]"  # lm-eval's prefix
    tokenizer.save_pretrained(work / "tiny-gpt2")
    write_config(work, {**read_config(work), "pruning": BENCHMARKED})
    run_snakemake(work, "benchmarks")
    tasks = work / "results/benchmarks/tasks"
    documents = tasks / "piqa.jsonl"
    written, stat = documents.read_bytes(), documents.stat()
    at = written.index(b'"label": ') + 9
    documents.write_bytes(
        written[:at] + (b"1" if written[at] == ord("0") else b"0") + written[at + 1 :]
    )
    os.utime(documents, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    scored = work / "results/pruning/gpt/mini/benchmarks.parquet"
    before = scored.read_bytes()

    proc = run_snakemake(work, "benchmarks", "--forcerun", "run_benchmarks", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Error in rule run_benchmarks" in out
    assert "results/benchmarks/tasks/piqa.jsonl is not the file its job wrote" in out
    recovery = "rm -r results/benchmarks/tasks, then `snakemake benchmarks`"
    assert recovery in out
    assert not scored.exists() or scored.read_bytes() == before  # nothing scored from it

    shutil.rmtree(tasks)  # the recovery, as written
    done = run_snakemake(work, "benchmarks")
    assert {"benchmark_tasks", "run_benchmarks"} <= set(rules_run(done))
    assert documents.read_bytes() == written
    assert rules_run(run_snakemake(work, "benchmarks", "-n")) == {}
