"""Config validation: a JSON schema plus the checks a schema cannot express."""

from __future__ import annotations

import copy
import difflib
import math
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from jtc.paths import DOWNLOAD_SUFFIXES
from jtc.pipeline.block_checks import (
    benchmark_problem,
    pruning_config_problem,
    replaced_variant_problem,
    submodule_problem,
    unpackaged_task_problem,
)
from jtc.pruning.variants import EXPORTED, VARIANTS
from jtc.settings import SCHEMA, RankSettings, resolved
from jtc.shortcuts.methods import METHODS
from jtc.shortcuts.parts import VARIANTS as PART_VARIANTS

# the keys of a corpus entry only a downloaded source (DOWNLOAD_SUFFIXES) takes
DOWNLOAD_KEYS = frozenset({"url", "sha256", "timeout", "max_seconds"})


class ConfigError(ValueError):
    """A config value that is missing, of the wrong type, or out of range."""


# the schema's lists whose values are a registry's names (a key's `registry:` keyword; its
# `enum` is filled in when the schema is loaded, so that no list of names is written twice)
REGISTRIES = {
    "shortcut_methods": tuple(METHODS),
    "submodule_variants": tuple(PART_VARIANTS),
    "pruning_variants": tuple(VARIANTS),
    "exported_pruning_variants": EXPORTED,
}


def _with_registries(node: Any) -> Any:
    """The schema node with every `registry:` keyword's `enum` filled in from REGISTRIES."""
    if isinstance(node, list):
        return [_with_registries(v) for v in node]
    if not isinstance(node, dict):
        return node
    filled = {k: _with_registries(v) for k, v in node.items()}
    if "registry" in node:
        filled["enum"] = list(REGISTRIES[node["registry"]])
    return filled


