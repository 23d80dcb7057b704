"""jtc deployed as a Snakemake module (docs/deploying.md), the workflow catalog's standard usage:
a folder of its own whose workflow/Snakefile is what `snakedeploy deploy-workflow` writes, with
jtc's Snakefile given by its path (a checkout) or by github(...) (no file of the workflow on
disk: the scripts, rule files, report templates and environment are read through Snakemake's
source cache, and jtc is the installed package)."""

import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
import waits
from damage import flip_byte
from deploy import (
    deploy,
    github_declaration,
    installed_copy,
    run_deployed,
    seed_github_cache,
)
from harness import (
    SNAKEFILE,
    make_tiny_project,
    planned,
    read_config,
    rules_run,
    run_snakemake,
    snakemake_env,
    snapshot,
    write_config,
)

from jtc.model.manifest import safetensors_header
from jtc.pipeline.locks import workers_in

pytestmark = pytest.mark.workflow

R2 = "results/metrics/gpt/mini/r2.parquet"
JOBS = {"prepare_corpus": 1, "resolve_model": 1, "extract_hidden": 2, "fit_map": 1, "r2_table": 1}


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    """The tiny project's config with one tiny model: the smallest run of an r² table."""
    return read_config(make_tiny_project(tmp_path_factory.mktemp("project"), models=("gpt",)))


@pytest.fixture(scope="module")
def by_path(config, tmp_path_factory):
    """A deployment of this checkout's workflow/Snakefile by its path, its r² table made."""
    folder = deploy(tmp_path_factory.mktemp("by-path"), f'"{SNAKEFILE}"', config)
    return folder, run_deployed(folder, R2)


def made_and_stamped(path):
    table = pq.read_table(path)
    assert table.num_rows and np.isfinite(table.column("r2").to_numpy()).all()
    assert b"jtc.stamp" in (table.schema.metadata or {})
    return table


def test_a_module_by_its_path_runs_like_the_workflow_itself(by_path):
    folder, run = by_path
    assert rules_run(run) == JOBS
    # jtc's handlers ran though the deployed Snakefile is the main one: the end-of-run notes
    # (jtc.pipeline.summary), and the results kept as the jobs started, dropped at the end
    assert "jtc: done. Tables: results/metrics/" in run.stderr, run.stderr[-3000:]
    assert not list(folder.glob(".snakemake/jtc-kept/*/*"))
    made_and_stamped(folder / R2)
    assert rules_run(run_deployed(folder, R2, "-n")) == {}
    # the same code hashes and records as a direct run: the workflow run directly on this
    # folder finds everything up to date
    direct = run_snakemake(folder, R2, "-n", configfile=folder / "config/config.yaml")
    assert rules_run(direct) == {}


