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
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jtc import paths
from jtc.shortcuts.parts import jump_layers

GFLOPS = 50.0  # sustained throughput assumed for run times
BASE_MB = 1500  # Python, torch and the libraries
MIN_RUNTIME = 10  # minutes


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
    runs: int = 1  # replace_parts: jump layers (each holds every position's states) × variants
    jumps: int = 1

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

    @property
    def model_mb(self) -> float:
        return self.parameters * self.parameter_bytes / 1e6

    @property
    def head_mb(self) -> float:
        """The decoder head alone, in float32 (jobs that decode load only the head)."""
        return self.vocab * self.width * 4 / 1e6

    def states_mb(self, rows: int, layers: int | None = None, itemsize: int = 4) -> float:
        return rows * (self.layers + 1 if layers is None else layers) * self.width * itemsize / 1e6


def stage_shape(stage: str, config: dict[str, Any], model: str, split: str) -> Shape:
    """The shape of a job of `stage` for `model`, reading the `split`'s sentences: the model's
    once it is cached (a large default before), and for replace_parts its sentences, jump layers
    and runs. The depth is the shape's (its default before the model is cached): a resource
    function must not wait for the resolve_model checkpoint."""
    shape = Shape.of(paths.MODEL.format(model=model), config["sizes"][split], config["max_tokens"])
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


def trained_epochs(training: dict[str, Any], methods: Iterable[str]) -> int:
    """The epochs of these trained methods added up (config `training`, where a method's
    max_epochs is always filled in), at least 1."""
    return max(1, sum(training.get(m, {}).get("max_epochs", 0) for m in methods))


def memory_mb(stage: str, shape: Shape, attempt: int = 1) -> int:
    """Memory request (MB) of one job of `stage`."""
    return int(math.ceil((BASE_MB + _data_mb(stage, shape)) * attempt / 100) * 100)


def _data_mb(stage: str, shape: Shape, model_copies: int = 2) -> float:
    """What one job of `stage` holds beyond the interpreter and libraries (MB): the model or its
    head, the states and the work arrays. A job that runs the model holds `model_copies` of its
    weights at the peak: two in host memory (the copy being loaded, the model), one on a GPU
    (the weights are moved there, and the host copy freed)."""
    s = shape
    sequence_mb = s.rows * s.tokens / 2 * s.width * 4 / 1e6  # states at every position
    if stage == "resolve_model":
        need = 3 * s.model_mb
    elif stage == "extract_hidden":  # the model, activations, at most 2,048 sentences' states
        need = model_copies * s.model_mb + s.states_mb(min(s.rows, 2048), itemsize=8)
    elif stage == "fit_map":  # every layer's states; float64 X, its projection, one target
        need = s.states_mb(s.rows) + s.rows * s.width * 8 * 4 / 1e6 + 64
    elif stage == "train_map":  # the tuned lens also holds the head and a batch of logits
        need = (
            2 * s.head_mb
            + s.states_mb(s.rows)
            + s.rows * s.width * 4 * 4 / 1e6
            + 128 * s.vocab * 4 * 4 / 1e6
        )
    elif stage == "r2_table":  # every validation layer, in float64, and one prediction
        need = s.states_mb(s.rows, itemsize=8) + 2 * s.rows * s.width * 8 / 1e6
    elif stage in ("decode_predictions", "prediction_examples"):
        # the head, logits chunks (and the shortlist check's: its V × k factor, ẑ), states
        need = 3 * s.head_mb + 4 * 64 + s.rows * s.width * 4 * 6 / 1e6
    elif stage == "fit_shortlist":  # the head, its float64 copy, the last layer's states
        need = 3 * s.head_mb + s.rows * s.width * 4 / 1e6 + 64
    elif stage == "record_parts":  # at most 1 GB of recorded parts at once, and the writers'
        need = model_copies * s.model_mb + 1024 + 512
    elif stage == "fit_parts":  # one part at a time, as a fit_map job's
        need = s.rows * s.width * 8 * 4 / 1e6 + 64
    elif stage == "replace_parts":  # the model, every jump layer's states at every position
        need = model_copies * s.model_mb + 3 * 64 + (s.jumps + 1) * sequence_mb
    else:
        need = 500
    return need


def runtime_minutes(stage: str, shape: Shape, attempt: int = 1, epochs: int = 100) -> int:
    """Wall-time request (minutes) of one job of `stage`."""
    s = shape
    if stage == "resolve_model":
        flop = 50_000 * s.parameters  # downloading, dequantising, writing: ~1 min per 60M
    elif stage in ("extract_hidden", "record_parts"):
        flop = 2 * s.parameters * s.rows * s.tokens / 4
    elif stage == "replace_parts":  # one unmodified pass, then per run half the blocks on
        # average and a decoding
        forward = 2 * s.parameters * s.rows * s.tokens / 4
        flop = forward * (1 + s.runs / 2) + s.runs * 4 * s.rows * s.width * s.vocab
    elif stage == "fit_parts":  # a Gram matrix and a solve per part of every block
        flop = 2 * s.rows * s.width**2 * 4 * 2 * s.layers
    elif stage == "fit_map":  # per source layer: the Gram, its factor, every later target;
        # and the low-rank methods' epochs (theirs added up), a pair per source layer
        flop = s.rows * s.width**2 * (s.layers + 2) ** 2
        flop += s.layers * epochs * s.rows * s.width * 8 * s.width
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
    need = (_data_mb(stage, shape, model_copies=1) + GPU_CONTEXT_MB) * attempt
    return max(1, min(100, math.ceil(100 * need / gpu_mb)))
