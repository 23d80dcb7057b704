"""Everything the workflow checks while it plans, before any job runs: the config files
(duplicate keys), the config itself (schema), what the model folders and text corpora already
tell (architecture, decoder head, depth, size), once a model is resolved what its info.json
tells, and, as the first jobs start, what this machine's GPU cannot run. Torch-free, so planning
stays fast."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from jtc.data.sources import input_problem, size_problem
from jtc.model.adapters import (
    UnsupportedArchitecture,
    adapter_of,
    missing_head_message,
    part_adapter,
)
from jtc.model.sources import (
    local_num_layers,
    local_width,
    part_problem,
    planning_problem,
    source_problem,
)
from jtc.shortcuts.parts import jump_problem
from jtc.workflow.config import (
    ConfigError,
    check_config_file,
    layer_problem,
    rank_problem,
    validate_config,
)
from jtc.workflow.gpus import LocalGpu, no_gpu_for_jobs


def checked_config(config: dict[str, Any], files: Iterable[str]) -> dict[str, Any]:
    """The validated config with defaults; ConfigError naming the key and the problem."""
    for path in files:
        check_config_file(path)
    checked = validate_config(config)
    for name, spec in checked["models"].items():
        problem = source_problem(name, spec)
        if problem:
            raise ConfigError(problem)
        layers, width = local_num_layers(spec), local_width(spec)
        problem = (
            planning_problem(name, spec)
            or (spec["predict"] and layers and layer_problem(name, layers, checked))
            or (width and rank_problem(name, width, checked))
        )
        if not problem and name in checked["submodules"]["models"]:
            jumps = checked["submodules"]["jump_layers"]
            problem = part_problem(name, spec) or (layers and jump_problem(name, layers, jumps))
        if problem:
            raise ConfigError(problem)
    for name, spec in checked["corpora"].items():
        problem = input_problem(name, spec) or size_problem(name, spec, checked["sizes"])
        if problem:
            raise ConfigError(problem)
    return checked


def resolved_problem(
    name: str, info: dict[str, Any], config: dict[str, Any], *, predict: bool, parts: bool
) -> str | None:
    """What a resolved model (its info.json) lacks for what the config asks of it: a width of
    at least the low-rank methods' rank (always), a decoder head and the configured layers to
    predict from (`predict`), block parts and the jump layers (`parts`)."""
    problem = info.get("hidden_size") and rank_problem(name, info["hidden_size"], config)
    if problem:
        return f"invalid configuration: {problem}"
    if parts:
        try:
            part_adapter(adapter_of(info))
        except UnsupportedArchitecture as err:
            return f"model '{name}': {err}"
        problem = jump_problem(name, info["num_layers"], config["submodules"]["jump_layers"])
        if problem:
            return f"invalid configuration: {problem}"
    if predict or parts:
        if not info["has_lm_head"]:
            return missing_head_message(name, info["task"], info["model_class"])
        problem = layer_problem(name, info["num_layers"], config)
        if problem:
            return f"invalid configuration: {problem}"
    return None


def gpu_problem(models: dict[str, Any], find_gpu: Callable[[], LocalGpu | None]) -> str | None:
    """What this machine cannot run of what the models ask, for a run whose jobs run here: a
    `device_map` where the jobs will see no GPU, `dtype: bfloat16` on a GPU without it (compute
    capability below 8.0). `find_gpu` (jtc.workflow.gpus.local_gpu) is asked only when a model
    needs it.
    The jobs refuse the same (jtc.model.cache.compute_problem); this says it before any job runs."""
    for name, spec in models.items():
        device_map, dtype = spec.get("device_map"), spec.get("dtype", "float32")
        if device_map is None and dtype != "bfloat16":
            continue
        gpu = find_gpu()
        if device_map is not None and no_gpu_for_jobs(gpu):
            return (
                f"model '{name}': models.{name}.device_map '{device_map}' spreads the model over "
                "GPUs, but this machine's jobs see no CUDA device (no GPU driver, or "
                "CUDA_VISIBLE_DEVICES hides them)"
            )
        if dtype == "bfloat16" and gpu and gpu.capability and gpu.capability < (8, 0):
            major, minor = gpu.capability
            return (
                f"model '{name}': models.{name}.dtype bfloat16 is not supported by this GPU "
                f"({gpu.name}, compute capability {major}.{minor}; bfloat16 needs 8.0, NVIDIA "
                "Ampere or later); use float16 or float32"
            )
    return None
