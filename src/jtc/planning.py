"""Everything the workflow checks while it plans, before any job runs: the config files
(duplicate keys), the config itself (schema), what the model folders and text corpora already
tell (architecture, decoder head, depth, size). Torch-free, so planning stays fast."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .config import ConfigError, check_config_file, layer_problem, validate_config
from .corpus import size_problem
from .parts import jump_problem
from .sources import local_num_layers, part_problem, planning_problem


def checked_config(config: dict[str, Any], files: Iterable[str]) -> dict[str, Any]:
    """The validated config with defaults; ConfigError naming the key and the problem."""
    for path in files:
        check_config_file(path)
    checked = validate_config(config)
    for name, spec in checked["models"].items():
        layers = local_num_layers(spec)
        problem = planning_problem(name, spec) or (
            spec["predict"] and layers and layer_problem(name, layers, checked)
        )
        if not problem and name in checked["submodules"]["models"]:
            jumps = checked["submodules"]["jump_layers"]
            problem = part_problem(name, spec) or (layers and jump_problem(name, layers, jumps))
        if problem:
            raise ConfigError(problem)
    for name, spec in checked["corpora"].items():
        problem = size_problem(name, spec, checked["sizes"])
        if problem:
            raise ConfigError(problem)
    return checked
