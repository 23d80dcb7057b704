"""Settings objects (jtc.settings): each config block reaches its stage as one param and becomes
a frozen dataclass whose fields are the schema's keys and whose defaults are the schema's."""

import dataclasses

import pytest
from configs import BASE

import jtc.settings
from jtc.pipeline.config import load_schema, validate_config
from jtc.settings import (
    EarlyExitSettings,
    ExampleSettings,
    IntervalSettings,
    LowRankSettings,
    RankSettings,
    Settings,
    TrainSettings,
    resolved,
)
from jtc.shortcuts.methods import METHODS, settings_of, settings_param

# keys of a block that a Settings object reads that no object reads, and why
READ_ELSEWHERE = {
    ("pruning", "models"): "planning: which models get pruning jobs (jtc.pipeline.planning)",
    ("pruning", "corpora"): "planning: which corpora get pruning jobs (jtc.pipeline.planning)",
    ("pruning", "benchmarks"): "a sub-block, read by BenchmarkSettings (SUB_BLOCK)",
    ("pruning", "in_all"): "planning: pruning.benchmarks.in_all, whether all runs them",
    (
        "pruning",
        "measures_in_all",
    ): "planning: whether all runs the context and generation measures",
}


def block_keys(block: str) -> set[str]:
    return set(load_schema()["properties"][block]["properties"])


def test_the_settings_objects_of_a_block_cover_its_keys_exactly():
    assert set(EarlyExitSettings.keys()) == block_keys("early_exit")
    # the prediction block is read by two kinds of stage, each through its own object
    parts = [set(IntervalSettings.keys()), set(ExampleSettings.keys())]
    assert parts[0] | parts[1] == block_keys("prediction") and not parts[0] & parts[1]


@pytest.mark.parametrize("cls", [EarlyExitSettings, IntervalSettings, ExampleSettings])
def test_defaults_are_the_checked_configs(cls: type[Settings]):
    checked = validate_config(BASE)
    assert cls.defaults() == cls.of(cls.param(checked))
    schema = load_schema()["properties"][cls.BLOCK]["properties"]
    for field in dataclasses.fields(cls):
        value = getattr(cls.defaults(), field.name)
        default = schema[field.name]["default"]
        assert value == (tuple(default) if isinstance(default, list) else default), field.name


def test_a_param_holds_only_the_keys_its_stage_reads():
    checked = validate_config(BASE)
    checked["prediction"]["examples"] = 7
    assert "examples" not in IntervalSettings.param(checked)  # the tables do not rerun
    assert ExampleSettings.of(ExampleSettings.param(checked)).examples == 7


def test_a_param_with_a_key_too_many_or_too_few_is_refused_by_name():
    values = EarlyExitSettings.param(validate_config(BASE))
    with pytest.raises(ValueError, match=r"unknown keys \['taus'\]"):
        EarlyExitSettings.of({**values, "taus": 1.0})
    del values["folds"]
    with pytest.raises(ValueError, match=r"missing keys \['folds'\]"):
        EarlyExitSettings.of(values)


