"""Depth pruning's calibration, what calibrate_pruning computes: one pass over every token of the
calibration text (windows of running text or sentences, jtc.pruning.windows) sums what every
span needs (jtc.pruning.sums), every variant's map for every span is fitted from those sums
and each selection rule chooses a span per length (jtc.pruning.fits)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
from torch import nn

from jtc.data.extract import pad_token_id
from jtc.model.adapters import adapter_of
from jtc.pruning import compensation, cosine, fits
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
from jtc.pruning.windows import (
    SENTENCES_KEY,
    WINDOWS_KEY,
    calibration_problem,
    calibration_windows,
    size_label,
)
from jtc.settings import CalibrationSettings
from jtc.shortcuts.methods import default_rank

log = logging.getLogger(__name__)
CALIBRATION_KEY = SENTENCES_KEY
# the modules the variants' fits live in (jtc.pruning.variants names each fit "module:function");
# imported here, so that the code tracker (jtc.pipeline.tracking) counts them as the calibration's
FIT_MODULES = {m.__name__: m for m in (fits, cosine, compensation)}


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


def calibration_inputs(
    tokenizer,
    info: dict,
    sentences: pa.Table,
    settings: CalibrationSettings,
    held_out: int | None,
    *,
    corpus: str,
    max_tokens: int,
) -> tuple[list, str]:
    """(inputs, size): the token ids calibration reads, every token of each, and their size in
    words: the windows of running text (held_out: jtc.pruning.windows.held_out_sentences), or
    the first calibration_sentences training sentences (each truncated to max_tokens)."""
    text = settings.calibration
    if text.text == "sentences":
        count = settings.calibration_sentences
        inputs, _ = every_token(
            tokenizer, info, sentences, "train", count, corpus, max_tokens, CALIBRATION_KEY
        )
        tokens = sum(len(x) for x in inputs)
        return inputs, f"{count} sentences, {tokens:,} tokens"
    problem = calibration_problem(
        info.get("name", "the model"), info.get("max_positions"), dataclasses.asdict(text)
    )
    if problem:
        raise ValueError(problem)
    if held_out is None:
        raise ValueError(f"{WINDOWS_KEY}: the held-out sentences' count is needed (held_out)")
    windows = calibration_windows(tokenizer, sentences, text, held_out, corpus)
    size = size_label(text.windows, text.window_tokens)
    return list(windows.windows), f"{size}, from {len(windows.documents)} documents"


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
    held_out: int | None = None,
) -> Calibration:
    """Calibrate the model `net` (named `model`, its cached weights' `fingerprint`:
    jtc.model.manifest.model_fingerprint) on every token of the calibration text of the corpus
    table `sentences` (calibration_inputs; `held_out`: the validation sentences whose documents
    the windows leave out, jtc.pruning.windows.held_out_sentences). The maps file's metadata
    names the model and its fingerprint, so that the export refuses the maps of another
    model."""
    adapter = adapter_of(info)
    num_layers, width = info["num_layers"], info["hidden_size"]
    lengths = resolved_lengths(settings.lengths, num_layers)
    problem = pruning_problem(model, adapter.task, adapter, num_layers, lengths, settings.variants)
    if problem:
        raise ValueError(problem)
    sentences_mode = settings.calibration.text == "sentences"
    count = settings.calibration_sentences if sentences_mode else None
    inputs, size = calibration_inputs(
        tokenizer, info, sentences, settings, held_out, corpus=corpus, max_tokens=max_tokens
    )
    log.info("calibration text of %s on %s: %s", model, corpus, size)
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
    todo = {v: spans(num_layers, lengths, v) for v in settings.variants}
    fits = fit_spans(net, adapter, inputs, grams, settings, todo, rank, batch_size, tokenizer)
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
            "calibration_text": size,
            "rank": rank,
            "ridge": settings.ridge,
            "skip_first_token": settings.skip_first_token,
        },
        calibration=calibration_table(grams, fits, settings.ridge, width),
        selection=selection_table(chosen, num_layers, grams.tokens, width),
    )


def fit_spans(
    net: nn.Module,
    adapter,
    inputs: list,
    grams: SpanGrams,
    settings: CalibrationSettings,
    todo: dict[str, list[tuple[int, int]]],
    rank: int,
    batch_size: int,
    tokenizer,
) -> list[SpanFit]:
    """Every variant's fits of its spans `todo[variant]` (start, length), in settings.variants'
    order: each by its record's fit (jtc.pruning.variants), from the sums `grams`, or for a
    variant fitted on the token rows with one more pass over the calibration inputs."""
    fitted = {
        v: [fit_span(grams, v, start, n, rank, settings.ridge) for start, n in todo[v]]
        for v in settings.variants
        if variant_of(v).fitted_on == "sums"
    }
    pad = pad_token_id(tokenizer)
    for v in settings.variants:  # fitted on the token rows: one more pass each
        if variant_of(v).fitted_on == "rows":
            fitted[v] = fit_function(v)(
                net, adapter, inputs, grams, todo[v], settings, batch_size, pad
            )
    return [fit for v in settings.variants for fit in fitted[v]]


def underdetermined_message(
    model: str, corpus: str, variants: list[str], tokens: int, width: int, sentences: int | None
) -> str:
    """The warning for depth pruning's maps fitted on fewer calibration tokens than the width
    (`sentences`: the calibration sentences, None for windows of running text)."""
    if sentences is None:
        fix = (
            f"raise {WINDOWS_KEY} or window_tokens to well above {width} tokens in all "
            "(windows x window_tokens)"
        )
    else:
        per_sentence = max(tokens / max(sentences, 1), 1.0)
        fix = (
            f"raise pruning.calibration_sentences from {sentences} to well above {width} tokens "
            f"(at least about {int(width / per_sentence) + 1} sentences of this corpus)"
        )
    return (
        f"{model} on {corpus}: depth pruning's {', '.join(variants)} maps were fitted on "
        f"{tokens} calibration tokens, fewer than the width {width}: underdetermined, each "
        "reproduces the calibration tokens, so its calibration_loss is 0 up to rounding for "
        "every span and the `measured` rule cannot tell the spans apart (its ties are broken by "
        f"the angular distance), and the maps themselves are fitted to noise; {fix}"
    )


def calibration_warnings(
    model: str,
    corpus: str,
    tokens: int,
    width: int,
    sentences: int | None,
    chosen: list[Selected],
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


def calibrate_spans(
    net: nn.Module,
    tokenizer,
    info: dict,
    sentences: pa.Table,
    settings: CalibrationSettings,
    chosen: list[tuple[int, int]],
    *,
    corpus: str,
    batch_size: int,
    max_tokens: int,
    held_out: int | None = None,
) -> tuple[list[SpanFit], int]:
    """(fits, calibration tokens): what `calibrate` fits for the spans `chosen` (start, length)
    alone, every variant of `settings` for each span (the same maps and losses, bit for bit),
    from those spans' sums only: no other span, no selection, no tables. For studying a span's
    stand-ins at other settings without calibrating every span; settings.lengths is not read.
    A ValueError names a variant that has not one of the spans (jtc.pruning.spans.spans)."""
    adapter = adapter_of(info)
    num_layers = info["num_layers"]
    lengths = sorted({n for _, n in chosen})
    name = info.get("name", "the model")
    problem = pruning_problem(name, adapter.task, adapter, num_layers, lengths, settings.variants)
    if problem:
        raise ValueError(problem)
    wanted = set(chosen)
    for variant in settings.variants:
        missing = wanted - set(spans(num_layers, lengths, variant))
        if missing:
            i, n = min(missing)
            raise ValueError(f"{variant} has no span of start {i}, length {n} of {num_layers}")
    inputs, _ = calibration_inputs(
        tokenizer, info, sentences, settings, held_out, corpus=corpus, max_tokens=max_tokens
    )
    every = StatisticsPlan.of(num_layers, lengths, settings.variants)
    pairs, starts = {(i, i + n) for i, n in wanted}, {i for i, _ in wanted}
    layers = {layer for pair in pairs for layer in pair}
    plan = StatisticsPlan(
        pairs=tuple(p for p in every.pairs if p in pairs),
        state_sources=tuple(i for i in every.state_sources if i in starts),
        state_pairs=tuple(p for p in every.state_pairs if p in pairs),
        ffn_blocks=tuple(i for i in every.ffn_blocks if i in starts),
        ffn_pairs=tuple(p for p in every.ffn_pairs if p in pairs),
        magnitude_states=tuple(s for s in every.magnitude_states if s in layers),
        hadamard_states=tuple(s for s in every.hadamard_states if s in layers),
    )
    pad = pad_token_id(tokenizer)
    grams = span_statistics(net, adapter, inputs, plan, batch_size, pad, settings.skip_first_token)
    rank = settings.rank or default_rank(info["hidden_size"])
    todo = {v: [s for s in spans(num_layers, lengths, v) if s in wanted] for v in settings.variants}
    fits = fit_spans(net, adapter, inputs, grams, settings, todo, rank, batch_size, tokenizer)
    return fits, grams.tokens
