"""Everything the workflow checks while it plans, before any job runs: the config files
(duplicate keys), the config itself (schema), what the model folders and text corpora already
tell (architecture, decoder head, depth, size), once a model is resolved what its info.json
tells, the outputs already there (damaged, left by another config, made with other settings),
and, as the first jobs start, what this machine's GPU cannot run. And what a checked config
runs (`Experiment`): its names, the methods of each model, the targets of `rule all`.
Torch-free, so planning stays fast."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jtc import paths
from jtc.data.sources import input_problem, size_problem
from jtc.files.planned import (
    PlannedJob,
    damaged_outputs,
    leftovers,
    listing,
    replaced_outputs,
    stale_outputs,
)
from jtc.measures.checks import context_problem, generation_problem
from jtc.model.adapters import (
    ADAPTERS,
    UnsupportedArchitecture,
    adapter_of,
    missing_head_message,
    part_adapter,
    task_from_classes,
)
from jtc.model.sources import (
    local_config,
    local_num_layers,
    local_width,
    part_problem,
    planning_problem,
    reference_problem,
    source_problem,
)
from jtc.pipeline.config import (
    ConfigError,
    check_config_file,
    layer_problem,
    rank_problem,
    validate_config,
)
from jtc.pipeline.draws import lines_problem
from jtc.pipeline.gpus import LocalGpu, no_gpu_for_jobs
from jtc.pruning.spans import pruning_problem, resolved_lengths
from jtc.pruning.windows import calibration_problem
from jtc.shortcuts.methods import METHODS, applicable
from jtc.shortcuts.parts import jump_problem


def checked_config(config: dict[str, Any], files: Iterable[str]) -> dict[str, Any]:
    """The validated config with defaults; ConfigError naming the key and the problem."""
    for path in files:
        check_config_file(path)
    checked = validate_config(config)
    for name, spec in checked["models"].items():
        problem = source_problem(name, spec) or reference_problem(name, spec)
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
        if not problem and name in checked["pruning"]["models"]:
            problem = prune_problem(name, spec, layers, checked["pruning"])
        if problem:
            raise ConfigError(problem)
    for name, spec in checked["corpora"].items():
        problem = (
            input_problem(name, spec)
            or size_problem(name, spec, checked["sizes"])
            or lines_problem(name, spec, checked)
        )
        if problem:
            raise ConfigError(problem)
    return checked


# the rules `snakemake benchmarks` runs for each pruned (model, corpus)
BENCHMARK_RULES = ("run_benchmarks", "benchmark_table", "benchmark_pairs", "plot_benchmarks")
ROWS_PER_COEFFICIENT = 4  # below this, a full d × d least-squares map overfits (docs/method.md)


def rows_note(config: dict[str, Any], widths: dict[str, int | None]) -> str | None:
    """A planning-time warning, one line per model, for closed-form fits that get fewer than
    ROWS_PER_COEFFICIENT training rows per coefficient (sizes.train × positions_per_sentence /
    the model's width; `widths`: model -> width, None where not known before the model is
    cached), naming the keys and the sizes that reach it. None with positions_per_sentence
    `all`: the rows are known only once the sentences are tokenised, and the fit's own warning
    (jtc.shortcuts.underdetermined) then gives them exactly, with the rank of each fit."""
    positions = config["positions_per_sentence"]
    if not isinstance(positions, int):
        return None
    train = config["sizes"]["train"]
    rows = train * positions
    lines = []
    for name, width in widths.items():
        if not width or rows >= ROWS_PER_COEFFICIENT * width:
            continue
        needed = ROWS_PER_COEFFICIENT * width
        lines.append(
            f"jtc: model '{name}' (width {width}): the closed-form fits get {rows:,} training "
            f"rows (sizes.train {train} × positions_per_sentence {positions}), "
            f"{rows / width:.1f} per coefficient, below {ROWS_PER_COEFFICIENT}: their held-out "
            f"r² will measure overfitting more than the model. {ROWS_PER_COEFFICIENT} per "
            f"coefficient ({needed:,} rows) takes sizes.train {-(-needed // positions)} at "
            f"positions_per_sentence {positions}, or positions_per_sentence "
            f"{-(-needed // train)} at sizes.train {train} (a sentence gives at most its "
            "tokens), or positions_per_sentence: all (every token)"
        )
    return "\n".join(lines) or None


def prune_problem(
    name: str, spec: dict[str, Any], layers: int | None, pruning: dict[str, Any]
) -> str | None:
    """What a model's local config.json already tells against pruning it as configured (the
    rest is known once the model is cached: resolved_problem)."""
    config = local_config(spec)
    if config is None:
        return None
    declared = ADAPTERS.get(str(config.get("model_type")))
    task = declared.task if declared else task_from_classes(config.get("architectures") or [])
    return pruning_problem(
        name, task, declared, layers, pruning["lengths"], pruning["variants"]
    ) or measures_problem(
        name, config.get("max_position_embeddings") or config.get("n_positions"), pruning
    )


def measures_problem(name: str, max_positions: int | None, pruning: dict[str, Any]) -> str | None:
    """What is wrong with the calibration windows (config pruning.calibration) and the
    literature's measures of a pruned model (pruning.context, pruning.generation) for a model
    of `max_positions` positions (None: unknown)."""
    context, generation = pruning["context"], pruning["generation"]
    return (
        calibration_problem(name, max_positions, pruning["calibration"])
        or context_problem(context["lengths"], context["windows"], max_positions, name)
        or generation_problem(generation["prompts"], generation["new_tokens"])
    )


def resolved_problem(
    name: str,
    info: dict[str, Any],
    config: dict[str, Any],
    *,
    predict: bool,
    parts: bool,
    prune: bool = False,
) -> str | None:
    """What a resolved model (its info.json) lacks for what the config asks of it: a width of
    at least the low-rank methods' rank (always), a decoder head and the configured layers to
    predict from (`predict`), block parts and the jump layers (`parts`), a causal LM with the
    configured lengths (`prune`)."""
    problem = info.get("hidden_size") and rank_problem(name, info["hidden_size"], config)
    if problem:
        return f"invalid configuration: {problem}"
    if prune:
        pruning, adapter = config["pruning"], adapter_of(info)
        problem = pruning_problem(
            name,
            adapter.task,
            adapter,
            info["num_layers"],
            resolved_lengths(pruning["lengths"], info["num_layers"]),
            pruning["variants"],
        ) or measures_problem(name, info.get("max_positions"), pruning)
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
    if predict or parts or prune:
        if not info["has_lm_head"]:
            return missing_head_message(name, info["task"], info["model_class"])
        problem = layer_problem(name, info["num_layers"], config)
        if problem:
            return f"invalid configuration: {problem}"
    return None


def gpu_problem(models: dict[str, Any], find_gpu: Callable[[], LocalGpu | None]) -> str | None:
    """What this machine cannot run of what the models ask, for a run whose jobs run here: a
    `device_map` where the jobs will see no GPU, `dtype: bfloat16` on a GPU without it (compute
    capability below 8.0). `find_gpu` (jtc.pipeline.gpus.local_gpu) is asked only when a model
    needs it. The jobs refuse the same (jtc.model.cache.compute_problem); this says it before
    any job runs."""
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


def alternatives(names: Iterable[str]) -> str:
    """A regex matching exactly these names; one that matches nothing for no names."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


