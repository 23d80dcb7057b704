"""The config checks of the blocks that name other entries (submodules, pruning and its
benchmarks) that a schema cannot express: listed models and corpora that are configured, a
variant that jtc still has, settings that agree with each other, benchmark data installed.
Each returns the problem, naming the key, or None (jtc.pipeline.config.validate_config)."""

from __future__ import annotations

from typing import Any

from jtc.pruning.spans import NONCONTIGUOUS
from jtc.pruning.variants import RETIRED


def listed_problem(config: dict[str, Any], block: str) -> str | None:
    """A block (submodules, pruning) that lists a model or corpus that is not configured, or a
    model that cannot be scored (predict false)."""
    section = config[block]
    for kind in ("models", "corpora"):
        unknown = [x for x in section[kind] if x not in config[kind]]
        if unknown:
            return (
                f"config key '{block}.{kind}': {unknown} not in '{kind}' "
                f"({', '.join(config[kind])})"
            )
    no_head = [m for m in section["models"] if not config["models"][m]["predict"]]
    if no_head:
        return (
            f"config key '{block}.models': {no_head} have predict false; these runs are "
            "scored through the model's decoder head"
        )
    return None


def submodule_problem(config: dict[str, Any]) -> str | None:
    """Sub-module shortcuts asked of a model or corpus that is not configured, of a model that
    cannot be scored (no prediction), or of more sentences than the validation split has."""
    section = config["submodules"]
    problem = listed_problem(config, "submodules")
    if problem:
        return problem
    if section["sentences"] and section["sentences"] > config["sizes"]["validation"]:
        return (
            f"config key 'submodules.sentences': {section['sentences']} is more than the "
            f"{config['sizes']['validation']} validation sentences (sizes.validation)"
        )
    return None


def replaced_variant_problem(config: dict[str, Any]) -> str | None:
    """A pruning variant that jtc no longer has (pruning.variants), and what replaced it: checked
    before the schema, whose enum would only list the variants there are."""
    section = config.get("pruning")
    variants = section.get("variants") if isinstance(section, dict) else None
    for variant in variants if isinstance(variants, list) else []:
        if isinstance(variant, str) and variant in RETIRED:
            return f"config key 'pruning.variants': {RETIRED[variant]}"
    return None


def pruning_config_problem(config: dict[str, Any]) -> str | None:
    """Depth pruning asked of a model or corpus that is not configured or of a model that
    cannot be scored, an exported length that is not evaluated, or a stand-in measured at
    another rule's blocks that is not evaluated or not defined there."""
    section = config["pruning"]
    problem = listed_problem(config, "pruning")
    if problem:
        return problem
    if section["export_variant"] not in section["variants"]:
        return (
            f"config key 'pruning.export_variant': {section['export_variant']} is not one of "
            f"pruning.variants {section['variants']}: only an evaluated variant is exported"
        )
    for entry in section["also_measure"]:
        variant, rule = entry.split("@")
        if variant not in section["variants"] or (rule == NONCONTIGUOUS and variant != "drop"):
            return f"config key 'pruning.also_measure': {entry}: " + (
                f"{variant} is not one of pruning.variants {section['variants']}"
                if variant not in section["variants"]
                else f"{NONCONTIGUOUS} removes blocks that are not consecutive, which only "
                "drop is defined for (use drop@" + NONCONTIGUOUS + ")"
            )
    length, lengths = section["export_length"], section["lengths"]
    counts = [n for n in lengths if isinstance(n, int)]
    if length is not None and counts == lengths and lengths and length not in lengths:
        return (
            f"config key 'pruning.export_length': {length} is not one of pruning.lengths "
            f"{lengths}: a span is chosen only for the lengths evaluated"
        )
    return None


def unpackaged_task_problem(config: dict[str, Any]) -> str | None:
    """A benchmark task of the papers' suites that the data package does not hold (race,
    wsc273), named before the schema's list of the known tasks is."""
    from jtc.measures.tasks import NOT_PACKAGED, task_spec

    pruning = config.get("pruning")
    benchmarks = pruning.get("benchmarks") if isinstance(pruning, dict) else None
    listed = benchmarks.get("tasks") if isinstance(benchmarks, dict) else None
    for name in listed if isinstance(listed, list) else []:
        if isinstance(name, str) and name in NOT_PACKAGED:
            try:
                task_spec(name)
            except ValueError as exc:
                return f"config key '{exc}".replace(": ", "': ", 1)
    return None


def benchmark_problem(config: dict[str, Any]) -> str | None:
    """pruning.benchmarks: shots for a task not listed, for a task without a few-shot split or
    beyond it; and, where `all` runs the benchmarks (in_all) for a pruned model, a task whose
    data is not installed (jtc.measures.tasks; `snakemake benchmarks` alone finds that in its
    first job, benchmark_tasks, before any model loads)."""
    from jtc.measures import tasks

    section = config["pruning"]["benchmarks"]
    for name, shots in section["shots"].items():
        key = f"config key 'pruning.benchmarks.shots.{name}'"
        if name not in section["tasks"]:
            return f"{key}: {name} is not one of pruning.benchmarks.tasks {section['tasks']}"
        if shots and tasks.task_spec(name).fewshot is None:
            return (
                f"{key}: {name} has no few-shot split in the data package (only mmlu has one, "
                f"its dev split): remove the key or set it to 0"
            )
    wanted = config["pruning"]["models"] and section["in_all"]
    if wanted or any(section["shots"].values()):
        problem = tasks.data_problem(section["tasks"])
        if problem:
            return problem
    for name, shots in section["shots"].items():
        held = tasks.fewshot_size(name) if shots else 0
        if shots > held:
            return (
                f"config key 'pruning.benchmarks.shots.{name}': {shots} few-shot examples, but "
                f"the package holds {held} for every part of {name}: at most {held}"
            )
    return None
