"""Settings objects (jtc.settings): each config block reaches its stage as one param and becomes
a frozen dataclass whose fields are the schema's keys and whose defaults are the schema's."""

import dataclasses

import pytest
from test_config import BASE

from jtc.runs.config import load_schema, validate_config
from jtc.settings import EarlyExitSettings, ExampleSettings, IntervalSettings, Settings
from jtc.shortcuts.methods import METHODS
from jtc.shortcuts.train import TrainSettings


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


@pytest.mark.parametrize("method", [m for m, spec in METHODS.items() if spec.trained])
def test_train_settings_defaults_are_the_methods(method):
    settings = TrainSettings.for_method(method)
    for field in dataclasses.fields(TrainSettings):
        assert getattr(settings, field.name) == METHODS[method].defaults[field.name]
    checked = validate_config(BASE)
    assert TrainSettings.from_config(checked["training"][method]) == settings
    assert TrainSettings.for_method(method, patience=9).patience == 9


def test_a_training_block_with_keys_missing_is_refused_by_name():
    with pytest.raises(
        ValueError, match=r"without \['optimizer', 'learning_rate'.*TrainSettings.for_method"
    ):
        TrainSettings.from_config({"max_epochs": 1, "batch_size": 8})