def test_settings_are_frozen_and_lists_become_tuples():
    settings = EarlyExitSettings.defaults(check_every=[1, 2])
    assert settings.check_every == (1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.tau = 1.0  # type: ignore[misc]


def test_the_lambda_grid_is_the_default_one_when_lambdas_is_empty():
    assert len(EarlyExitSettings.defaults().lambda_grid()) == 125
    assert EarlyExitSettings.defaults(lambdas=[0.5, 2.0]).lambda_grid() == (0.5, 2.0)


def settings_classes() -> list[type[Settings]]:
    """Every settings object (jtc.settings defines them all)."""
    return [
        c
        for c in vars(jtc.settings).values()
        if isinstance(c, type) and issubclass(c, Settings) and c is not Settings
    ]


def blocks_read() -> dict[tuple[str, str | None], list[type[Settings]]]:
    """Each config block a settings object reads ((training, method) for the training block's
    per-method blocks: the object of METHODS[method]), with the objects that read it."""
    read: dict[tuple[str, str | None], list[type[Settings]]] = {}
    for cls in settings_classes():
        if cls.BLOCK == "training":
            parts = [(cls.BLOCK, m) for m, spec in METHODS.items() if spec.settings is cls]
            assert parts, f"{cls.__name__}: the object of no method"
        else:  # a block, or its sub-block (pruning.benchmarks)
            parts = [(cls.BLOCK, cls.SUB_BLOCK)]
        for part in parts:
            read.setdefault(part, []).append(cls)
    return read


def schema_keys(block: str, method: str | None) -> dict[str, dict]:
    """A block's keys (of training.<method>, for training) with their specs, $ref followed."""
    schema = load_schema()
    node = resolved(schema["properties"][block], schema)
    if method is not None:
        node = resolved(node["properties"][method], schema)
    return {key: resolved(spec, schema) for key, spec in node["properties"].items()}


def test_every_field_of_every_settings_object_is_a_schema_key_with_a_default():
    """So a new key is added in the schema (with its default) and the object, nowhere else."""
    for (block, method), classes in blocks_read().items():
        keys = schema_keys(block, method)
        for cls in classes:
            for field in cls.keys():
                where = f"{cls.__name__}.{field} (config {block}.{method or ''})"
                assert field in keys, where
                assert "default" in keys[field], where


def test_every_key_of_a_block_read_by_settings_objects_is_read_by_one():
    schema = load_schema()
    training = resolved(schema["properties"]["training"], schema)["properties"]
    read = blocks_read()
    assert {m for block, m in read if block == "training"} == set(training)
    for (block, method), classes in read.items():
        used = {key for cls in classes for key in cls.keys()}
        for key in schema_keys(block, method):
            # a sub-block (pruning.context) is read by its own objects
            read_here = key in used or (block, key) in read
            assert read_here or (block, key) in READ_ELSEWHERE, f"{block}.{method or ''}{key}"


@pytest.mark.parametrize("method", [m for m, spec in METHODS.items() if spec.settings])
def test_training_defaults_are_the_checked_configs(method):
    cls = METHODS[method].settings
    checked = validate_config(BASE)
    assert cls.defaults(method) == cls.from_config(checked, method)
    assert settings_of(method, settings_param(checked, method)) == cls.defaults(method)
    assert settings_of("mat", settings_param(checked, "mat")) is None


def test_the_low_rank_and_lens_defaults_differ_where_the_schema_says():
    njtc, lens = LowRankSettings.defaults("njtc"), TrainSettings.defaults("tuned_lens")
    assert (njtc.learning_rate, njtc.max_epochs, njtc.patience) == (3e-4, 100, 3)
    assert (lens.learning_rate, lens.max_epochs, lens.patience) == (3e-5, 2, 1)
    assert isinstance(njtc, TrainSettings) and isinstance(njtc, RankSettings)
    # a map file's metadata lists them in this order
    assert LowRankSettings.keys()[:3] == ("rank", "targets", "optimizer")


def test_rrr_takes_njtcs_rank_and_targets_unless_it_sets_its_own():
    njtc = {"rank": 4, "targets": "last"}
    checked = validate_config({**BASE, "training": {"njtc": njtc}})
    assert RankSettings.from_config(checked, "rrr") == RankSettings(4, "last")
    own = {"njtc": njtc, "rrr": {"rank": None, "targets": "all"}}
    checked = validate_config({**BASE, "training": own})
    assert RankSettings.from_config(checked, "rrr") == RankSettings(4, "all")


def test_a_training_block_with_keys_missing_is_refused_by_name():
    with pytest.raises(ValueError, match=r"missing keys \['holdout_fraction', 'learning_rate'"):
        TrainSettings.of({"max_epochs": 1, "batch_size": 8})


def test_a_trained_methods_positions_change_its_own_param_only():
    """training.<method>.positions reaches the param of the job that trains that method (its
    own train_map job's, njtc's as the tuned lens's) and no other (mat's and rrr's, fit_map's;
    the other trained methods'): the training states
    (extract_hidden's positions) and the other methods' settings stay, so only that job reruns."""
    from jtc.pipeline.config import split_positions
    from jtc.settings import TrainSettings

    base = validate_config({**BASE, "methods": ["id", "mat", "rrr", "njtc", "nnjtc", "tuned_lens"]})
    changed = validate_config(
        {**BASE, "methods": base["methods"], "training": {"njtc": {"positions": 4}}}
    )
    assert settings_param(base, "njtc")["positions"] == "all"
    assert settings_param(changed, "njtc")["positions"] == 4
    for method in ("mat", "rrr", "nnjtc"):
        assert settings_param(changed, method) == settings_param(base, method), method
    assert TrainSettings.param(changed, "tuned_lens") == TrainSettings.param(base, "tuned_lens")
    assert split_positions(changed, "train") == split_positions(base, "train") == "all"
    assert settings_of("njtc", settings_param(changed, "njtc")).positions == 4
