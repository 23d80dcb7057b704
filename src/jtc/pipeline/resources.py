"""Memory and run-time requests of the workflow's jobs, for a cluster scheduler, and each GPU
job's share of a local GPU's memory (torch-free; read by the Snakefile, never by a job).

Estimates grow with the model (width, depth, parameters, vocabulary) and the number of
sentences, and with `attempt`: a job that a scheduler killed for memory or time is retried with
twice, then three times, the request. Run times assume 50 GFLOP/s sustained (a CPU node; a
GPU is far faster) and sentences a quarter of `max_tokens` long on average; a profile can
still override any rule (`set-resources`).
"""

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
from jtc.data.states import KEEP_BYTES
from jtc.measures.checks import LOGITS_ELEMENTS
from jtc.model.gguf_header import GGUFHeaderError, GGUFShape, read_shape
from jtc.model.sources import gguf_files
from jtc.pipeline.config import split_positions
from jtc.pruning.spans import (
    StatisticsPlan,
    resolved_lengths,
    spans,
    sums_batch,
    sums_batch_bytes,
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

GFLOPS = 50.0  # sustained throughput assumed for run times
# Python, the libraries and Snakemake's script preamble, measured as the peak RSS of jobs that
# hold next to no data (2-core machine, 2026-11-27): 420-670 MB with torch and transformers
# (resolve_model, extract_hidden, decode_predictions of the tiny BERT), 90-240 MB without torch
BASE_MB = 500
TORCH_FREE_BASE_MB = 250
TORCH_FREE = ("r2_table", "fit_parts", "part_r2_table")  # stages whose jobs import no torch
MARGIN = 1.15  # on what a job holds beyond the interpreter: allocator slack, what is not counted
MIN_RUNTIME = 10  # minutes
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
    parameter_bytes: int = 4  # the model's compute dtype (models.NAME.dtype): 2 for 16-bit
    runs: int = 1  # replace_parts: jump layers × variants; run_pruned: spans × variants
    jumps: int = 1
    matrices: int = 0  # calibrate_pruning: the d × d float64 sums it holds
    # calibrate_pruning with replaceme_cosine (jtc.pruning.cosine): the (tokens, d) float32
    # rows it keeps (starts and states), and its Adam passes (spans × epochs)
    cosine_rows: int = 0
    cosine_passes: int = 0
    positions: int = 1  # rows per sentence (positions_per_sentence, training split): rows / this
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
        """Before the model is cached: the shape of a local model folder (its config.json, and
        its weight files' bytes for the parameters) or of a GGUF file or its parts (the file's
        header), in the compute dtype of `spec` (models.NAME); any other source (a hub id)
        gives the large default."""
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
        folder = Path(str(spec.get("source", ""))).expanduser()
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
            else {"rows": text.windows, "tokens": text.window_tokens}
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


def _measures_shape(stage: str, config: dict[str, Any], shape: Shape) -> Shape:
    """A measures job's models (runs: the full model and each length and variant at the chosen
    span), windows or prompts (rows) and their tokens, from its settings objects."""
    span_runs = SpanRunSettings.from_config(config)
    subjects = 1 + len(resolved_lengths(span_runs.lengths, shape.layers)) * len(span_runs.variants)
    if stage == "context_perplexity":
        context = ContextSettings.from_config(config)
        rows, tokens = context.windows * len(context.lengths), max(context.lengths)
    else:
        generation = GenerationSettings.from_config(config)
        rows, tokens = generation.prompts, config["max_tokens"] + generation.new_tokens
    return dataclasses.replace(shape, rows=rows, tokens=tokens, runs=subjects)


def _benchmark_shape(config: dict[str, Any], shape: Shape) -> Shape:
    """A run_benchmarks job's requests (rows: up to four choices of every document of every
    task, REQUEST_TOKENS long) and measured models (runs: the full model and one per length
    and variant; config pruning.benchmarks)."""
    benchmarks = BenchmarkSettings.from_config(config)
    lengths = resolved_lengths(config["pruning"]["lengths"], shape.layers)
    return dataclasses.replace(
        shape,
        rows=4 * benchmarks.limit * len(benchmarks.tasks),
        tokens=REQUEST_TOKENS,
        runs=1 + len(lengths) * len(config["pruning"]["variants"]),
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


def memory_mb(stage: str, shape: Shape, attempt: int = 1) -> int:
    """Memory request (MB) of one job of `stage`: the interpreter and libraries (less for a
    stage that imports no torch) and what the job holds, with a margin, rounded up to 100 MB."""
    base = TORCH_FREE_BASE_MB if stage in TORCH_FREE else BASE_MB
    need = base + MARGIN * _data_mb(stage, shape)
    return int(math.ceil(need * attempt / 100) * 100)


def _data_mb(stage: str, shape: Shape) -> float:
    """What one job of `stage` holds beyond the interpreter and libraries (MB): the model or its
    head, the states, the maps and the work arrays. A job that runs the model holds its weights
    once, in host memory or on a GPU (the cache is written in the compute dtype, so loading maps
    the file instead of converting a copy); resolve_model also holds the weights it writes."""
    s = shape
    sequence_mb = s.rows * s.tokens / 2 * s.width * 4 / 1e6  # states at every position
    square_mb = s.width**2 * 8 / 1e6  # one width × width float64 matrix (a Gram matrix, a map)
    part_maps_mb = s.layers * 4 * s.width**2 * 4 / 1e6  # a float32 map per part of every block
    parts_mb = s.rows * s.layers * 8 * s.width * 4 / 1e6  # every part's input and output
    # the training states a fit job keeps in memory (jtc.data.states.LayerStates)
    kept_states_mb = min(s.states_mb(s.rows), KEEP_BYTES / 1e6 + s.states_mb(s.rows, layers=1))
    if stage == "resolve_model":  # the model loaded (a GGUF file's dequantisation holds about
        # 1.3× its weights at the peak: Qwen2.5 0.5B and 1.5B, 2026-11-28) and serialised
        need = 1.5 * s.model_mb
    elif stage == "extract_hidden":  # the model, activations, at most 2,048 sentences' states
        need = s.model_mb + s.states_mb(min(s.rows, 2048 * s.positions), itemsize=8)
    elif stage == "fit_map":  # the layers' states it keeps (at most KEEP_BYTES, and one read
        # again); float64 X, its projection, one target; per pair, the reduced-rank fit's
        # width × width work arrays; a source layer's float32 maps to every later layer, of
        # both closed-form methods: a float64 square's bytes a layer (Qwen2.5 1.5B: 1.8 GB at
        # the peak, 2026-11-28)
        need = kept_states_mb + s.rows * s.width * 8 * 4 / 1e6 + (8 + s.layers) * square_mb + 64
    elif stage == "train_map" and not s.head:  # NJTC, N-NJTC, the one-map methods: the rows
        # kept, the reduced-rank start's float64 X, projection and target, its width × width
        # work arrays, and the factors with their gradients and Adam's moments
        need = kept_states_mb + s.rows * s.width * 8 * 4 / 1e6 + 8 * square_mb + 64
    elif stage == "train_map":  # the tuned lens: the head, a batch of logits, the least-squares
        # start (float64) and the map with its gradient and Adam's moments
        need = (
            s.head_mb
            + kept_states_mb
            + s.rows * s.width * 4 * 4 / 1e6
            + 128 * s.vocab * 4 * 4 / 1e6
            + 6 * square_mb
        )
    elif stage == "r2_table":  # every validation layer, in float64, one prediction; a source
        # layer's maps and their float64 work arrays
        need = (
            s.states_mb(s.rows, itemsize=8)
            + 2 * s.rows * s.width * 8 / 1e6
            + (s.layers + 2) * square_mb
        )
    elif stage == "prediction_examples":  # a few sentences: the head in float32 and one map
        # (read one at a time) with its product
        need = s.head_mb + square_mb + 64
    elif stage == "decode_predictions":
        # the head, logits chunks (and the shortlist check's: its V × k factor, ẑ), states, and
        # one map (read one at a time) with its product
        # (Qwen2.5 0.5B, its head 545 MB in float32: 1.1 GB at the peak, 2026-11-28)
        need = 1.5 * s.head_mb + 4 * 64 + s.rows * s.width * 4 * 6 / 1e6 + square_mb
    elif stage == "fit_shortlist":  # the head as stored and in float32, its float64 copy, the
        # last layer's states, and width × width float64 arrays (second moment, its roots, the
        # head's Gram matrix, their product)
        stored_head_mb = s.vocab * s.width * s.parameter_bytes / 1e6
        need = 3 * s.head_mb + stored_head_mb + s.rows * s.width * 4 / 1e6 + 6 * square_mb + 64
    elif stage == "record_parts":  # the model; at most 1 GB of recorded parts at once, and
        # the writers' buffers (at most 512 MB)
        need = s.model_mb + min(parts_mb, 1024) + min(parts_mb, 512)
    elif stage == "fit_parts":  # one part's rows, as a fit_map job's; a block's part maps and
        # the float64 Gram matrix, its factor or pseudo-inverse, and a map
        need = s.rows * s.width * 8 * 4 / 1e6 + part_maps_mb / s.layers + 7 * square_mb + 64
    elif stage == "replace_parts":  # the model, the head in float32, the part maps, every jump
        # layer's states at every position
        need = s.model_mb + s.head_mb + part_maps_mb + 3 * 64 + (s.jumps + 1) * sequence_mb
    elif stage == "calibrate_pruning":  # the model; the float64 sums; a batch's states at
        # every position, float32 as captured and float64 as summed (jtc.pruning.spans)
        batch = sums_batch(s.batch, s.tokens, s.layers, s.width)
        batch_mb = batch * sums_batch_bytes(s.tokens, s.layers, s.width) / 1e6
        need = s.model_mb + s.matrices * square_mb + batch_mb + 64
        # replaceme_cosine's rows (half the longest sentence on average), as kept and once
        # gathered again from the batches' parts
        need += 2 * s.cosine_rows * s.rows * s.tokens / 2 * s.width * 4 / 1e6
    elif stage == "run_pruned":  # the model, the head in float32, every sentence's states at
        # every position (2L + 1 sites), decoding chunks, one map
        need = s.model_mb + s.head_mb + 3 * 64 + (2 * s.layers + 1) * sequence_mb + square_mb
    elif stage == "export_pruned":  # the model, and its weights serialised
        need = 2 * s.model_mb
    elif stage == "run_benchmarks":  # the model and a pruned copy; a batch's logits at every
        # position and their log-softmax (float32)
        need = 2 * s.model_mb + 2 * s.batch * s.tokens * s.vocab * 4 / 1e6 + 256
    elif stage in ("context_perplexity", "generation_fidelity"):  # the model and one pruned
        # copy; logits and log-probabilities of at most LOGITS_ELEMENTS float32 values
        need = 2 * s.model_mb + 3 * LOGITS_ELEMENTS * 4 / 1e6 + 64
    else:
        need = 500
    return need


def runtime_minutes(stage: str, shape: Shape, attempt: int = 1, epochs: int = 100) -> int:
    """Wall-time request (minutes) of one job of `stage`."""
    s = shape
    if stage == "resolve_model":
        flop = 50_000 * s.parameters  # downloading, dequantising, writing: ~1 min per 60M
    elif stage in ("extract_hidden", "record_parts"):  # a causal model runs each sentence
        # once, cut after its last drawn position: about half its tokens for one position
        flop = 2 * s.parameters * s.sentences * s.tokens / (4 if s.positions == 1 else 2)
    elif stage == "replace_parts":  # one unmodified pass, then per run half the blocks on
        # average and a decoding
        forward = 2 * s.parameters * s.rows * s.tokens / 4
        flop = forward * (1 + s.runs / 2) + s.runs * 4 * s.rows * s.width * s.vocab
    elif stage == "calibrate_pruning":  # a forward pass over every token, and per token the
        # d × d products of the sums
        tokens = s.rows * s.tokens / 2
        flop = 2 * s.parameters * tokens + 2 * s.matrices * s.width**2 * tokens
        if s.cosine_passes:  # replaceme_cosine: a second forward pass, and per Adam pass
            # (span × epoch) two d × d products of every token (prediction, gradient)
            flop += 2 * s.parameters * tokens + 4 * s.cosine_passes * s.width**2 * tokens
    elif stage == "context_perplexity":  # every model on every window token (the pruned
        # ones have fewer blocks: counted whole)
        flop = s.runs * 2 * s.parameters * s.rows * s.tokens
    elif stage == "generation_fidelity":  # every model on every prompt and generated token,
        # and per generated token generate's overhead (~20 ms, counted as 1 GFLOP)
        flop = s.runs * s.rows * s.tokens * (2 * s.parameters + 1e9)
    elif stage == "run_pruned":  # per run, half the blocks and a decoding of every token
        tokens = s.rows * s.tokens / 2
        flop = 2 * s.parameters * tokens * (1 + s.runs / 2)
        flop += (s.runs + 1) * 2 * tokens * s.width * s.vocab
    elif stage == "run_benchmarks":  # every request through each measured model
        flop = 2 * s.parameters * s.rows * s.tokens * s.runs
    elif stage == "fit_parts":  # a Gram matrix and a solve per part of every block
        flop = 2 * s.rows * s.width**2 * 4 * 2 * s.layers
    elif stage == "fit_map":  # per source layer: the Gram, its factor, every later target
        flop = s.rows * s.width**2 * (s.layers + 2) ** 2
    elif stage == "train_map" and not s.head:  # a low-rank method's epochs, a pair per source
        # layer, after its reduced-rank start (a Gram per source)
        flop = s.layers * epochs * s.rows * s.width * 8 * s.width
        flop += s.layers * s.rows * s.width**2
    elif stage == "train_map":  # per source, the tuned lens: 4 vocabulary products per row/epoch
        flop = s.layers * epochs * s.rows * s.width * (4 * s.vocab + 8 * s.width)
    elif stage == "r2_table":
        flop = s.rows * s.width**2 * s.layers**2
    elif stage == "fit_shortlist":  # the features' second moment and the head's Gram, float64
        flop = 2 * (s.rows + s.vocab) * s.width**2
    elif stage in ("decode_predictions", "prediction_examples"):
        flop = 2 * (s.layers + 2) * s.rows * s.width * s.vocab
    else:
        flop = 0
    minutes = MIN_RUNTIME + flop / (GFLOPS * 1e9) / 60
    return int(math.ceil(minutes * attempt))


GPU_CONTEXT_MB = 600  # a process's CUDA context and the caching allocator's slack


def gpu_memory_percent(stage: str, shape: Shape, gpu_mb: float | None, attempt: int = 1) -> int:
    """The share (percent, 1 to 100) of one GPU's memory that a job of `stage` is taken to hold,
    or 0 where there is no GPU (`gpu_mb` None). The local scheduler runs GPU jobs side by side
    only while their shares add up to at most 100 (the `gpu_memory_percent` resource, whose
    limit workflow/profiles/default sets), so that jobs that each load a model do not overfill
    the GPU, as far as the estimates hold. The estimate is what the job's memory request counts
    beyond the interpreter, with the model's weights once, and a CUDA context; a job larger
    than the GPU gets 100 and runs alone."""
    if not gpu_mb:
        return 0
    need = (_data_mb(stage, shape) + GPU_CONTEXT_MB) * attempt
    return max(1, min(100, math.ceil(100 * need / gpu_mb)))
