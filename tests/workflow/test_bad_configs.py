"""Configs that cannot work: refused before any job runs, with the key named, and the results
of an earlier run left as they were, byte for byte."""

import pytest
import yaml
from harness import (
    copy_run,
    read_config,
    run_snakemake,
    run_snakemake_all,
    selected,
    snapshot,
    write_config,
)
from tiny import save_model

pytestmark = pytest.mark.workflow


def test_bad_config_fails_before_any_job(tiny_project, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    config = read_config(tiny_project)
    config["sizes"]["validation"] = 0
    write_config(bad, config)
    proc = run_snakemake(bad, "all", check=False)
    assert proc.returncode != 0
    assert "config key 'sizes.validation'" in proc.stderr
    assert not (bad / "results").exists()


BAD_CONFIGS = [
    ({"sizes": {"train": 180, "validation": 40}}, "has at most 200 sentences, fewer than"),
    ({"prediction": {"example_layers": [5]}}, "layers [5] are outside 0..1 for model"),
    ({"early_exit": {"min_layer": 3}}, "'early_exit.min_layer': 3 is beyond the 2 layers"),
    ({"methods": ["id", "lowrank"]}, "config key 'methods.1'"),
    ({"training": {"tuned_lens": {"rank": 4}}}, "'rank' was unexpected"),
    ({"models": {"x": {"source": "/nonexistent/model", "predict": 1}}}, "models.x.predict"),
    ({"submodules": {"models": ["gpt2"]}}, "'submodules.models': ['gpt2'] not in 'models'"),
    ({"submodules": {"models": ["gpt"], "jump_layers": [3]}}, "layers [3] are outside 0..2"),
    ({"submodules": {"variants": ["mat_all"]}}, "config key 'submodules.variants.0'"),
]


@pytest.fixture(scope="module")
def bad_config_runs(request, tiny_project, tmp_path_factory):
    """The selected cases of test_bad_configs_fail_before_any_job, each config in its own
    folder, planned two at a time: {message: (folder, the run)}."""
    wanted = selected(request, "test_bad_configs_fail_before_any_job", "message")
    runs = {}
    for change, message in BAD_CONFIGS:
        if message in wanted:
            workdir = tmp_path_factory.mktemp("bad-config")
            write_config(workdir, {**read_config(tiny_project), **change})
            runs[message] = (workdir, ["all"], {"check": False})
    done = run_snakemake_all(runs)
    return {message: (runs[message][0], done[message]) for message in runs}


@pytest.mark.parametrize("change,message", BAD_CONFIGS)
def test_bad_configs_fail_before_any_job(bad_config_runs, change, message):
    workdir, proc = bad_config_runs[message]  # (`change` written to its config)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
    assert not (workdir / "results").exists()


def test_a_model_defined_twice_fails_before_any_job(tiny_project, tmp_path):
    text = (tiny_project / "config.yaml").read_text()
    text = text.replace(
        "models:\n", f"models:\n  bert:\n    source: {tiny_project / 'tiny-bert'}\n"
    )
    (tmp_path / "config.yaml").write_text(text)
    proc = run_snakemake(tmp_path, "all", check=False)
    assert proc.returncode != 0 and "config key 'bert': given twice" in proc.stderr
    assert not (tmp_path / "results").exists()


def test_prediction_from_a_bare_encoder_fails_while_planning(tiny_project, tmp_path):
    save_model("bert", tmp_path / "encoder", layers=2, width=16)
    config = read_config(tiny_project)
    config["models"] = {"enc": {"source": str(tmp_path / "encoder")}}
    write_config(tmp_path, config)
    proc = run_snakemake(tmp_path, "all", check=False)
    assert proc.returncode != 0
    assert "model 'enc' (BertModel) has no decoder head" in proc.stderr
    assert "masked-token prediction" in proc.stderr and "models.enc.predict: false" in proc.stderr
    assert not (tmp_path / "results").exists()
    config["models"]["enc"]["predict"] = False
    write_config(tmp_path, config)
    planned_run = run_snakemake(tmp_path, "all", "-n")
    assert "decode_predictions" not in planned_run.stdout and "extract_hidden" in planned_run.stdout


def test_bad_config_changes_nothing_in_existing_results(tiny_run, tmp_path):
    workdir = copy_run(tiny_run, tmp_path / "work")
    before = {p: p.stat().st_mtime_ns for p in (workdir / "results").rglob("*")}
    unknown = tmp_path / "t5"
    unknown.mkdir()
    (unknown / "config.json").write_text(
        '{"model_type": "t5", "architectures": ["T5Model"], "is_encoder_decoder": true}'
    )
    config = read_config(workdir)
    config["models"]["t5"] = {"source": str(unknown)}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(config))
    proc = run_snakemake(workdir, "all", configfile=tmp_path / "bad.yaml", cores=1, check=False)
    assert proc.returncode != 0
    assert "model 't5': architecture 't5' is an encoder-decoder model" in proc.stderr
    after = {p: p.stat().st_mtime_ns for p in (workdir / "results").rglob("*")}
    assert after == before


