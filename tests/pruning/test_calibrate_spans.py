"""A few spans' calibration (jtc.pruning.calibrate.calibrate_spans, the studies' entry point):
the maps and losses `calibrate` gives those spans, bit for bit, from their sums alone."""

import numpy as np
import pytest
from pruneable import TOKENIZER, make
from tiny import write_sentences

from jtc.data.corpus import sentence_table
from jtc.model.cache import cache_model, load_cached
from jtc.pruning.calibrate import calibrate, calibrate_spans
from jtc.pruning.variants import VARIANTS
from jtc.settings import CalibrationSettings


@pytest.fixture(scope="module")
def sentences(tmp_path_factory):
    """A corpus table of 40 random training sentences (jtc.data.corpus.sentence_table)."""
    lines = write_sentences(tmp_path_factory.mktemp("text") / "text.txt", 40).read_text()
    pairs = [(text, f"doc-{k}") for k, text in enumerate(lines.splitlines())]
    return sentence_table(pairs, "c", seed=0, validation_fraction=0.0)


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
        calibration={"text": "sentences"},
        calibration_sentences=12,
        ridge=1e-3,
        cosine={"epochs": 2, "learning_rate": 1e-3, "batch_tokens": 32},
    )


def test_the_spans_get_calibrate_s_own_maps(cached, sentences):
    net, tokenizer, info = cached
    every = settings(list(VARIANTS))
    run = dict(corpus="c", batch_size=4, max_tokens=32)
    whole = calibrate(net, tokenizer, info, sentences, every, model="m", fingerprint="f", **run)

    fits, tokens = calibrate_spans(net, tokenizer, info, sentences, every, [(1, 2), (3, 2)], **run)

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


def test_a_span_a_variant_has_not_is_refused(cached, sentences):
    """replaceme reads block i's feed-forward output: no span starts at the embeddings."""
    net, tokenizer, info = cached
    with pytest.raises(ValueError, match="replaceme has no span of start 0, length 2"):
        calibrate_spans(
            net, tokenizer, info, sentences, settings(["drop", "replaceme"]), [(0, 2)],
            corpus="c", batch_size=4, max_tokens=32,
        )  # fmt: skip
