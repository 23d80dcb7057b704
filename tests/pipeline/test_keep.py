"""A failed rebuild costs nothing already computed: outputs that Snakemake deleted for a job
that then failed are put back, with Snakemake's record of how they were made."""

import os
import shutil
from pathlib import Path

import pytest
from harness import copy_run, rules_run, run_snakemake, snapshot

from jtc.pipeline.keep import Keeper

ROOT = Path(__file__).resolve().parents[2]


def make_results(root):
    results = root / "results"
    (results / "hidden/m/c/train").mkdir(parents=True)
    for name in ("layer_0.parquet", "layer_1.parquet", ".snakemake_timestamp"):
        (results / "hidden/m/c/train" / name).write_bytes(os.urandom(64))
    (results / "metrics/m/c").mkdir(parents=True)
    (results / "metrics/m/c/r2.parquet").write_bytes(b"old table")
    (results / "metrics/m/c/r2.csv").write_bytes(b"old csv")
    (results / "submodules/m/c/prefix").mkdir(parents=True)
    (results / "submodules/m/c/prefix/jump_0.parquet").write_bytes(b"temporary")
    return results


def test_deleted_outputs_come_back_whole_with_their_records(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Snakemake's keys are paths relative to the working directory
    results = make_results(tmp_path).relative_to(tmp_path)
    records = {str(p): f"record of {p.name}" for p in results.rglob("*")}
    records["results/metrics/m/c/r2.csv"] = None  # an output Snakemake has no record of
    written, deleted = {}, []
    keeper = Keeper(
        results,
        "kept",
        records.get,
        written.__setitem__,
        deleted.append,
        incomplete=lambda path: path.endswith("layer_9.parquet"),
        temporary=["results/submodules/*/*/prefix/*"],
    )
    (results / "metrics/m/c/layer_9.parquet").write_bytes(b"a killed job's")
    before = snapshot(tmp_path)
    assert keeper.save() == 3  # the states folder whole, two tables; not the temporary file
    # a run deletes the outputs of the jobs it starts; one job rebuilds its table, others fail
    shutil.rmtree(results / "hidden/m/c/train")
    (results / "metrics/m/c/r2.parquet").unlink()
    (results / "metrics/m/c/r2.csv").unlink()
    (results / "metrics/m/c/layer_9.parquet").unlink()
    (results / "submodules/m/c/prefix/jump_0.parquet").unlink()  # used, then removed
    (results / "metrics/m/c/r2.parquet").write_bytes(b"new table")  # a job rebuilt it
    restored = keeper.restore()
    assert sorted(map(str, restored)) == [
        "results/hidden/m/c/train",
        "results/metrics/m/c/r2.csv",
    ]
    after = snapshot(tmp_path)
    del before["results/metrics/m/c/r2.parquet"], after["results/metrics/m/c/r2.parquet"]
    del before["results/submodules/m/c/prefix/jump_0.parquet"]
    del before["results/metrics/m/c/layer_9.parquet"]  # incomplete: not kept
    assert after == before  # same bytes, same time stamps
    assert (results / "metrics/m/c/r2.parquet").read_bytes() == b"new table"  # stays
    assert written == {"results/hidden/m/c/train": "record of train"}
    assert deleted == ["results/metrics/m/c/r2.csv"]  # no record before: none after
    assert not (tmp_path / "kept").exists()


@pytest.mark.workflow
def test_a_job_that_fails_at_run_time_loses_nothing(tiny_run, tmp_path):
    """Extraction (folder outputs, the first stage after the model) made to fail after
    Snakemake deleted its outputs: results/ is byte-identical afterwards, and once the cause
    is gone nothing reruns. (File outputs: the test above.)"""
    module, function, failing = "data/extract.py", "extract", "extract_hidden"
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "workflow", repo / "workflow")
    shutil.copytree(
        ROOT / "src/jtc", repo / "src/jtc", ignore=shutil.ignore_patterns("__pycache__")
    )
    work = copy_run(tiny_run, tmp_path / "work")
    snakefile = repo / "workflow/Snakefile"
    before = snapshot(work)
    edited = repo / "src/jtc" / module
    original = edited.read_text()
    edited.write_text(
        original + f"\n\ndef {function}(*args, **kwargs):\n    raise RuntimeError('injected')\n"
    )
    proc = run_snakemake(work, "all", check=False, snakefile=snakefile)
    assert proc.returncode != 0 and f"Error in rule {failing}" in proc.stdout + proc.stderr
    assert "jtc: put back" in proc.stdout + proc.stderr
    assert snapshot(work) == before
    edited.write_text(original)
    assert rules_run(run_snakemake(work, "all", "-n", snakefile=snakefile)) == {}


def test_links_left_by_a_killed_run_are_dropped(tmp_path):
    from jtc.pipeline.keep import drop_stale

    dead, alive, mine = tmp_path / "999999999", tmp_path / "1", tmp_path / str(os.getpid())
    for folder in (dead, alive, mine):
        (folder / "results").mkdir(parents=True)
    drop_stale(tmp_path, mine)
    assert not dead.exists() and mine.exists()
    assert alive.exists()  # process 1 lives (another user's: left alone)
