"""A config given with --configfile replaces config/config.yaml (the paper's config, a one-model
config), and --config on the command line still overrides it."""

import shutil

import pytest
from harness import ROOT, copy_run, planned, read_config, rules_run, run_snakemake, write_config

pytestmark = pytest.mark.workflow


DEFAULT_MODELS = {"smollm2", "minilm", "tinybert"}
DEFAULT_CORPORA = {"news", "wiki"}
PAPER_MODELS = {
    "gpt2",
    "gpt2-medium",
    "gpt2-large",
    "gpt2-xl",
    "bert-base-uncased",
    "bert-large-uncased",
}
PAPER_CORPORA = {"leipzig_news", "leipzig_wiki"}
REPLACED = "Config file config/config.yaml is replaced by additional config"


def with_default_config(workdir):
    """The repository's config/ (config/config.yaml, the default experiment, and
    config/paper.yaml) copied into a working directory, as in a clone of the repository."""
    shutil.copytree(ROOT / "config", workdir / "config")
    assert (workdir / "config/config.yaml").is_file()
    return workdir


def test_paper_config_plans_offline_and_replaces_the_default(tmp_path):
    with_default_config(tmp_path)
    proc = run_snakemake(tmp_path, "all", "-n", configfile=tmp_path / "config/paper.yaml")
    out = proc.stdout + proc.stderr
    for model in ("gpt2", "gpt2-xl", "bert-large-uncased"):
        assert f"model={model}" in out
    assert "download_corpus" in out and "resolve_model" in out
    assert REPLACED in out
    # the paper's models and corpora, all of them and nothing of the default experiment
    assert planned(proc, "model") == PAPER_MODELS
    assert planned(proc, "corpus") == PAPER_CORPORA
    for name in DEFAULT_MODELS:
        assert f"model={name}" not in out and f"results/models/{name}" not in out
    for name in DEFAULT_CORPORA:
        assert f"results/corpora/{name}.parquet" not in out
    assert rules_run(proc)["resolve_model"] == 6 and rules_run(proc)["download_corpus"] == 2
    assert not (tmp_path / "results").exists()


def test_a_one_model_config_plans_only_that_model(tiny_project, tmp_path):
    with_default_config(tmp_path)
    config = read_config(tiny_project)
    config["models"] = {"gpt": config["models"]["gpt"]}
    write_config(tmp_path, config)
    proc = run_snakemake(tmp_path, "all", "-n")
    assert REPLACED in proc.stdout + proc.stderr
    assert planned(proc, "model") == {"gpt"}
    assert planned(proc, "corpus") == {"mini"}
    assert rules_run(proc)["resolve_model"] == 1 and rules_run(proc)["prepare_corpus"] == 1
    assert not (tmp_path / "results").exists()


def test_config_on_the_command_line_still_overrides_the_configfile(tiny_run, tmp_path):
    """--config sets single keys on top of the config file given with --configfile (which
    itself replaces config/config.yaml)."""
    work = with_default_config(copy_run(tiny_run, tmp_path))
    # the config file alone: the finished tiny run, nothing to do (had config/config.yaml been
    # merged in, its models would be planned)
    plain = run_snakemake(work, "all", "-n")
    assert rules_run(plain) == {}, plain.stderr[-2000:]
    # one key on the command line: what that key reruns, and only for the config file's models
    seeded = run_snakemake(work, "all", "-n", "--config", "seed=3")
    assert rules_run(seeded)["extract_hidden"] == 4
    assert planned(seeded, "model") == {"gpt", "bert"} and planned(seeded, "corpus") == {"mini"}
    # a list value: a method added, for the config file's models only
    more = run_snakemake(work, "all", "-n", "--config", "methods=[id, mat, njtc]")
    # for each of the 2 models njtc's own train_map job; mat's fit_map job is untouched
    assert "fit_map" not in rules_run(more) and rules_run(more)["train_map"] == 2
    assert planned(more, "model") == {"gpt", "bert"}
    listed = more.stdout + more.stderr
    assert all(f"results/maps/{m}/mini/njtc.safetensors" in listed for m in ("gpt", "bert"))
    # and it is checked like the file: a bad value is named by its key
    bad = run_snakemake(work, "all", "-n", "--config", "seed=-1", check=False)
    out = bad.stdout + bad.stderr  # (a dry run reports the error on stdout)
    assert bad.returncode != 0 and "config key 'seed': -1 is less than" in out, out[-2000:]
    assert rules_run(run_snakemake(work, "all", "-n")) == {}