def _typo_source(config):
    config["models"]["gpt"]["source"] += "-typo"


def _set(*keys, value):
    def change(config):
        node = config
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value

    return change


def _with_njtc(**settings):
    def change(config):
        config["methods"] = ["id", "mat", "njtc"]
        config["training"] = {"njtc": settings}

    return change


# settings that cannot work, each refused while planning with its key named (before, each made
# Snakemake delete the outputs it was about to rebuild, or gave wrong tables at exit 0)
IMPOSSIBLE = {
    "model path typo": (_typo_source, "models.gpt.source"),
    "validation_fraction nan": (
        _set("validation_fraction", value=float("nan")),
        "validation_fraction",
    ),
    "confidence_level nan": (
        _set("prediction", "confidence_level", value=float("nan")),
        "prediction.confidence_level",
    ),
    "tau nan": (_set("early_exit", "tau", value=float("nan")), "early_exit.tau"),
    "tau inf": (_set("early_exit", "tau", value=float("inf")), "early_exit.tau"),
    "learning_rate nan": (_with_njtc(learning_rate=float("nan")), "training.njtc.learning_rate"),
    "weight_decay inf": (_with_njtc(weight_decay=float("inf")), "training.njtc.weight_decay"),
    "rank above the width": (_with_njtc(rank=1000), "training.njtc.rank"),
}


@pytest.fixture(scope="module")
def impossible_runs(request, _tiny_run, tmp_path_factory):
    """The selected cases of test_an_impossible_setting_leaves_results_byte_identical, each in
    its own copy of the finished tiny run, run two at a time: {case: (copy, its results' files
    and their contents before the run, the run)}."""
    finished, _ = _tiny_run
    runs, before = {}, {}
    test = "test_an_impossible_setting_leaves_results_byte_identical"
    for case in selected(request, test, "case"):
        change, _ = IMPOSSIBLE[case]
        workdir = copy_run(finished, tmp_path_factory.mktemp("impossible") / "work")
        files = snapshot(workdir)
        before[case] = (files, {p: (workdir / p).read_bytes() for p in files})
        config = read_config(workdir)
        change(config)
        write_config(workdir, config)
        runs[case] = (workdir, ["all"], {"check": False})
    done = run_snakemake_all(runs)
    return {case: (runs[case][0], *before[case], done[case]) for case in runs}


@pytest.mark.parametrize("case", list(IMPOSSIBLE))
def test_an_impossible_setting_leaves_results_byte_identical(impossible_runs, case):
    _, key = IMPOSSIBLE[case]
    workdir, before, contents, proc = impossible_runs[case]
    assert proc.returncode != 0
    assert f"config key '{key}'" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]
    assert snapshot(workdir) == before
    assert all((workdir / p).read_bytes() == data for p, data in contents.items())
