"""Depth pruning's calibration text (jtc.pruning.windows) on a word-level tokenizer and a tiny
random Llama: windows of running text are the training documents joined in their seeded order
(each one's training sentences in source order), never a document of the held-out measures;
every token of every window is counted (but each window's first with skip_first_token); the
sentence mode reads what it read before, and sums the same; bad settings are refused naming the
key."""

import dataclasses

import numpy as np
import pyarrow as pa
import pytest
from pruneable import TOKENIZER, make
from tiny import SENTENCES

from jtc.data.corpus import select_split
from jtc.pruning.calibrate import calibration_inputs
from jtc.pruning.inputs import every_token
from jtc.pruning.spans import StatisticsPlan
from jtc.pruning.sums import span_statistics
from jtc.pruning.windows import (
    calibration_documents,
    calibration_problem,
    calibration_windows,
    held_out_sentences,
)
from jtc.settings import CalibrationSettings, CalibrationText

DOCUMENTS, PER_DOCUMENT = 12, 4


def corpus() -> pa.Table:
    """Documents of a few sentences each, splits and order drawn from a seed."""
    rng = np.random.default_rng(1)
    n = DOCUMENTS * PER_DOCUMENT
    return pa.table(
        {
            "sentence_id": np.arange(n),
            "text": [SENTENCES[(7 * i) % len(SENTENCES)] for i in range(n)],
            "split": [("train", "validation")[int(b)] for b in rng.random(n) < 0.3],
            "order": rng.permutation(n),
            "source": ["test"] * n,
            "document": [f"doc-{i // PER_DOCUMENT}" for i in range(n)],
        }
    )


def words(text: str) -> list[int]:
    return TOKENIZER(text, add_special_tokens=False).input_ids


def text(windows: int, window_tokens: int) -> CalibrationText:
    return CalibrationText(text="windows", windows=windows, window_tokens=window_tokens)


def test_windows_join_training_documents_in_seeded_order_without_held_out_ones():
    table, held_out = corpus(), 3
    got = calibration_windows(TOKENIZER, table, text(4, 10), held_out, "test")
    rows = table.to_pylist()
    validation = select_split(table, "validation", held_out, "test")
    left_out = set(validation.column("document").to_pylist())
    train = [r for r in rows if r["split"] == "train" and r["document"] not in left_out]
    rank = {}
    for r in train:
        rank[r["document"]] = min(rank.get(r["document"], len(rows)), r["order"])
    stream = []
    for document in sorted(rank, key=rank.__getitem__):  # the seeded order of documents
        mine = sorted(
            (r for r in train if r["document"] == document), key=lambda r: r["sentence_id"]
        )
        stream += words(" ".join(r["text"] for r in mine))  # no eos: a newline is no token
    assert got.windows.shape == (4, 10)
    assert got.windows.ravel().tolist() == stream[:40]
    assert not set(got.documents) & left_out
    assert list(got.documents) == sorted(rank, key=rank.__getitem__)[: len(got.documents)]


def test_the_held_out_sentences_are_the_runs_and_prompts_and_none_for_sentences():
    assert held_out_sentences("windows", 3, 24, 16) == 40
    assert held_out_sentences("windows", 30, 24, 16) == 46
    assert held_out_sentences("sentences", 3, 24, 16) is None


def test_no_held_out_document_is_a_calibration_document():
    table = corpus()
    for held_out in (1, 5, 9):
        used = calibration_documents(TOKENIZER, table, text(2, 8), 0, held_out, "test")
        validation = select_split(table, "validation", held_out, "test")
        assert used and not used & set(validation.column("document").to_pylist())
    sentences = CalibrationText.defaults(text="sentences")
    used = calibration_documents(TOKENIZER, table, sentences, 10, None, "test")
    assert used == set(select_split(table, "train", 10, "test").column("document").to_pylist())


def test_too_little_text_is_refused_saying_how_many_windows_fit():
    table = corpus()
    available = len(calibration_windows(TOKENIZER, table, text(1, 2), 3, "test").documents)
    assert available == 1
    with pytest.raises(ValueError, match="pruning.calibration.windows") as err:
        calibration_windows(TOKENIZER, table, text(10_000, 16), 3, "test")
    fit = int(str(err.value).split(": ")[2].split(" windows")[0])
    assert fit > 0 and "at most " + str(fit) in str(err.value)
    calibration_windows(TOKENIZER, table, text(fit, 16), 3, "test")  # that many fit


@pytest.mark.parametrize(
    ("windows", "window_tokens", "key"),
    [
        (0, 8, "pruning.calibration.windows"),
        (-2, 8, "pruning.calibration.windows"),
        (4, 1, "pruning.calibration.window_tokens"),
        (4, 65, "pruning.calibration.window_tokens"),
    ],
)
def test_bad_windows_are_refused_naming_the_key(windows, window_tokens, key):
    calibration = {"text": "windows", "windows": windows, "window_tokens": window_tokens}
    problem = calibration_problem("tiny", 64, calibration)
    assert problem and key in problem
    assert calibration_problem("tiny", 64, {**calibration, "text": "sentences"}) is None


def test_a_window_longer_than_the_model_is_refused_by_calibration():
    settings = CalibrationSettings.defaults(calibration=dataclasses.asdict(text(2, 65)))
    with pytest.raises(ValueError, match="window_tokens' is 65 tokens, more than model"):
        calibration_inputs(
            TOKENIZER, {"max_positions": 64}, corpus(), settings, 3, corpus="test", max_tokens=64
        )


@pytest.mark.parametrize("skip_first_token", [False, True])
def test_every_token_of_every_window_is_counted(skip_first_token):
    model, adapter = make("llama")
    settings = CalibrationSettings.defaults(calibration=dataclasses.asdict(text(3, 9)))
    inputs, size = calibration_inputs(
        TOKENIZER, {"max_positions": 64}, corpus(), settings, 3, corpus="test", max_tokens=64
    )
    assert size.startswith("3 windows × 9 tokens = 27 tokens, from ")
    plan = StatisticsPlan.of(5, [2], ["mat"])
    grams = span_statistics(model, adapter, inputs, plan, 2, 0, skip_first_token)
    assert grams.tokens == (3 * 8 if skip_first_token else 3 * 9)


def test_the_sentence_mode_reads_and_sums_what_it_did():
    model, adapter = make("llama")
    info = {"adapter": adapter.to_json(), "max_positions": 64}
    table = corpus()
    settings = CalibrationSettings.defaults(
        calibration={"text": "sentences"}, calibration_sentences=10
    )
    inputs, size = calibration_inputs(
        TOKENIZER, info, table, settings, None, corpus="test", max_tokens=64
    )
    before, _ = every_token(TOKENIZER, info, table, "train", 10, "test", 64)
    assert [x.tolist() for x in inputs] == [x.tolist() for x in before]
    assert size == f"10 sentences, {sum(len(x) for x in before):,} tokens"
    plan = StatisticsPlan.of(5, [2], ["mat", "replaceme"])
    got = span_statistics(model, adapter, inputs, plan, 3, 0)
    want = span_statistics(model, adapter, before, plan, 3, 0)
    for field in ("state_grams", "state_cross", "ffn_grams", "ffn_cross"):
        for key, value in getattr(want, field).items():
            assert np.array_equal(getattr(got, field)[key], value)
