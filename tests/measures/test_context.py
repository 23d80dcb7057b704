"""Perplexity at a real context (jtc.measures.context) on a tiny random Llama: held-out
documents share no document with calibration (its sentences, or its windows of running text),
windows are cut from the token stream without overlap, the full model against itself gives
ratio 1 and agreement 1, and drop's cross entropy on a window equals a direct computation; bad
settings are refused naming the key."""

import logging

import numpy as np
import pyarrow as pa
import pytest
import torch
from pruneable import TOKENIZER, make
from tiny import SENTENCES

from jtc.data.corpus import select_split
from jtc.measures.checks import context_problem, usable_contexts
from jtc.measures.context import (
    context_perplexity,
    cut_windows,
    held_out_documents,
    token_stream,
)
from jtc.pruning.pruned import pruned_copy
from jtc.pruning.windows import calibration_documents, calibration_windows
from jtc.settings import CalibrationText

SENTENCE_MODE = CalibrationText.defaults(text="sentences")
WINDOW_MODE = CalibrationText(text="windows", windows=2, window_tokens=10)


def corpus(documents: int = 12, per_document: int = 4) -> pa.Table:
    """A corpus table: documents of a few sentences, splits and order drawn from a seed."""
    rng = np.random.default_rng(0)
    n = documents * per_document
    return pa.table(
        {
            "sentence_id": np.arange(n),
            "text": [SENTENCES[i % len(SENTENCES)] for i in range(n)],
            "split": [("train", "validation")[int(b)] for b in rng.random(n) < 0.3],
            "order": rng.permutation(n),
            "source": ["test"] * n,
            "document": [f"doc-{i // per_document}" for i in range(n)],
        }
    )


def selection(*lengths) -> pa.Table:
    rows = [
        {
            "length": n,
            "selection": "measured",
            "variant": "drop",
            "start": 1,
            "removed": f"2-{1 + n}",
            "fraction_removed": n / 5,
        }
        for n in lengths
    ]
    return pa.Table.from_pylist(rows)


def test_held_out_documents_share_no_sentence_with_calibration():
    table = corpus()
    calibration = select_split(table, "train", 10, "test")
    used = calibration_documents(TOKENIZER, table, SENTENCE_MODE, 10, None, "test")
    held = held_out_documents(table, used)
    used = set(calibration.column("document").to_pylist())
    kept = [d for d in dict.fromkeys(table.column("document").to_pylist()) if d not in used]
    assert 0 < len(held) == len(kept)
    rows = table.to_pylist()
    for name, text in zip(kept, held, strict=True):
        mine = [r for r in rows if r["document"] == name]
        assert text == " ".join(r["text"] for r in sorted(mine, key=lambda r: r["sentence_id"]))
        assert not {r["sentence_id"] for r in mine} & set(
            calibration.column("sentence_id").to_pylist()
        )


def test_held_out_documents_share_none_with_the_calibration_windows():
    table = corpus()
    used = calibration_documents(TOKENIZER, table, WINDOW_MODE, 0, 2, "test")
    windows = calibration_windows(TOKENIZER, table, WINDOW_MODE, 2, "test")
    assert used == set(windows.documents) and used
    held = held_out_documents(table, used)
    texts = {}
    for r in sorted(table.to_pylist(), key=lambda r: r["sentence_id"]):
        texts.setdefault(r["document"], []).append(r["text"])
    kept = [" ".join(t) for d, t in texts.items() if d not in used]
    assert held == kept and len(held) == len(texts) - len(used)


def test_windows_do_not_overlap_and_stop_at_the_stream():
    stream = np.arange(23)
    windows = cut_windows(stream, 5, 10)
    assert windows.shape == (4, 5)
    assert (windows.ravel() == np.arange(20)).all()
    assert cut_windows(stream, 5, 2).shape == (2, 5)


def test_token_stream_separates_documents():
    stream = token_stream(TOKENIZER, SENTENCES[:2], 1000)
    first = TOKENIZER(SENTENCES[0], add_special_tokens=False).input_ids
    second = TOKENIZER(SENTENCES[1], add_special_tokens=False).input_ids
    assert len(stream) == len(first) + len(second)  # no eos, and a newline is no word token
    assert list(stream[: len(first)]) == first
    assert len(token_stream(TOKENIZER, SENTENCES, 7)) == 7


