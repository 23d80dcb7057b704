"""Config validation: a JSON schema plus the checks a schema cannot express."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")


class ConfigError(ValueError):
    """A config value that is missing, of the wrong type, or out of range."""


def load_schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def _key(path: Any) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def _fill_defaults(config: dict[str, Any], schema: dict[str, Any]) -> None:
    for name, prop in schema.get("properties", {}).items():
        if "default" in prop and name not in config:
            config[name] = copy.deepcopy(prop["default"])
        if prop.get("type") == "object" and isinstance(config.get(name), dict):
            _fill_defaults(config[name], prop)
    models = config.get("models")
    if isinstance(models, dict):
        for entry in models.values():
            if isinstance(entry, dict):
                _fill_defaults(entry, schema["$defs"]["model"])


def validate_config(config: dict[str, Any]) -> dict[str, Any]:
    """Return a validated copy of `config` with defaults filled in; raise ConfigError otherwise."""
    if not isinstance(config, dict):
        raise ConfigError("config: expected a mapping of keys to values")
    schema = load_schema()
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (list(e.absolute_path), e.message))
    if errors:
        err = jsonschema.exceptions.best_match(errors)
        raise ConfigError(f"config key '{_key(err.absolute_path)}': {err.message}")
    checked = copy.deepcopy(config)
    _fill_defaults(checked, schema)
    for name, corpus in checked["corpora"].items():
        if corpus["source"] != "leipzig" and ("url" in corpus or "sha256" in corpus):
            raise ConfigError(
                f"config key 'corpora.{name}': url/sha256 apply only to source 'leipzig'"
            )
        if corpus["source"] != "text_file" and "path" in corpus:
            raise ConfigError(
                f"config key 'corpora.{name}.path': applies only to source 'text_file'"
            )
    return checked
