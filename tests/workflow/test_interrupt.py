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
from harness import make_tiny_project, run_snakemake, start_snakemake
from safetensors.numpy import load_file

from jtc.runs.locks import workers_in

pytestmark = pytest.mark.workflow

# the stages in the order they first run; the workflow is killed as each one starts
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
# must end by themselves (jtc.runs.watchdog) so that the plain rerun finds no job still writing
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


def kill_when_started(work, stage, seconds):
    """Run the workflow until a job of `stage` has started, then SIGKILL its process group.
    Returns whether the kill happened (False: the run ended first). A stage that has not
    started after `seconds` (on an idle machine, stretched on a busy one: waits.py) fails."""
    proc, log = start(work)
    patience = waits.Patience(seconds, f"a job of {stage} to start (its log in logs/{stage})")
    try:
        while patience.left() > 0:
            if proc.poll() is not None:
                return False
            if any((work / "logs" / stage).rglob("*.log")):
                time.sleep(0.2)  # inside the job: a partial output may exist now
                if stage in ALONE:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    assert_jobs_end(work, stage)
                else:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                return True
            time.sleep(0.05)
        raise AssertionError(patience.message())
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def assert_jobs_end(work, stage, seconds=60.0):
    """The orphaned jobs of a killed run end by themselves, saying why in their logs (they check
    every second or so; `seconds` on an idle machine, stretched on a busy one: waits.py)."""
    try:
        waits.wait_for(lambda: not workers_in(work), seconds, f"the jobs of {stage} to end")
    except AssertionError as waited:
        raise AssertionError(f"{waited}; still running: {workers_in(work)}") from None
    logs = "".join(p.read_text() for p in (work / "logs" / stage).rglob("*.log"))
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
    started = time.monotonic()
    run_snakemake(reference, "all")
    # a stage starts within the time of a whole run (measured: the reference run), twice over
    seconds = max(60.0, 2 * (time.monotonic() - started))
    work = tmp_path / "killed"
    shutil.copytree(
        reference,
        work,
        ignore=shutil.ignore_patterns("results", ".snakemake", "logs", "benchmarks"),
    )
    killed = [stage for stage in STAGES if kill_when_started(work, stage, seconds)]
    assert len(killed) >= 10, killed  # at least ten different moments, over every stage
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
