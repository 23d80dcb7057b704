"""jtc deployed as a Snakemake module (docs/deploying.md), the workflow catalog's standard usage:
a folder of its own whose workflow/Snakefile is what `snakedeploy deploy-workflow` writes, with
jtc's Snakefile given by its path (a checkout) or by github(...) (no file of the workflow on
disk: the scripts, rule files, report templates and environment are read through Snakemake's
source cache, and jtc is the installed package)."""

import numpy as np
import pyarrow.parquet as pq
import pytest
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
    write_config,
)

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
    return folder, rules_run(run_deployed(folder, R2))


def made_and_stamped(path):
    table = pq.read_table(path)
    assert table.num_rows and np.isfinite(table.column("r2").to_numpy()).all()
    assert b"jtc.stamp" in (table.schema.metadata or {})
    return table


def test_a_module_by_its_path_runs_like_the_workflow_itself(by_path):
    folder, ran = by_path
    assert ran == JOBS
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