@pytest.mark.parametrize(
    ("contexts", "windows", "key"),
    [([8], 0, "pruning.context.windows"), ([9999], 4, "pruning.context.lengths")],
)
def test_bad_settings_are_refused_naming_the_key(contexts, windows, key):
    problem = context_problem(contexts, windows, 64, "tiny")
    assert problem and key in problem


def test_a_length_beyond_the_models_positions_is_left_out_for_that_model_alone(caplog):
    """One list serves every pruned model: 2,048 beside 8 on a 64-position model scores 8 only,
    and says so; a model of unknown positions keeps both."""
    assert context_problem([8, 2048], 3, 64, "tiny") is None
    assert usable_contexts([8, 2048], 64) == [8] and usable_contexts([8, 2048], None) == [8, 2048]
    model, adapter = make("llama")
    info = {"adapter": adapter.to_json(), "max_positions": 64}
    with caplog.at_level(logging.WARNING):
        got = context_perplexity(
            model, TOKENIZER, info, corpus(), selection(2), "unused.safetensors",
            contexts=[8, 2048], windows=2, rule="measured", variants=["drop"],
            calibration=SENTENCE_MODE, calibration_sentences=10, held_out=None, corpus="test",
            model_name="tiny", batch_size=2,
        ).to_pylist()  # fmt: skip
    assert {r["context"] for r in got} == {8} and len(got) == 4
    assert "pruning.context.lengths [2048] left out" in caplog.text


def test_full_against_itself_and_drop_against_a_direct_computation():
    model, adapter = make("llama")
    info = {"adapter": adapter.to_json(), "max_positions": 64}
    got = context_perplexity(
        model, TOKENIZER, info, corpus(), selection(2), "unused.safetensors",
        contexts=[8], windows=3, rule="measured", variants=["drop"],
        calibration=SENTENCE_MODE, calibration_sentences=10, held_out=None, corpus="test",
        model_name="tiny", batch_size=2,
    ).to_pylist()  # fmt: skip
    full = [r for r in got if r["variant"] == "full"]
    drop = [r for r in got if r["variant"] == "drop"]
    assert len(full) == len(drop) == 3
    for r in full:
        assert r["cross_entropy"] == pytest.approx(r["cross_entropy_full"])
        assert r["agreement"] == r["tokens"] == 7
    stream = token_stream(
        TOKENIZER,
        held_out_documents(
            corpus(), calibration_documents(TOKENIZER, corpus(), SENTENCE_MODE, 10, None, "test")
        ),
        24,
    )
    windows = torch.as_tensor(cut_windows(stream, 8, 3))
    pruned = pruned_copy(model, adapter, "drop", 1, 2, None)
    with torch.no_grad():
        logits = pruned(input_ids=windows).logits[:, :-1]
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1), reduction="none"
    ).reshape(3, 7)
    for w, r in enumerate(drop):
        assert r["window"] == w and r["removed"] == "2-3"
        assert r["cross_entropy"] == pytest.approx(float(loss[w].sum()), rel=1e-5)
        assert r["cross_entropy_full"] == pytest.approx(full[w]["cross_entropy"])


def test_planning_refuses_a_context_beyond_the_models_positions():
    from configs import BASE

    from jtc.pipeline.config import validate_config
    from jtc.pipeline.planning import measures_problem

    pruning = validate_config(BASE)["pruning"]
    assert measures_problem("tiny", 8192, pruning) is None
    short = {**pruning, "calibration": {**pruning["calibration"], "window_tokens": 128}}
    problem = measures_problem("tiny", 256, short)
    assert "pruning.context.lengths" in problem and "256 positions" in problem
    # and a calibration window beyond the model's positions, by its own key
    problem = measures_problem("tiny", 256, pruning)
    assert "pruning.calibration.window_tokens' is 512" in problem and "256 positions" in problem