def test_a_module_from_github_runs_on_the_installed_jtc(by_path, config, tmp_path):
    cache = tmp_path / "cache"
    seed_github_cache(cache)
    site = installed_copy(tmp_path / "site")
    env = {"XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(site)}
    folder = deploy(tmp_path / "deployed", github_declaration(), config)
    assert rules_run(run_deployed(folder, R2, env=env)) == JOBS
    assert made_and_stamped(folder / R2).equals(pq.read_table(by_path[0] / R2))
    # the jobs imported the jtc that planning imported and hashed, through a folder holding it
    # alone (not the whole site-packages on PYTHONPATH)
    link = folder / ".snakemake/jtc-package/jtc"
    assert link.resolve() == (site / "jtc").resolve()
    assert [p.name for p in link.parent.iterdir()] == ["jtc"]
    assert rules_run(run_deployed(folder, R2, "-n", env=env)) == {}


def test_a_module_from_github_without_jtc_installed_names_the_install(config, tmp_path):
    cache = tmp_path / "cache"
    seed_github_cache(cache)
    missing = tmp_path / "site/jtc"  # jtc not installed: importing it fails as then
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'jtc'\", name='jtc')\n"
    )
    env = {"XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(missing.parent)}
    folder = deploy(tmp_path / "deployed", github_declaration(), config)
    proc = run_deployed(folder, R2, "-n", env=env, check=False)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "jtc is not importable" in output and "pip install" in output, output


def test_a_configfile_given_replaces_the_deployed_config_without_jtcs_profile(config, tmp_path):
    # Snakemake merges a --configfile into the deployed config/config.yaml unless the profile
    # says replace-workflow-config; jtc replaces it either way, as in direct use
    folder = deploy(tmp_path / "deployed", f'"{SNAKEFILE}"', config, profile=False)
    other = write_config(tmp_path, {**config, "models": {"other": config["models"]["gpt"]}})
    proc = run_deployed(folder, "-n", "--configfile", other)
    assert planned(proc, "model") == {"other"}


STATES = ["results/hidden/gpt/mini/train", "results/hidden/gpt/mini/validation"]


def states(folder) -> dict[str, bytes]:
    """{relative path: bytes} of every file of the r² table's two states folders."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for name in STATES
        for p in sorted((folder / name).rglob("*"))
        if p.is_file()
    }


def test_a_deployed_module_puts_back_what_jobs_failing_on_a_damaged_model_deleted(
    by_path, tmp_path
):
    """jtc's guards are its onstart/onerror handlers, which Snakemake runs for the main
    Snakefile alone (jtc.pipeline.hooks joins them to the deployed one): a byte of the cached
    model's weights flipped with the mtime put back, the states rebuilt from it fail naming the
    file, and the states folders that the failed jobs deleted are back as they were."""
    work = tmp_path / "deployed"
    shutil.copytree(by_path[0], work, symlinks=True)  # the times kept: up to date
    weights = work / "results/models/gpt/model.safetensors"
    start, header = safetensors_header(weights)  # a weight of the first block, which it reads
    first, _ = header["transformer.h.0.attn.c_attn.weight"]["data_offsets"]
    flip_byte(weights, start + first + 5, keep_mtime=True)
    before, kept = snapshot(work), states(work)
    assert len(kept) > 2
    failed = run_deployed(work, R2, "--forcerun", "extract_hidden", check=False)
    assert failed.returncode != 0
    logs = "".join(p.read_text() for p in (work / "logs/extract_hidden").rglob("*.log"))
    assert f"{weights.relative_to(work)} is damaged" in logs, logs[-3000:]
    assert "delete the folder results/models/gpt and rerun" in logs
    assert snapshot(work) == before, failed.stderr[-3000:]  # the states are back
    assert states(work) == kept
    assert rules_run(run_deployed(work, R2, "-n")) == {}  # with Snakemake's records


def test_the_jobs_of_a_killed_deployed_run_end_themselves(by_path, tmp_path):
    """The watchdog (jtc.pipeline.watchdog): Snakemake alone killed with SIGKILL while its
    states are extracted, its jobs see the run is gone, say so in their logs and end, writing
    nothing more."""
    work = tmp_path / "deployed"
    shutil.copytree(by_path[0], work, symlinks=True)
    since = time.time_ns()
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", R2, "--forcerun", "extract_hidden"]
    with open(work / "run.log", "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=work, env=snakemake_env(), stdout=log, stderr=log, start_new_session=True
        )
        try:
            waits.wait_for(
                lambda: (
                    proc.poll() is not None
                    or any(w.name == "extract_hidden" and w.kind == "job" for w in workers_in(work))
                ),
                300,
                "a job of extract_hidden to start",
            )
            assert proc.poll() is None, (work / "run.log").read_text()[-3000:]
            time.sleep(0.2)  # inside the job
            os.kill(proc.pid, signal.SIGKILL)  # Snakemake alone
            proc.wait()
            waits.wait_for(lambda: not workers_in(work), 60, "the orphaned jobs to end")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    logs = "".join(
        p.read_text()
        for p in (work / "logs/extract_hidden").rglob("*.log")
        if p.stat().st_mtime_ns >= since
    )
    assert "is gone" in logs, logs[-3000:]
    made = [
        name
        for name in STATES
        if (work / name / "info.json").exists()
        and (work / name / "info.json").stat().st_mtime_ns >= since
    ]
    assert not made, made  # ended before writing their outputs
