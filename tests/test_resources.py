"""Cluster resource requests grow with the model, the sentences and the attempt."""

import json

import pytest

from jtc.resources import Shape, memory_mb, runtime_minutes

STAGES = [
    "resolve_model",
    "extract_hidden",
    "fit_map",
    "train_map",
    "r2_table",
    "decode_predictions",
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
    assert 10_000 < memory_mb("extract_hidden", xl) < 40_000  # fp32 weights 6.2 GB, twice
    assert 60 < runtime_minutes("extract_hidden", xl) < 24 * 60  # on CPUs; a GPU is faster
    assert memory_mb("fit_map", xl) < 8_000  # every layer's states (2.8 GB) and one float64 X


def test_shape_reads_the_cached_model_and_has_a_default(tmp_path):
    assert Shape.of(tmp_path / "not-cached", 100, 64) == Shape(rows=100, tokens=64)
    (tmp_path / "info.json").write_text(
        json.dumps({"hidden_size": 16, "num_layers": 2, "parameters": 5000, "vocab_size": 90})
    )
    assert Shape.of(tmp_path, 100, 64) == Shape(16, 2, 5000, 90, 100, 64)
