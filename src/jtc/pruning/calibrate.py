"""Depth pruning's calibration, what calibrate_pruning computes: one pass over every token of the
calibration sentences sums what every span needs (jtc.pruning.sums), every variant's map for
every span is fitted from those sums and each selection rule chooses a span per length
(jtc.pruning.fits)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pyarrow as pa
from torch import nn

from jtc.data.extract import pad_token_id
from jtc.model.adapters import adapter_of
from jtc.pruning.fits import SpanFit, fit_span, select_spans
from jtc.pruning.inputs import every_token
from jtc.pruning.map_file import MODEL_FINGERPRINT
from jtc.pruning.spans import StatisticsPlan, pruning_problem, resolved_lengths, spans
from jtc.pruning.sums import span_statistics
from jtc.pruning.tables import calibration_table, selection_table
from jtc.settings import CalibrationSettings
from jtc.shortcuts.methods import default_rank

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Calibration:
    """What calibration gives: every span's fit (its map, for the maps file, with `metadata`),
    the calibration table (every span's statistics) and the selection table (the span each
    rule chose for each length and variant)."""

    fits: list[SpanFit]
    metadata: dict[str, object]
    calibration: pa.Table
    selection: pa.Table


def calibrate(
    net: nn.Module,
    tokenizer,
    info: dict,
    sentences: pa.Table,
    settings: CalibrationSettings,
    *,
    model: str,
    corpus: str,
    batch_size: int,
    max_tokens: int,
    fingerprint: str,
) -> Calibration:
    """Calibrate the model `net` (named `model`, its cached weights' `fingerprint`:
    jtc.model.manifest.model_fingerprint) on every token of the first `calibration_sentences`
    training sentences of the corpus table `sentences`. The maps file's metadata names the
    model and its fingerprint, so that the export refuses the maps of another model."""
    adapter = adapter_of(info)
    num_layers, width = info["num_layers"], info["hidden_size"]
    lengths = resolved_lengths(settings.lengths, num_layers)
    problem = pruning_problem(model, adapter.task, adapter, num_layers, lengths, settings.variants)
    if problem:
        raise ValueError(problem)
    count = settings.calibration_sentences
    inputs, _ = every_token(tokenizer, info, sentences, "train", count, corpus, max_tokens)
    plan = StatisticsPlan.of(num_layers, lengths, settings.variants)
    log.info(
        "calibration sums: %d d × d float64 matrices, %.2f GB",
        plan.matrices(),
        plan.matrices() * width * width * 8 / 1e9,
    )
    grams = span_statistics(net, adapter, inputs, plan, batch_size, pad_token_id(tokenizer))
    rank = settings.rank or default_rank(width)
    fits = [
        fit_span(grams, variant, start, n, rank, settings.ridge)
        for variant in settings.variants
        for start, n in spans(num_layers, lengths, variant)
    ]
    chosen = select_spans(grams, fits, lengths, settings.variants)
    return Calibration(
        fits=fits,
        metadata={
            "model": model,
            MODEL_FINGERPRINT: fingerprint,
            "corpus": corpus,
            "calibration_tokens": grams.tokens,
            "rank": rank,
            "ridge": settings.ridge,
        },
        calibration=calibration_table(grams, fits, settings.ridge),
        selection=selection_table(chosen, num_layers),
    )
