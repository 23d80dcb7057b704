"""A few spans' calibration (jtc.pruning.calibrate.calibrate_spans, the studies' entry point):
the maps and losses `calibrate` gives those spans, bit for bit, from their sums alone."""

import numpy as np
import pyarrow as pa
import pytest
from pruneable import TOKENIZER, make
from tiny import SENTENCES

from jtc.model.cache import cache_model, load_cached
from jtc.pruning.calibrate import calibrate, calibrate_spans
from jtc.settings import CalibrationSettings

VARIANTS = [
    "drop",
    "mat",
    "replaceme",
    "low_rank",
    "rotation",
    "rotation_replaceme",
    "replaceme_cosine",
]


def corpus(count: int) -> pa.Table:
    return pa.table(
        {
            "sentence_id": np.arange(count),
            "text": [SENTENCES[i % len(SENTENCES)] for i in range(count)],
            "split": ["train"] * count,
            "order": np.arange(count),
            "source": ["test"] * count,
            "document": [f"doc-{i}" for i in range(count)],
        }
    )


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    folder = tmp_path_factory.mktemp("calibrate_spans")
    model, _ = make("llama")
    model.save_pretrained(folder / "src")
    TOKENIZER.save_pretrained(folder / "src")
    cache_model("llama", {"source": str(folder / "src")}, folder / "m")
    return load_cached(folder / "m")


def settings(variants) -> CalibrationSettings:
    return CalibrationSettings.defaults(
        lengths=[2],
        variants=variants,
        calibration_sentences=12,
        ridge=1e-3,
        cosine={"epochs": 2, "learning_rate": 1e-3, "batch_tokens": 32},
    )


def test_the_spans_get_calibrate_s_own_maps(cached):
    net, tokenizer, info = cached
    every = settings(VARIANTS)
    run = dict(corpus="c", batch_size=4, max_tokens=32)
    whole = calibrate(net, tokenizer, info, corpus(12), every, model="m", fingerprint="f", **run)

    fits, tokens = calibrate_spans(net, tokenizer, info, corpus(12), every, [(1, 2), (3, 2)], **run)

    assert tokens == whole.metadata["calibration_tokens"] > 0
    assert [(f.variant, f.start) for f in fits] == [(v, s) for v in VARIANTS for s in (1, 3)]
    same = {(f.variant, f.start, f.length): f for f in whole.fits}
    for fit in fits:
        want = same[fit.variant, fit.start, fit.length]
        assert (fit.solver, fit.loss, fit.cosine_distance) == (
            want.solver,
            want.loss,
            want.cosine_distance,
        )
        assert fit.tensors.keys() == want.tensors.keys()
        for part, tensor in fit.tensors.items():
            np.testing.assert_array_equal(tensor, want.tensors[part])
    assert {f.variant for f in fits if not f.tensors} == {"drop"}


def test_a_span_a_variant_has_not_is_refused(cached):
    """replaceme reads block i's feed-forward output: no span starts at the embeddings."""
    net, tokenizer, info = cached
    with pytest.raises(ValueError, match="replaceme has no span of start 0, length 2"):
        calibrate_spans(
            net, tokenizer, info, corpus(4), settings(["drop", "replaceme"]), [(0, 2)],
            corpus="c", batch_size=4, max_tokens=32,
        )  # fmt: skip