@dataclass(frozen=True)
class Experiment:
    """What a checked config runs, as the rules name it."""

    models: list[str]
    corpora: list[str]
    methods: list[str]
    predicting: list[str]  # the models whose predictions are decoded (models.NAME.predict)
    submodules: dict[str, Any]  # config submodules
    pruning: dict[str, Any]  # config pruning
    shortlist: bool  # whether the early exit's shortlist check is fitted (shortlist_rank set)

    @classmethod
    def of(cls, config: dict[str, Any]) -> Experiment:
        return cls(
            models=list(config["models"]),
            corpora=list(config["corpora"]),
            methods=list(config["methods"]),
            predicting=[m for m in config["models"] if config["models"][m]["predict"]],
            submodules=config["submodules"],
            pruning=config["pruning"],
            shortlist=bool(config["early_exit"]["shortlist_rank"]),
        )

    @property
    def map_methods(self) -> list[str]:
        """The methods with a map file (every one but id)."""
        return [m for m in self.methods if m != "id"]

    @property
    def closed_methods(self) -> list[str]:
        """Solved in closed form (mat, rrr), one fit_map job per (model, corpus) for all of
        them, reading the training states once."""
        return [m for m in self.map_methods if not METHODS[m].trained]

    @property
    def trained_methods(self) -> list[str]:
        """Trained by gradient descent (NJTC, N-NJTC, the one-map methods, the tuned lens), one
        train_map job per (model, corpus, method): changing one's settings retrains it alone."""
        return [m for m in self.map_methods if METHODS[m].trained]

    @property
    def submodule_corpora(self) -> list[str]:
        return self.submodules["corpora"] or self.corpora

    def prunes(self, model: str, corpus: str) -> bool:
        """Whether depth pruning runs for this model on this corpus."""
        corpora = self.pruning["corpora"] or self.corpora
        return model in self.pruning["models"] and corpus in corpora

    def methods_for(self, model: str) -> list[str]:
        """The configured methods that apply to a model (the tuned lens needs a decoder head)."""
        return [m for m in self.methods if applicable(m, model in self.predicting)]

    def targets(self, outputs_of: Callable[..., list[str]]) -> list[str]:
        """Everything the experiment makes, intermediates included (the cached models, sentence
        tables, states, maps, per-position scores): an output deleted by hand is made again by
        the next run, with what depends on it, even where what follows it is up to date.
        `outputs_of(rule, **wildcards)`: every output file of a rule's jobs for these wildcards
        (a list of values: one job per value)."""
        targets = outputs_of("headline_table")
        targets += [paths.MODEL.format(model=m) for m in self.models]
        targets += [paths.CORPUS.format(corpus=c) for c in self.corpora]
        for model in self.models:
            for corpus in self.corpora:
                done = dict(model=model, corpus=corpus)
                targets += outputs_of("extract_hidden", **done, split=["train", "validation"])
                names = ["r2_table", "plot_r2", "parameter_table"]
                if self.closed_methods:
                    names.append("fit_map")
                for method in self.trained_methods:
                    if method in self.methods_for(model):
                        targets += outputs_of("train_map", **done, method=method)
                if model in self.predicting:
                    names += ["decode_predictions", "prediction_table", "plot_prediction"]
                    names += ["prediction_examples", "early_exit", "plot_early_exit"]
                    if self.shortlist:
                        names.append("fit_shortlist")
                if model in self.submodules["models"] and corpus in self.submodule_corpora:
                    targets += outputs_of("record_parts", **done, split=["train", "validation"])
                    names += ["fit_parts", "part_r2_table", "plot_part_r2", "replace_parts"]
                    names += ["submodule_table", "plot_submodules"]
                if self.prunes(model, corpus):
                    names += ["calibrate_pruning", "run_pruned", "pruning_tables", "plot_pruning"]
                    if self.pruning.get("measures_in_all", False):
                        names += ["context_perplexity", "generation_fidelity", "measure_tables"]
                for name in names:
                    targets += outputs_of(name, **done)
        if self.pruning.get("benchmarks", {}).get("in_all", False):
            targets += self.benchmark_targets(outputs_of)
        return targets

    def benchmark_targets(self, outputs_of: Callable[..., list[str]]) -> list[str]:
        """Everything the benchmarks make (`snakemake benchmarks`; `all` too with
        pruning.benchmarks.in_all), intermediates included: lm-eval's task files and, for each
        pruned model and corpus, the scores, tables and figures. So a task folder deleted by
        hand (the recovery of a damaged one) is made again by the next run, and everything
        scored from it, even where the figures that follow are up to date."""
        pairs = [(m, c) for m in self.models for c in self.corpora if self.prunes(m, c)]
        targets = [paths.BENCHMARK_TASKS] if pairs else []
        for model, corpus in pairs:
            for name in BENCHMARK_RULES:
                targets += outputs_of(name, model=model, corpus=corpus)
        return targets


