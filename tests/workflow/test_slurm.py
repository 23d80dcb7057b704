"""The workflow on a real (single-node) SLURM, through Snakemake's executor plugin and the
repository's SLURM profile: the same tables as a local run, a job cancelled mid-run is retried,
and a job that always fails stops the run naming its rule."""

import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from safetensors.numpy import load_file
from slurm_runs import TARGETS

pytestmark = pytest.mark.workflow
GPU_RULES = (
    "extract_hidden",
    "decode_predictions",
    "fit_map",
    "train_map",
    "record_parts",
    "replace_parts",
)


@pytest.fixture(scope="module")
def runs(early_runs):
    """The same config run locally and on SLURM (tests/helpers/slurm_runs.py, started as the
    session started: conftest.py). The SLURM run also has a model whose weights are damaged
    (its resolve_model job fails on every attempt), and its first running extract_hidden job
    is cancelled with scancel: the profile's retries must carry it through."""
    return early_runs["slurm"].result()


def same_outputs(a: Path, b: Path) -> None:
    for target in TARGETS:
        assert pq.read_table(a / target).equals(pq.read_table(b / target)), target
    for name in ("mat", "njtc", "tuned_lens"):
        x = load_file(a / f"results/maps/gpt/mini/{name}.safetensors")
        y = load_file(b / f"results/maps/gpt/mini/{name}.safetensors")
        assert sorted(x) == sorted(y) and all(np.array_equal(x[k], y[k]) for k in x), name


def test_slurm_run_equals_a_local_run_and_survives_a_cancelled_job(runs):
    out = runs["out"]
    assert "cancelled" in runs, "no extract_hidden job was seen running"
    assert "CANCELLED" in out and "Trying to restart job" in out, out[-5000:]
    # every job went through SLURM, one submission each (extract_hidden: twice for the cancel)
    submitted = [line for line in out.splitlines() if "has been submitted with SLURM" in line]
    assert sum("slurm_logs/rule_extract_hidden/gpt_" in line for line in submitted) == 3
    for rule in ("fit_map", "train_map", "r2_table", "parameter_table", "decode_predictions"):
        assert sum(f"slurm_logs/rule_{rule}/gpt_" in line for line in submitted) >= 1, rule
    # the profile's GPU requests reach SLURM: a GPU in the gpu partition for the GPU rules only
    for job in runs["jobs"]:
        gpu_rules = tuple(f"rule_{r}" for r in GPU_RULES)
        gpu_rule = job["comment"].startswith(gpu_rules)
        assert (job["partition"] == "gpu" and "gpu:1" in job["gpus"]) == gpu_rule, runs["jobs"]
    shares = re.findall(r"\bgpu_memory_percent=(\d+)", out)
    assert shares and set(shares) == {"0"}, shares  # the submitting machine's GPU is not theirs
    same_outputs(runs["local"], runs["slurm"])


def test_a_job_that_always_fails_stops_the_run_naming_its_rule(runs):
    out = runs["out"]
    assert runs["rc"] != 0
    assert "Error in rule resolve_model" in out and "wildcards: model=broken" in out, out[-4000:]
    # tried three times (the profile's retries: 2), then given up, the other jobs finished
    assert (
        sum(
            "slurm_logs/rule_resolve_model/broken/" in line
            for line in out.splitlines()
            if "has been submitted with SLURM" in line
        )
        == 3
    )
    assert not (runs["slurm"] / "results/models/broken").exists()