def load_schema() -> dict[str, Any]:
    """The config schema (config.schema.yaml) with the registries' names filled in."""
    return _with_registries(yaml.safe_load(SCHEMA.read_text()))


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping (plain YAML keeps the last,
    so a model or corpus defined twice would silently lose one definition)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    lines: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in lines:
            raise ConfigError(
                f"config key '{key}': given twice in {loader.name} (lines {lines[key]} and {line})"
            )
        lines[key] = line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def check_config_file(path: str | Path) -> dict[str, Any]:
    """Parse a YAML config file, refusing duplicate keys; validation is validate_config's."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc}") from exc
    loader = _UniqueKeyLoader(text)
    loader.name = str(path)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    finally:
        loader.dispose()


def merged(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` merged in key by key (nested mappings merged, anything else
    replaced): what `--config key=value` does to the config in force."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def command_line_config(
    config: dict[str, Any], default_file: str | Path, overrides: dict[str, Any], files_given: bool
) -> dict[str, Any]:
    """The config in force. With `replace-workflow-config` (workflow/profiles/default),
    Snakemake drops the workflow's config file whenever the command line adds config, so
    `--config key=value` alone would replace config/config.yaml by those keys. A config file
    given with `--configfile` is meant to replace it; single keys are not: without such a file,
    they are merged into `default_file`."""
    if files_given or not overrides or not Path(default_file).is_file():
        return config
    return merged(check_config_file(default_file), overrides)


def split_positions(config: dict[str, Any], split: str) -> int | str:
    """Token positions per sentence of a split's states: positions_per_sentence for the
    training split, one for validation (the schema's description says why)."""
    return config["positions_per_sentence"] if split == "train" else 1


def layer_problem(model: str, num_layers: int, config: dict[str, Any]) -> str | None:
    """A configured layer outside a model's 0..L: example layers or the minimum exit layer."""
    bad = [x for x in config["prediction"]["example_layers"] if not 0 <= x < num_layers]
    if bad:
        return (
            f"config key 'prediction.example_layers': layers {bad} are outside 0..{num_layers - 1} "
            f"for model '{model}' ({num_layers} layers)"
        )
    if config["early_exit"]["min_layer"] > num_layers:
        return (
            f"config key 'early_exit.min_layer': {config['early_exit']['min_layer']} is beyond "
            f"the {num_layers} layers of model '{model}'"
        )
    return None


def lambda_problem(early_exit: dict[str, Any]) -> str | None:
    """A λ grid whose largest threshold still lets confident tokens exit: then a target
    accuracy the grid cannot reach would have no λ (confidences are at most 1, so a threshold
    of lambda_weight·λ ≥ 1 keeps every token to the last layer and reaches any target)."""
    from jtc.settings import EarlyExitSettings

    grid = EarlyExitSettings.of(early_exit).lambda_grid()
    weight = early_exit["lambda_weight"]
    if max(grid) * weight < 1.0:
        which = "early_exit.lambdas" if early_exit["lambdas"] else "the default λ grid"
        return (
            f"config key 'early_exit.lambdas': the largest λ of {which}, {max(grid):g}, gives a "
            f"threshold of at most {max(grid) * weight + early_exit['decay_weight']:g} "
            f"(lambda_weight·λ + decay_weight), which a confidence can still pass, so a target "
            f"accuracy may be reached by no λ; include a λ of at least {1.0 / weight:.4g} "
            f"(lambda_weight·λ ≥ 1: no token exits early)"
        )
    return None


def _key(path: Any) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def _fill_defaults(config: dict[str, Any], node: dict[str, Any], schema: dict[str, Any]) -> None:
    for name, spec in node.get("properties", {}).items():
        prop = resolved(spec, schema)
        if "default" in prop and name not in config:
            config[name] = copy.deepcopy(prop["default"])
        if prop.get("type") == "object" and isinstance(config.get(name), dict):
            _fill_defaults(config[name], prop, schema)
    models = config.get("models")
    if isinstance(models, dict):
        for entry in models.values():
            if isinstance(entry, dict):
                _fill_defaults(entry, schema["$defs"]["model"], schema)


def _rrr_as_njtc(checked: dict[str, Any], given: dict[str, Any]) -> None:
    """rrr's rank and targets, unset (or rank null), are njtc's: rrr is then the optimum of the
    objective NJTC trains on (the schema's defaults of the two are the same)."""
    rrr = given.get("training", {}).get("rrr", {})
    training = checked["training"]
    for key in RankSettings.keys():
        if rrr.get(key) is None:
            training["rrr"][key] = training["njtc"][key]


def non_finite_problem(value: Any, path: tuple = ()) -> str | None:
    """A NaN or infinite number anywhere in the config (nested mappings and lists): the schema's
    bounds cannot refuse NaN, which compares false to both."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"config key '{_key(path)}': {value} is not a finite number"
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        problem = non_finite_problem(item, (*path, key))
        if problem:
            return problem
    return None


def _unexpected(err: jsonschema.exceptions.ValidationError) -> list[str]:
    """Each key refused by `additionalProperties: false`, with the closest known key."""
    known = list(err.schema.get("properties", {}))
    parent = _key(err.absolute_path)
    described = []
    for name in err.instance:
        if name in known:
            continue
        close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        described.append(f"config key '{parent}': key '{name}' was unexpected{hint}")
    return described


def _required(err: jsonschema.exceptions.ValidationError) -> list[str]:
    missing = [r for r in err.validator_value if r not in err.instance]
    # a key required by an if/then (a corpus's url or path) names what asks for it
    source = err.instance.get("source") if "then" in err.schema_path else None
    why = f" for source '{source}'" if isinstance(source, str) else ""
    return [f"config key '{_key([*err.absolute_path, name])}' is required{why}" for name in missing]


def _choice(schema: dict[str, Any]) -> str:
    """One alternative of an anyOf, in words: "an integer >= 1", "'all'"."""
    if "enum" in schema:
        return " or ".join(repr(v) for v in schema["enum"])
    bound = f" >= {schema['minimum']}" if "minimum" in schema else ""
    return f"{'an' if schema.get('type') == 'integer' else 'a'} {schema.get('type')}{bound}"


def _describe(err: jsonschema.exceptions.ValidationError) -> list[str]:
    if err.validator == "additionalProperties" and err.validator_value is False:
        return _unexpected(err) or [f"config key '{_key(err.absolute_path)}': {err.message}"]
    if err.validator == "required":
        return _required(err)
    if err.validator == "not" and list(err.validator_value) == ["required"]:
        # a key only some values of a sibling allow (models.NAME.parts: a "parts:" source)
        source = err.instance.get("source")
        return [
            f"config key '{_key([*err.absolute_path, name])}' is not used with source "
            f"'{source}': remove it (it is only for a \"parts:FILE.gguf\" source)"
            for name in err.validator_value["required"]
            if name in err.instance
        ]
    if err.validator == "anyOf":
        choices = " or ".join(_choice(c) for c in err.validator_value)
        return [f"config key '{_key(err.absolute_path)}': {err.instance!r} is not {choices}"]
    return [f"config key '{_key(err.absolute_path)}': {err.message}"]


def schema_problem(errors: list[jsonschema.exceptions.ValidationError]) -> str:
    """The best-matching schema error, plus every missing and every unexpected key (a misspelt
    key is both: `modles` is unexpected and `models` missing)."""
    best = jsonschema.exceptions.best_match(errors)
    typos = [e for e in errors if e.validator in ("required", "additionalProperties")]
    typos.sort(key=lambda e: e.validator != "required")  # missing keys first
    parts: list[str] = []
    for err in ([] if best.validator in ("required", "additionalProperties") else [best]) + typos:
        for part in _describe(err):
            if part not in parts:
                parts.append(part)
    return "; ".join(parts)


def rank_problem(model: str, width: int, config: dict[str, Any]) -> str | None:
    """A low-rank method's rank larger than a model's width (hidden size); only the configured
    methods count, and rank null (or 0) means the default, floor(d / 100)."""
    ranked = [
        m
        for m, spec in METHODS.items()
        if m in config["methods"] and issubclass(spec.settings or object, RankSettings)
    ]
    # the trained ones first, then rrr (whose rank, unset, is njtc's)
    for method in sorted(ranked, key=lambda m: not METHODS[m].trained):
        rank = RankSettings.from_config(config, method).rank
        if rank and rank > width:
            return (
                f"config key 'training.{method}.rank': {rank} is more than the width "
                f"{width} of model '{model}' (the rank is at most the hidden size)"
            )
    return None


def validate_config(config: dict[str, Any]) -> dict[str, Any]:
    """Return a validated copy of `config` with defaults filled in; raise ConfigError otherwise."""
    if not isinstance(config, dict):
        raise ConfigError("config: expected a mapping of keys to values")
    problem = (
        non_finite_problem(config)
        or replaced_variant_problem(config)
        or unpackaged_task_problem(config)
    )
    if problem:
        raise ConfigError(problem)
    schema = load_schema()
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (list(e.absolute_path), e.message))
    if errors:
        raise ConfigError(schema_problem(errors))
    checked = copy.deepcopy(config)
    _fill_defaults(checked, schema, schema)
    _rrr_as_njtc(checked, config)
    problem = (
        submodule_problem(checked)
        or pruning_config_problem(checked)
        or benchmark_problem(checked)
        or lambda_problem(checked["early_exit"])
    )
    if problem:
        raise ConfigError(problem)
    for name, corpus in checked["corpora"].items():
        if corpus["source"] not in DOWNLOAD_SUFFIXES and DOWNLOAD_KEYS & set(corpus):
            raise ConfigError(
                f"config key 'corpora.{name}': url/sha256/timeout/max_seconds apply only to "
                "sources 'leipzig' and 'mediawiki'"
            )
        if corpus["source"] != "text_file" and "path" in corpus:
            raise ConfigError(
                f"config key 'corpora.{name}.path': applies only to source 'text_file'"
            )
        if corpus["source"] not in ("text_file", *DOWNLOAD_SUFFIXES) and "max_bytes" in corpus:
            raise ConfigError(
                f"config key 'corpora.{name}.max_bytes': applies only to sources 'text_file', "
                "'leipzig' and 'mediawiki'"
            )
    return checked
