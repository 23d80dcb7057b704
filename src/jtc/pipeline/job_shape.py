"""The shape of each workflow job, for its resource requests (jtc.pipeline.resources): the
model's width, depth, parameters and vocabulary (from its config.json or GGUF header, before
it is cached) and what the job holds of the config: its sentences and rows, the pruning spans
and sums, the measured windows and prompts, the benchmark requests (torch-free; read by the
Snakefile, never by a job)."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jtc import paths
from jtc.model.gguf_header import GGUFHeaderError, GGUFShape, read_shape
from jtc.model.sources import candidates, gguf_files
from jtc.pipeline.config import split_positions
from jtc.pruning.spans import (
    StatisticsPlan,
    resolved_lengths,
    spans,
)
from jtc.pruning.variants import variant_of
from jtc.settings import (
    BenchmarkSettings,
    CalibrationSettings,
    ContextSettings,
    GenerationSettings,
    SpanRunSettings,
    TrainSettings,
)
from jtc.shortcuts.methods import METHODS
from jtc.shortcuts.parts import jump_layers

# lm-eval's requests (a document's choices, each context and continuation) are taken this long
# (HellaSwag's run to 100-150 SmolLM2 tokens; ARC's and PIQA's are shorter, BoolQ's longer)
REQUEST_TOKENS = 160
# an English sentence's tokens, counted for positions_per_sentence "all" (news: 58,809 tokens in
# 2,000 sentences truncated to 64, 29.4 each, SmolLM2's tokenizer; 2026-11-27)
SENTENCE_TOKENS = 40
ITEMSIZE = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Shape:
    """What a job's cost depends on: the model, and the sentences it reads."""

    width: int = 1024
    layers: int = 24
    parameters: int = 400_000_000
    vocab: int = 50_000
    rows: int = 10_000
    tokens: int = 128  # per sentence, at most
    # calibrate_pruning: the share of `tokens` a sequence holds on average: about half for
    # sentences cut at max_tokens, all of it for windows of running text
    filled: float = 0.5
    parameter_bytes: int = 4  # the model's compute dtype (models.NAME.dtype): 2 for 16-bit
    runs: int = 1  # replace_parts: jump layers × variants; run_pruned: spans × variants
    jumps: int = 1
    # calibrate_pruning: the d × d float64 sums it holds; r2_table: the maps and work arrays
    matrices: int = 0
    # calibrate_pruning with replaceme_cosine (jtc.pruning.cosine): the (tokens, d) float32
    # rows it keeps (starts and states), and its Adam passes (spans × epochs)
    cosine_rows: int = 0
    cosine_passes: int = 0
    positions: int = 1  # rows per sentence (positions_per_sentence, training split): rows / this
    validation_rows: int = 0  # fit_map: the validation rows every pair is scored on
    batch: int = 32  # run_benchmarks, calibrate_pruning: sequences per batch (config batch_size)
    # train_map: its method is trained through the model's decoder head (the tuned lens), which
    # the job holds and decodes every row through; else from the training states alone
    head: bool = True

    @property
    def sentences(self) -> int:
        return max(1, self.rows // self.positions)

    @classmethod
    def of(cls, model_dir: str | Path, rows: int, tokens: int) -> Shape:
        """The cached model's shape (info.json), or a large default before it is cached."""
        info_path = Path(model_dir) / "info.json"
        if not info_path.exists():
            return cls(rows=rows, tokens=tokens)
        info = json.loads(info_path.read_text())
        return cls(
            width=int(info["hidden_size"]),
            layers=int(info["num_layers"]),
            parameters=int(info["parameters"]),
            vocab=int(info.get("vocab_size") or 50_000),
            rows=rows,
            tokens=tokens,
            parameter_bytes=4 if info.get("dtype", "float32") == "float32" else 2,
        )

    @classmethod
    def of_source(cls, spec: dict[str, Any], rows: int, tokens: int) -> Shape:
        """Before the model is cached: the shape of a local model folder or one inside an
        installed package (its config.json, and its weight files' bytes for the parameters) or
        of a GGUF file or its parts (the file's header), in the compute dtype of `spec`
        (models.NAME); any other source (a hub id) gives the large default."""
        compute_bytes = ITEMSIZE.get(spec.get("dtype", "float32"), 4)
        default = cls(rows=rows, tokens=tokens, parameter_bytes=compute_bytes)
        gguf = gguf_files(spec) if spec.get("source") else None
        if gguf:
            try:
                header = _header(tuple(gguf))
            except (OSError, GGUFHeaderError):
                return default
            return dataclasses.replace(
                default,
                width=header.width,
                layers=header.layers,
                parameters=header.parameters,
                vocab=header.vocab,
            )
        found, _ = candidates(spec) if spec.get("source") else ([], [])
        if not found or found[0].kind == "hub":
            return default
        folder = Path(found[0].location)  # a local folder, or one inside an installed package
        try:
            config = json.loads((folder / "config.json").read_text())
        except (OSError, ValueError):
            return default
        width = config.get("hidden_size") or config.get("n_embd")
        layers = config.get("num_hidden_layers") or config.get("n_layer")
        weights = [p for p in folder.glob("*.safetensors")] or list(folder.glob("*.bin"))
        stored = ITEMSIZE.get(str(config.get("torch_dtype") or config.get("dtype")), 4)
        if not (width and layers and weights):
            return default
        return dataclasses.replace(
            default,
            width=int(width),
            layers=int(layers),
            parameters=sum(p.stat().st_size for p in weights) // stored,
            vocab=int(config.get("vocab_size") or default.vocab),
        )

    @property
    def model_mb(self) -> float:
        return self.parameters * self.parameter_bytes / 1e6

    @property
    def head_mb(self) -> float:
        """The decoder head alone, in float32 (jobs that decode load only the head)."""
        return self.vocab * self.width * 4 / 1e6

    def states_mb(self, rows: int, layers: int | None = None, itemsize: int = 4) -> float:
        return rows * (self.layers + 1 if layers is None else layers) * self.width * itemsize / 1e6


@functools.lru_cache(maxsize=16)
def _header(paths: tuple[Path, ...]) -> GGUFShape:
    """A GGUF header read once while planning (every job's requests ask for it)."""
    return read_shape(paths)


def stage_shape(
    stage: str, config: dict[str, Any], model: str, split: str, method: str | None = None
) -> Shape:
    """The shape of a job of `stage` for `model`, reading the `split`'s sentences: the model's
    once it is cached (before, a local source folder's, else a large default); for
    replace_parts its sentences, jump layers and runs, for the depth-pruning jobs theirs
    (_pruning_shape), and for a train_map job of `method` the rows its
    training.<method>.positions keeps (trained_rows_per_sentence) and whether it holds the
    head. The depth is the shape's (its default before the model is cached): a resource
    function must not wait for the resolve_model checkpoint."""
    tokens, positions = config["max_tokens"], rows_per_sentence(config, split)
    if stage == "train_map" and method is not None:
        positions = trained_rows_per_sentence(config, method, positions)
    rows = config["sizes"][split] * positions
    model_dir = Path(paths.MODEL.format(model=model))
    if (model_dir / "info.json").exists():
        shape = Shape.of(model_dir, rows, tokens)
    else:  # not cached yet (resolve_model's own job): the source's shape where it tells one
        shape = Shape.of_source(config["models"].get(model, {}), rows, tokens)
    shape = dataclasses.replace(shape, positions=positions)
    if stage == "fit_map":
        validation = config["sizes"]["validation"] * rows_per_sentence(config, "validation")
        shape = dataclasses.replace(shape, validation_rows=validation)
    if stage == "r2_table":  # a trained method's map and its work arrays (mat, rrr: scored)
        trained = any(METHODS[m].trained for m in config["methods"])
        shape = dataclasses.replace(shape, matrices=3 if trained else 0)
    if stage == "train_map" and method is not None:
        return dataclasses.replace(shape, head=METHODS[method].needs_head)
    if stage in ("calibrate_pruning", "run_pruned"):
        return _pruning_shape(stage, config, shape)
    if stage == "run_benchmarks":
        return _benchmark_shape(config, shape)
    if stage in ("context_perplexity", "generation_fidelity"):
        return _measures_shape(stage, config, shape)
    if stage != "replace_parts":
        return shape
    submodules = config["submodules"]
    configured, stride = submodules["jump_layers"], submodules["jump_stride"]
    jumps = len(jump_layers(configured, stride, shape.layers))
    return dataclasses.replace(
        shape,
        rows=min(shape.rows, submodules["sentences"] or shape.rows),
        jumps=jumps,
        runs=jumps * len(submodules["variants"]),
    )


def _pruning_shape(stage: str, config: dict[str, Any], shape: Shape) -> Shape:
    """A depth-pruning job's sentences (every token of each), sums and runs, from the settings
    objects its stage reads (config pruning)."""
    if stage == "calibrate_pruning":
        calibration = CalibrationSettings.from_config(config)
        lengths = resolved_lengths(calibration.lengths, shape.layers)
        plan = StatisticsPlan.of(shape.layers, lengths, calibration.variants)
        # the variants fitted on the token rows (replaceme_cosine, jtc.pruning.cosine): X_i of
        # every start and h_l of every start and end kept, Adam's epochs over each span
        rows = [
            span
            for v in calibration.variants
            if variant_of(v).fitted_on == "rows"
            for span in spans(shape.layers, lengths, v)
        ]
        cosine = sorted(set(rows))
        kept = len({i for i, _ in cosine}) + len({k for i, n in cosine for k in (i, i + n)})
        text = calibration.calibration
        # sentences of at most max_tokens tokens, or windows of window_tokens tokens
        sized = (
            {"rows": calibration.calibration_sentences}
            if text.text == "sentences"
            else {"rows": text.windows, "tokens": text.window_tokens, "filled": 1.0}
        )
        return dataclasses.replace(
            shape,
            **sized,
            batch=config["batch_size"],
            matrices=plan.matrices(),
            cosine_rows=kept,
            cosine_passes=len(rows) * calibration.cosine.epochs,
        )
    span_runs = SpanRunSettings.from_config(config)
    lengths = resolved_lengths(span_runs.lengths, shape.layers)
    # every span of every variant on the evaluation sentences; on the selected sentences at
    # most each rule's span per length and variant (3 rules), counted as evaluation runs
    runs = sum(len(spans(shape.layers, lengths, v)) for v in span_runs.variants)
    chosen = 3 * len(lengths) * len(span_runs.variants)
    rows = max(span_runs.evaluation_sentences, span_runs.selected_sentences)
    runs = math.ceil(
        (runs * span_runs.evaluation_sentences + chosen * span_runs.selected_sentences) / rows
    )
    return dataclasses.replace(shape, rows=rows, runs=runs)


def measured_models(config: dict[str, Any], layers: int) -> int:
    """The models the literature's measures and the benchmarks run (jtc.measures.subjects):
    the full model, and per length each variant and each pruning.also_measure entry."""
    pruning = config["pruning"]
    lengths = resolved_lengths(pruning["lengths"], layers)
    return 1 + len(lengths) * (len(pruning["variants"]) + len(pruning["also_measure"]))


def _measures_shape(stage: str, config: dict[str, Any], shape: Shape) -> Shape:
    """A measures job's models (runs: the full model and each length and variant at the chosen
    span), windows or prompts (rows) and their tokens, from its settings objects."""
    subjects = measured_models(config, shape.layers)
    if stage == "context_perplexity":
        context = ContextSettings.from_config(config)
        rows, tokens = context.windows * len(context.lengths), max(context.lengths)
    else:
        generation = GenerationSettings.from_config(config)
        rows, tokens = generation.prompts, config["max_tokens"] + generation.new_tokens
    return dataclasses.replace(shape, rows=rows, tokens=tokens, runs=subjects)


def _benchmark_shape(config: dict[str, Any], shape: Shape) -> Shape:
    """A run_benchmarks job's requests (rows: up to four choices of every document of every
    task, five of commonsense_qa's; REQUEST_TOKENS long, times 1 + the most few-shot examples
    configured) and measured models (runs: measured_models; config pruning.benchmarks)."""
    benchmarks = BenchmarkSettings.from_config(config)
    choices = sum(5 if task == "commonsense_qa" else 4 for task in benchmarks.tasks)
    return dataclasses.replace(
        shape,
        rows=choices * benchmarks.limit,
        tokens=REQUEST_TOKENS * (1 + max(benchmarks.shots.values(), default=0)),
        runs=measured_models(config, shape.layers),
        batch=config["batch_size"],
    )


def rows_per_sentence(config: dict[str, Any], split: str) -> int:
    """The states rows a sentence of `split` gives: one in validation; positions_per_sentence
    in training, at most max_tokens, and for "all" max_tokens up to SENTENCE_TOKENS."""
    count, tokens = split_positions(config, split), config["max_tokens"]
    return min(tokens, SENTENCE_TOKENS) if count == "all" else min(int(count), tokens)


def trained_rows_per_sentence(config: dict[str, Any], method: str, stored: int) -> int:
    """The rows a sentence gives a trained method: its training.<method>.positions of the
    `stored` rows (rows_per_sentence), all of them for "all"."""
    kept = TrainSettings.from_config(config, method).positions
    return stored if kept == "all" else min(stored, int(kept))


def trained_epochs(config: dict[str, Any], methods: Iterable[str]) -> int:
    """The epochs of the trained ones of these methods added up (max_epochs of each one's
    settings object, config training.<method>), at least 1."""
    epochs = [
        TrainSettings.from_config(config, m).max_epochs for m in methods if METHODS[m].trained
    ]
    return max(1, sum(epochs))
