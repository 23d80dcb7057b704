"""Depth pruning's calibration, what calibrate_pruning computes: one pass over every token of the
calibration sentences sums what every span needs (jtc.pruning.sums), every variant's map for
every span is fitted from those sums and each selection rule chooses a span per length
(jtc.pruning.fits)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
from torch import nn

from jtc.data.extract import pad_token_id
from jtc.model.adapters import adapter_of
from jtc.pruning import cosine, fits
from jtc.pruning.fits import TIE, Selected, SpanFit, SpanGrams, select_spans, underdetermined_fit
from jtc.pruning.inputs import every_token
from jtc.pruning.map_file import MODEL_FINGERPRINT
from jtc.pruning.spans import (
    StatisticsPlan,
    pruning_problem,
    removed_label,
    resolved_lengths,
    spans,
)
from jtc.pruning.sums import span_statistics
from jtc.pruning.tables import calibration_table, selection_table
from jtc.pruning.variants import variant_of, with_map
from jtc.settings import CalibrationSettings
from jtc.shortcuts.methods import default_rank

log = logging.getLogger(__name__)
CALIBRATION_KEY = "pruning.calibration_sentences"
# the modules the variants' fits live in (jtc.pruning.variants names each fit "module:function");
# imported here, so that the code tracker (jtc.runs.tracking) counts them as the calibration's
FIT_MODULES = {m.__name__: m for m in (fits, cosine)}


def fit_function(variant: str) -> Callable:
    """The fit of `variant` (its record's `fit`)."""
    module, name = variant_of(variant).fit.split(":")
    return getattr(FIT_MODULES[module], name)


def fit_span(
    grams: SpanGrams, variant: str, start: int, length: int, rank: int, ridge: float = 0.0
) -> SpanFit:
    """A variant's map for one span from the calibration sums (`rank`: low_rank's; `ridge`: the
    relative ridge α of the closed-form fits, 0 for least squares): its record's fit."""
    record = variant_of(variant)
    if record.fitted_on != "sums":
        raise ValueError(f"{variant} is fitted on the calibration tokens' rows, not on sums")
    if start < record.first_start:
        raise ValueError(f"{variant} needs start >= 1: block 0 (the embeddings) has no MLP")
    return fit_function(variant)(grams, start, length, rank, ridge)


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
    inputs, _ = every_token(
        tokenizer, info, sentences, "train", count, corpus, max_tokens, CALIBRATION_KEY
    )
    plan = StatisticsPlan.of(num_layers, lengths, settings.variants)
    log.info(
        "calibration sums: %d d × d float64 matrices, %.2f GB",
        plan.matrices(),
        plan.matrices() * width * width * 8 / 1e9,
    )
    grams = span_statistics(
        net,
        adapter,
        inputs,
        plan,
        batch_size,
        pad_token_id(tokenizer),
        skip_first_token=settings.skip_first_token,
    )
    rank = settings.rank or default_rank(width)
    records = [variant_of(v) for v in settings.variants]
    fitted = {
        v.name: [
            fit_span(grams, v.name, start, n, rank, settings.ridge)
            for start, n in spans(num_layers, lengths, v.name)
        ]
        for v in records
        if v.fitted_on == "sums"
    }
    for v in records:  # fitted on the token rows: one more pass each (jtc.pruning.cosine)
        if v.fitted_on == "rows":
            todo, pad = spans(num_layers, lengths, v.name), pad_token_id(tokenizer)
            fitted[v.name] = fit_function(v.name)(
                net, adapter, inputs, grams, todo, settings, batch_size, pad
            )
    fits = [fit for variant in settings.variants for fit in fitted[variant]]
    chosen = select_spans(grams, fits, lengths, settings.variants)
    for line in calibration_warnings(model, corpus, grams.tokens, width, count, chosen):
        log.warning("%s", line)
    return Calibration(
        fits=fits,
        metadata={
            "model": model,
            MODEL_FINGERPRINT: fingerprint,
            "corpus": corpus,
            "calibration_tokens": grams.tokens,
            "rank": rank,
            "ridge": settings.ridge,
            "skip_first_token": settings.skip_first_token,
        },
        calibration=calibration_table(grams, fits, settings.ridge, width),
        selection=selection_table(chosen, num_layers, grams.tokens, width),
    )


def underdetermined_message(
    model: str, corpus: str, variants: list[str], tokens: int, width: int, sentences: int
) -> str:
    """The warning for depth pruning's maps fitted on fewer calibration tokens than the width."""
    per_sentence = max(tokens / max(sentences, 1), 1.0)
    return (
        f"{model} on {corpus}: depth pruning's {', '.join(variants)} maps were fitted on "
        f"{tokens} calibration tokens, fewer than the width {width}: underdetermined, each "
        "reproduces the calibration tokens, so its calibration_loss is 0 up to rounding for "
        "every span and the `measured` rule cannot tell the spans apart (its ties are broken by "
        "the angular distance), and the maps themselves are fitted to noise; raise "
        f"pruning.calibration_sentences from {sentences} to well above {width} tokens (at "
        f"least about {int(width / per_sentence) + 1} sentences of this corpus)"
    )


def calibration_warnings(
    model: str, corpus: str, tokens: int, width: int, sentences: int, chosen: list[Selected]
) -> list[str]:
    """The calibration's warnings: maps fitted on fewer tokens than the width (one line), and
    every choice a tie decided (one line each, naming the tied spans)."""
    lines = []
    fitted = with_map(dict.fromkeys(s.variant for s in chosen))
    if fitted and underdetermined_fit(fitted[0], tokens, width):
        lines.append(underdetermined_message(model, corpus, fitted, tokens, width, sentences))
    for s in chosen:
        if s.tied:
            spans = ", ".join(removed_label(range(t + 1, t + s.length + 1)) for t in s.tied)
            lines.append(
                f"{model} on {corpus}: {s.selection} ties for {s.variant} at length {s.length}: "
                f"{len(s.tied)} spans within {TIE:g} of the best (blocks {spans}); chose blocks "
                f"{removed_label(s.removed)}, the smallest angular distance of them "
                "(pruning_selected.csv: tied, tied_removed)"
            )
    return lines
