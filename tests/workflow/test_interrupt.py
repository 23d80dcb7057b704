"""Interrupted runs: SIGKILL the workflow (Snakemake and its jobs, or Snakemake alone: its jobs
then end themselves) at the start of every stage; a plain rerun completes and its tables equal,
bit for bit, those of an uninterrupted run."""

import os
import shutil
import signal
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import waits
from harness import TIMEOUT, make_tiny_project, run_snakemake, start_snakemake
from safetensors.numpy import load_file

from jtc.pipeline.locks import workers_in

pytestmark = pytest.mark.workflow

# how long a stage may take to start (on an idle machine, stretched on a busy one: waits.py):
# the whole run takes about 20 s on 2 idle cores
STAGE_S = 300.0
# the stages of the run (among others); the workflow is killed as each one starts
STAGES = [
    "prepare_corpus",
    "resolve_model",
    "extract_hidden",
    "fit_map",
    "r2_table",
    "decode_predictions",
    "prediction_table",
    "prediction_examples",
    "plot_r2",
    "early_exit",
    "plot_prediction",
    "plot_early_exit",
]
# at these, only the Snakemake process is killed (kill -9 of it alone, the OOM killer): its jobs
# must end by themselves (jtc.pipeline.watchdog) so that the plain rerun finds no job still writing
ALONE = {"extract_hidden", "decode_predictions"}


def make_workdir(work):
    """The tiny project with its gpt model only, 150 sentences."""
    return make_tiny_project(
        work, models=("gpt",), sentences=150, sizes={"train": 40, "validation": 12}
    )


def start(work):
    log = open(work / "run.log", "a")  # noqa: SIM115 - closed with the process
    proc = start_snakemake(work, "all", stdout=log, stderr=log, start_new_session=True)
    return proc, log


def kill_at_a_new_stage(work, killed, seconds) -> str | None:
    """Run the workflow until a job of a stage not in `killed` has started, then SIGKILL its
    process group (at the ALONE stages: Snakemake alone). Returns that stage, or None when the
    run ended first. No such job started after `seconds` (on an idle machine, stretched on a
    busy one: waits.py) fails."""
    since = time.time_ns()
    proc, log = start(work)
    patience = waits.Patience(seconds, f"a job of a stage other than {sorted(killed)} to start")
    try:
        while patience.left() > 0:
            if proc.poll() is not None:
                return None
            stage = new_stage(work, killed)
            if stage is not None:
                time.sleep(0.2)  # inside the job: a partial output may exist now
                if stage in ALONE:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    assert_jobs_end(work, stage, since)
                else:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                return stage
            time.sleep(0.05)
        raise AssertionError(patience.message())
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def new_stage(work, killed) -> str | None:
    """A stage not in `killed` whose job works in `work` now (the first by name), or None."""
    working = {w.name for w in workers_in(work) if w.kind == "job"} - set(killed)
    return min(working) if working else None


def assert_jobs_end(work, stage, since_ns, seconds=60.0):
    """The orphaned jobs of a killed run end by themselves, saying why in the logs they wrote
    since `since_ns` (they check every second or so; `seconds` on an idle machine, stretched on
    a busy one: waits.py)."""
    try:
        waits.wait_for(lambda: not workers_in(work), seconds, f"the jobs of {stage} to end")
    except AssertionError as waited:
        raise AssertionError(f"{waited}; still running: {workers_in(work)}") from None
    logs = "".join(
        p.read_text()
        for p in (work / "logs" / stage).rglob("*.log")
        if p.stat().st_mtime_ns >= since_ns
    )
    assert "is gone" in logs or "job CPU" in logs, logs[-2000:]  # ended, or had finished


def tables(work):
    """Every Parquet table of the results, as {relative path: {column: values}}."""
    found = {}
    for path in sorted((work / "results").rglob("*.parquet")):
        if "/models/" in str(path):
            continue
        table = pq.read_table(path)
        columns = {}
        for name in table.column_names:
            column = table[name].combine_chunks()
            if pa.types.is_fixed_size_list(column.type):  # hidden states
                column = column.flatten()
            columns[name] = column.to_numpy(zero_copy_only=False)
        found[str(path.relative_to(work))] = columns
    return found


def test_killed_at_every_stage_a_plain_rerun_completes_bit_for_bit(tmp_path):
    reference = make_workdir(tmp_path / "reference")
    work = tmp_path / "killed"
    shutil.copytree(reference, work)
    # the uninterrupted run, beside the killed ones (its own folder, its own process group)
    with open(tmp_path / "reference.log", "w") as log:
        uninterrupted = start_snakemake(
            reference, "all", stdout=log, stderr=log, start_new_session=True
        )
        try:
            # each attempt runs until a stage not interrupted yet starts: every stage, once
            killed = []
            while (stage := kill_at_a_new_stage(work, killed, STAGE_S)) is not None:
                killed.append(stage)
            waits.finish(uninterrupted, TIMEOUT, "the uninterrupted run")
        finally:
            if uninterrupted.poll() is None:
                os.killpg(uninterrupted.pid, signal.SIGKILL)
                uninterrupted.wait()
    assert uninterrupted.returncode == 0, (tmp_path / "reference.log").read_text()[-4000:]
    assert set(STAGES) <= set(killed), killed  # killed as each stage started
    run_snakemake(work, "all")  # the plain rerun (no --unlock, no flags)
    want, got = tables(reference), tables(work)
    assert sorted(got) == sorted(want)
    for path, columns in want.items():
        for column, values in columns.items():
            assert np.array_equal(got[path][column], values, equal_nan=values.dtype.kind == "f"), (
                path,
                column,
            )
    for maps in (reference / "results/maps").rglob("*.safetensors"):
        mine, theirs = load_file(work / maps.relative_to(reference)), load_file(maps)
        assert sorted(mine) == sorted(theirs)
        assert all(np.array_equal(mine[k], theirs[k]) for k in theirs)
    leftovers = [p for p in (work / "results").rglob("*") if ".tmp-" in p.name]
    assert leftovers == []
