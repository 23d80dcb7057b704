"""The disk a run writes, as estimated while planning (jtc.pipeline.disk), against what a run of
a tiny GPT-2 of width 256 writes: said by a dry run and as the jobs start, within 20% in all and
for each large output."""

import re
from pathlib import Path

import pytest
import yaml
from disk_use import said_estimate, size
from harness import make_tiny_project, run_snakemake

from jtc.pipeline.config import validate_config
from jtc.pipeline.disk import Job, job_bytes, large_bytes

pytestmark = pytest.mark.workflow


def run_jobs(proc) -> list[Job]:
    """The jobs a run lists, with their number of output files."""
    jobs = []
    text = proc.stdout + proc.stderr
    for block in re.split(r"\n(?=(?:local)?(?:rule|checkpoint) \w+:)", text):
        rule = re.match(r"(?:local)?(?:rule|checkpoint) (\w+):", block)
        if not rule or rule.group(1) == "all":
            continue
        outputs = re.search(r"^\s+output: (.*)$", block, re.M)
        given = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        wildcards = dict(kv.split("=", 1) for kv in given.group(1).split(", ")) if given else {}
        jobs.append(Job(rule.group(1), wildcards, len(outputs.group(1).split(", "))))
    return jobs


def test_the_estimate_is_within_a_fifth_of_what_a_run_writes(tmp_path, monkeypatch):
    project = make_tiny_project(
        tmp_path,
        models=("gpt",),
        layers=4,
        width=256,
        sentences=300,
        sizes={"train": 200, "validation": 40},
        positions_per_sentence=4,
        methods=["id", "mat", "rrr", "njtc", "nnjtc"],
        # every pair in float32: what fit_map writes whether or not it reads these keys
        maps={"pairs": "all", "dtype": "float32"},
    )
    planned = said_estimate(run_snakemake(project, "all", "-n"))  # before the model is cached
    proc = run_snakemake(project, "all")
    assert said_estimate(proc) == planned
    written = sum(size(project / d) for d in ("results", "logs", "benchmarks"))
    assert planned == pytest.approx(written, rel=0.2), (planned, written)
    monkeypatch.chdir(project)  # the cached model's shape (results/models/gpt/info.json)
    config = validate_config(yaml.safe_load((project / "config.yaml").read_text()))
    jobs = run_jobs(proc)
    assert sum(job_bytes(j, config) for j in jobs) == pytest.approx(written, rel=0.2)
    results = Path("results")
    large = {
        "resolve_model": lambda w: [results / "models/gpt"],
        "extract_hidden": lambda w: [results / f"hidden/gpt/mini/{w['split']}"],
        "fit_map": lambda w: [results / f"maps/gpt/mini/{m}.safetensors" for m in ("mat", "rrr")],
        "train_map": lambda w: [results / f"maps/gpt/mini/{w['method']}.safetensors"],
        "decode_predictions": lambda w: list((results / "predictions/gpt/mini").glob("*")),
    }
    checked = []
    for job in jobs:
        if job.rule in large:
            real = sum(size(p) for p in large[job.rule](job.wildcards))
            estimate = large_bytes(job.rule, job.wildcards, config)
            checked.append((job.rule, dict(job.wildcards), estimate, real))
            assert estimate == pytest.approx(real, rel=0.2), checked[-1]
    assert {c[0] for c in checked} == set(large)
