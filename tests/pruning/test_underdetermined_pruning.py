"""Depth pruning on fewer calibration tokens than the width (a tiny random model): the fitted
maps reproduce the calibration tokens, so `measured` ties across every span; the tie is
recorded and broken by the angular distance (not the earliest start), the tables and the
calibration's log say underdetermined, and a well-determined calibration has no tie."""

import dataclasses

import numpy as np
import pytest
from tiny import SENTENCES, make_model

from jtc.model.adapters import get_adapter
from jtc.pruning.calibrate import calibration_warnings, fit_span
from jtc.pruning.fits import TIE, select_spans
from jtc.pruning.spans import StatisticsPlan, exported_caveat, exported_span, spans
from jtc.pruning.sums import span_statistics
from jtc.pruning.tables import calibration_table, selection_table
from jtc.settings import ExportSettings

LAYERS = 5
WIDTH = 32
VARIANTS = ["drop", "mat", "replaceme"]


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = make_model("gpt2", layers=LAYERS, width=WIDTH)
    return model, tokenizer, get_adapter("gpt2")


def calibrated(tiny, sentences):
    model, tokenizer, adapter = tiny
    inputs = [np.asarray(tokenizer(s)["input_ids"], dtype=np.int64) for s in sentences]
    plan = StatisticsPlan.of(LAYERS, [2], VARIANTS)
    grams = span_statistics(model, adapter, inputs, plan, batch_size=4, pad_id=0)
    fits = [fit_span(grams, v, i, n, 2) for v in VARIANTS for i, n in spans(LAYERS, [2], v)]
    return grams, fits, select_spans(grams, fits, [2], VARIANTS)


def test_underdetermined_measured_ties_are_recorded_and_broken_by_the_angle(tiny):
    grams, fits, chosen = calibrated(tiny, SENTENCES[:2])
    assert grams.tokens < WIDTH
    mat = {f.start: f.loss for f in fits if f.variant == "mat"}
    assert max(mat.values()) < TIE  # every span's map reproduces the tokens
    by = {(s.selection, s.variant): s for s in chosen}
    measured = by["measured", "mat"]
    assert sorted(measured.tied) == sorted(mat)  # every start ties
    angles = {i: grams.angular_distance(i, 2) for i in mat}
    assert measured.start == min(angles, key=angles.get)  # not the earliest start
    assert measured.start == by["angular_distance", "mat"].start
    assert by["angular_distance", "drop"].tied == ()  # a real statistic: no tie

    table = calibration_table(grams, fits, 0.0, WIDTH).to_pylist()
    assert {r["variant"] for r in table if r["underdetermined"]} == {"mat", "replaceme"}
    assert all(r["calibration_tokens"] == grams.tokens for r in table)
    selection = {
        (r["selection"], r["variant"]): r
        for r in selection_table(chosen, LAYERS, grams.tokens, WIDTH).to_pylist()
    }
    row = selection["measured", "mat"]
    assert row["underdetermined"] and row["tied"] == len(mat)
    assert row["tied_removed"].split() == [f"{i + 1}-{i + 2}" for i in sorted(mat)]
    assert selection["angular_distance", "drop"]["tied"] == 1
    assert selection["angular_distance", "drop"]["tied_removed"] == ""
    assert not selection["angular_distance", "drop"]["underdetermined"]

    lines = calibration_warnings("tiny", "news", grams.tokens, WIDTH, 2, chosen)
    assert f"{grams.tokens} calibration tokens, fewer than the width {WIDTH}" in lines[0]
    assert "raise pruning.calibration_sentences from 2" in lines[0]
    windows = calibration_warnings("tiny", "news", grams.tokens, WIDTH, None, chosen)[0]
    assert "raise pruning.calibration.windows or window_tokens to well above" in windows
    assert any("measured ties for mat at length 2" in line for line in lines[1:])


def test_enough_calibration_tokens_have_no_tie_and_no_warning(tiny):
    grams, _, chosen = calibrated(tiny, SENTENCES * 3)
    assert grams.tokens > WIDTH
    assert all(s.tied == () for s in chosen if s.selection == "measured")
    assert calibration_warnings("tiny", "news", grams.tokens, WIDTH, 30, chosen) == []


def test_exporting_an_underdetermined_tied_span_says_so(tiny):
    grams, _, chosen = calibrated(tiny, SENTENCES[:2])
    rows = selection_table(chosen, LAYERS, grams.tokens, WIDTH).to_pylist()
    settings = ExportSettings.defaults(
        export_length=2, export_selection="measured", export_variant="replaceme"
    )
    start, n = exported_span(rows, LAYERS, settings, "tiny")
    caveat = exported_caveat(rows, start, n, settings)
    assert f"blocks {start + 1}-{start + 2}" in caveat
    assert f"fitted on {grams.tokens} calibration tokens, fewer than the width" in caveat
    assert "measured tied across" in caveat
    drop = ExportSettings.defaults(export_length=2, export_variant="drop")
    start, n = exported_span(rows, LAYERS, drop, "tiny")
    assert exported_caveat(rows, start, n, drop) is None


def test_an_underdetermined_variant_is_never_selected_on_its_loss(tiny):
    # losses left apart by rounding beyond TIE still say nothing of the spans: all tie
    grams, fits, _ = calibrated(tiny, SENTENCES[:2])
    assert grams.tokens < grams.width == WIDTH
    apart = [dataclasses.replace(f, loss=f.start * 1e-3) if f.variant == "mat" else f for f in fits]
    chosen = {(s.selection, s.variant): s for s in select_spans(grams, apart, [2], VARIANTS)}
    starts = sorted(f.start for f in apart if f.variant == "mat")
    assert sorted(chosen["measured", "mat"].tied) == starts
    assert chosen["measured", "mat"].start == chosen["angular_distance", "mat"].start
