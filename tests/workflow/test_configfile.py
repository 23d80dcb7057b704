"""A config given with --configfile replaces config/config.yaml (the paper's config, a one-model
config), and --config on the command line still overrides it."""

import re
import shutil

import pytest
import yaml
from harness import (
    ROOT,
    copy_run,
    planned,
    read_config,
    rules_run,
    run_snakemake,
    run_snakemake_all,
    write_config,
)

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
    # the paper's run writes some 37 GB: planned here whatever this machine has free
    proc = run_snakemake(
        tmp_path,
        "all",
        "-n",
        "--config",
        "disk_check=warn",
        configfile=tmp_path / "config/paper.yaml",
    )
    out = proc.stdout + proc.stderr
    assert "jtc: this run writes about" in out
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


def test_a_run_larger_than_the_disk_is_refused_while_planning_unless_told_to_warn(tmp_path):
    """A dry run of `all` refuses a run larger than the free disk (here, the paper's config
    with a billion training sentences: thousands of terabytes on any machine), naming its largest
    outputs; `disk_check: warn` says the same and plans the run."""
    with_default_config(tmp_path)
    config = yaml.safe_load((tmp_path / "config/paper.yaml").read_text())
    config["sizes"]["train"] = 10**9
    configfile = tmp_path / "config/huge.yaml"
    configfile.write_text(yaml.safe_dump(config))
    args = ("all", "-n")
    procs = run_snakemake_all(
        {
            "refuse": (tmp_path, args, {"configfile": configfile, "check": False}),
            "warn": (
                tmp_path,
                (*args, "--config", "disk_check=warn"),
                {"configfile": configfile},
            ),
        }
    )
    refused = procs["refuse"].stdout + procs["refuse"].stderr
    assert procs["refuse"].returncode != 0
    assert "the run does not fit on the disk" in refused
    assert re.search(r"jtc: this run writes about [\d.]+ TB but .* free", refused), refused
    assert "record_parts(model=gpt2, corpus=leipzig_news, split=train)" in refused
    assert "disk_check=warn" in refused
    warned = procs["warn"].stdout + procs["warn"].stderr
    assert "(disk_check: warn, so the run goes on)" in warned
    assert re.search(r"jtc: this run writes about [\d.]+ TB but", warned)
    assert planned(procs["warn"], "model") == PAPER_MODELS
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
