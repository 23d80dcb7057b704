"""Memory and run-time requests of the workflow's jobs, for a cluster scheduler, and each GPU
job's share of a local GPU's memory (torch-free; read by the Snakefile, never by a job).

Estimates grow with the model (width, depth, parameters, vocabulary) and the number of
sentences, and with `attempt`: a job that a scheduler killed for memory or time is retried with
twice, then three times, the request. Run times assume 50 GFLOP/s sustained (a CPU node; a
GPU is far faster) and sentences a quarter of `max_tokens` long on average; a profile can
still override any rule (`set-resources`).
"""

from __future__ import annotations

import math

from jtc.data.states import KEEP_BYTES
from jtc.measures.checks import LOGITS_ELEMENTS
from jtc.pipeline.job_shape import Shape
from jtc.pruning.spans import sums_batch, sums_batch_bytes

GFLOPS = 50.0  # sustained throughput assumed for run times
# Python, the libraries and Snakemake's script preamble, measured as the peak RSS of jobs that
# hold next to no data (2-core machine, 2026-11-27): 420-670 MB with torch and transformers
# (resolve_model, extract_hidden, decode_predictions of the tiny BERT), 90-240 MB without torch
BASE_MB = 500
TORCH_FREE_BASE_MB = 250
TORCH_FREE = ("r2_table", "fit_parts", "part_r2_table")  # stages whose jobs import no torch
# r2_table imports numpy and pyarrow alone: 114-128 MB at the peak with 29 MB of states at width
# 4,096 (2-core machine, 2026-11-29)
BASE_MB_OF = {"r2_table": 120}
MARGIN = 1.15  # on what a job holds beyond the interpreter: allocator slack, what is not counted
MIN_RUNTIME = 10  # minutes


def memory_mb(stage: str, shape: Shape, attempt: int = 1) -> int:
    """Memory request (MB) of one job of `stage`: the interpreter and libraries (less for a
    stage that imports no torch) and what the job holds, with a margin, rounded up to 100 MB."""
    base = BASE_MB_OF.get(stage, TORCH_FREE_BASE_MB if stage in TORCH_FREE else BASE_MB)
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
        # width × width work arrays; the targets solved together (RHS_BYTES, and their maps);
        # every validation layer in float64 and a prediction (jtc.shortcuts.closed_fit scores
        # each map as it is solved, and keeps none it does not write)
        need = kept_states_mb + s.rows * s.width * 8 * 4 / 1e6 + 10 * square_mb + 2 * 64
        need += (
            s.states_mb(s.validation_rows, itemsize=8) + 2 * s.validation_rows * s.width * 8 / 1e6
        )
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
    elif stage == "r2_table":  # every validation layer, in float64, one prediction; a trained
        # method's map with its float64 work arrays (mat's and rrr's pairs come scored by
        # fit_map: s.matrices is 0 without a trained method)
        need = (
            s.states_mb(s.rows, itemsize=8)
            + 2 * s.rows * s.width * 8 / 1e6
            + s.matrices * square_mb
        )
    elif stage == "prediction_examples":  # a few sentences: the head in float32 and one map
        # (read one at a time) with its product
        need = s.head_mb + square_mb + 64
    elif stage == "decode_predictions":
        # the head, logits chunks (and the shortlist check's: its V × k factor, ẑ), states, and
        # one map (read one at a time) with its product
        # (Qwen2.5 0.5B, its head 545 MB in float32: 1.1 GB at the peak, 2026-11-28); a 16-bit
        # head as stored too, beside its float32 copy (width 4,096, 49,152 tokens, bfloat16:
        # 2,758 MB at the peak, 2026-11-29)
        stored_head_mb = (
            0 if s.parameter_bytes == 4 else s.vocab * s.width * s.parameter_bytes / 1e6
        )
        need = 1.5 * s.head_mb + stored_head_mb + 4 * 64 + s.rows * s.width * 4 * 6 / 1e6
        need += square_mb
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
        # and a block's own activations in the forward (attention, MLP): ~16 floats a token and
        # width (SmolLM2 on 3 windows of 2,048 tokens peaked at 3,645 MB, 101% of the request
        # without them)
        batch_mb += batch * s.tokens * 16 * s.width * 4 / 1e6
        need = s.model_mb + s.matrices * square_mb + batch_mb + 64
        # replaceme_cosine's rows (every token: half the longest sentence on average, a whole
        # window), as kept, and one layer's gathered from the batches' parts at a time
        # (SmolLM2, 32 windows of 2,048 tokens, 10 variants: 19.3 GB when every layer was
        # gathered at once, killed when this counted half of each window)
        need += (s.cosine_rows + 1) * s.rows * s.tokens * s.filled * s.width * 4 / 1e6
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
        tokens = s.rows * s.tokens * s.filled
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
    elif stage == "fit_map":  # per source layer: the Gram, its factor, every later target;
        # and every pair scored on the validation rows
        flop = (s.rows + s.validation_rows) * s.width**2 * (s.layers + 2) ** 2
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