def damaged_problem(targets: Iterable[str]) -> str | None:
    """The existing targets that are not the outputs they should be (jtc.files.stamps
    .damaged_outputs), one a line: the run is refused."""
    problems = damaged_outputs(targets)
    if not problems:
        return None
    return (
        f"{len(problems)} outputs under {paths.RESULTS}/ are not what they should be:\n"
        + "\n".join(problems)
    )


def leftovers_note(targets: Iterable[str]) -> str | None:
    """The outputs under results/ that are not targets, left by a run with another config."""
    others = leftovers(paths.RESULTS, targets)
    if not others:
        return None
    return (
        f"jtc: {len(others)} outputs under {paths.RESULTS}/ are not part of this "
        f"experiment (left by a run with another config; nothing of this run reads "
        f"them, no table or figure combines them): {listing(others)}"
    )


def planned_jobs(dag: Any) -> list[PlannedJob]:
    """The jobs of Snakemake's DAG (known once the run starts) as jtc.files.stamps sees them,
    `rule all` left out."""
    return [
        PlannedJob(
            job.rule.name,
            dict(job.wildcards_dict),
            dict(job.params.items()),
            [str(f) for f in job.output],
            dag.needrun(job),
        )
        for job in dag.jobs
        if job.rule.name != "all"
    ]


def stale_problem(jobs: list[PlannedJob]) -> str | None:
    """The outputs the run would read as they are but that were made with other settings (or
    are other outputs), one a line: the run is refused before any job starts."""
    stale = stale_outputs(jobs)
    if not stale:
        return None
    return (
        f"{len(stale)} outputs under {paths.RESULTS}/ are not what this run would use:\n"
        + "\n".join(stale)
    )


def replaced_note(jobs: list[PlannedJob]) -> str | None:
    """The outputs the run replaces because the config changed."""
    replaced = replaced_outputs(jobs)
    if not replaced:
        return None
    return (
        f"jtc: this run replaces {len(replaced)} outputs made with other settings than "
        f"this config's (and remakes what depends on them): {listing(replaced)}"
    )
