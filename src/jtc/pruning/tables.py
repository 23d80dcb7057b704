"""The tables of depth pruning: each run's scores (summed per sentence by jtc.pruning.runs) as
token-weighted means with paired bootstrap intervals over sentences: the sweep's, on the
evaluation sentences, beside the calibration statistics of its span (one row per variant,
length and start), and the chosen spans', on the selected sentences (one row per length, rule
and variant)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from jtc.evaluation.intervals import ratio_intervals
from jtc.files.io import rows_table
from jtc.pruning.fits import Selected, SpanFit, SpanGrams, underdetermined_fit
from jtc.pruning.spans import removed_label
from jtc.settings import IntervalSettings

# the calibration statistics of every span (jtc.pruning.calibrate)
CALIBRATION_COLUMNS = {
    "variant": pa.string(),
    "start": pa.int64(),
    "length": pa.int64(),
    "removed": pa.string(),
    "fraction_removed": pa.float64(),  # length / L
    "angular_distance": pa.float64(),  # UIDL: mean arccos(cos(h_i, h_{i+n}))/π, every token
    "block_influence": pa.float64(),  # ShortGPT: Block Influence summed over the span
    "calibration_loss": pa.float64(),  # ||ĥ_{i+n} - h_{i+n}||² / ||h_{i+n}||², the variant's
    "solver": pa.string(),  # cholesky, pinv (fewer calibration tokens than the width), none
    "ridge": pa.float64(),  # the relative ridge α of the closed-form fits (config pruning.ridge)
    "calibration_tokens": pa.int64(),
    # a fitted map (mat, low_rank, replaceme) on fewer calibration tokens than the width:
    # it reproduces them, its calibration_loss is 0 up to rounding and says nothing of the span
    "underdetermined": pa.bool_(),
    # replaceme_cosine's objective, mean 1 - cos(ĥ_{i+n}, h_{i+n}) (null: not measured)
    "cosine_distance": pa.float64(),
}
# the choice's own calibration: tokens, underdetermined (as above), and the spans whose
# statistic tied with the chosen one's (within jtc.pruning.fits.TIE): how many (1: no tie) and
# their removed blocks, space-separated ("" without a tie); a tie is broken by the smallest
# angular distance, then the earliest start
_CHOICE = {
    "calibration_tokens": pa.int64(),
    "underdetermined": pa.bool_(),
    "tied": pa.int64(),
    "tied_removed": pa.string(),
}
SELECTION_COLUMNS = {
    "length": pa.int64(),
    "selection": pa.string(),
    "variant": pa.string(),
    "start": pa.int64(),  # -1: the removed blocks are not consecutive
    "removed": pa.string(),
    "fraction_removed": pa.float64(),
    **_CHOICE,
}
# each metric: a token-weighted mean, and its interval
METRICS = ("cross_entropy", "cross_entropy_full", "perplexity_ratio", "top1_agreement", "kl")
_SCORES = {
    "sentences": pa.int64(),
    "tokens": pa.int64(),
    "overflowed": pa.int64(),  # positions whose logits were not finite, left out
    **{f"{m}{end}": pa.float64() for m in METRICS for end in ("", "_low", "_high")},
}
SPAN_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "variant": pa.string(),
    "length": pa.int64(),
    "start": pa.int64(),
    "removed": pa.string(),
    "fraction_removed": pa.float64(),
    **_SCORES,
    "angular_distance": pa.float64(),
    "block_influence": pa.float64(),
    "calibration_loss": pa.float64(),
    "calibration_tokens": pa.int64(),
    "underdetermined": pa.bool_(),
}
SELECTED_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "length": pa.int64(),
    "fraction_removed": pa.float64(),
    "selection": pa.string(),
    "variant": pa.string(),
    "start": pa.int64(),
    "removed": pa.string(),
    **_SCORES,
    **_CHOICE,
}


def calibration_table(
    grams: SpanGrams, fits: list[SpanFit], ridge: float = 0.0, width: int | None = None
) -> pa.Table:
    """CALIBRATION_COLUMNS of every fitted span, from the calibration sums (`ridge`: the
    relative ridge the fits were solved with; `width`: the model's hidden size, None: unknown,
    underdetermined null)."""
    influence = grams.block_influence()
    rows = [
        {
            "variant": fit.variant,
            "start": fit.start,
            "length": fit.length,
            "removed": removed_label(range(fit.start + 1, fit.start + fit.length + 1)),
            "fraction_removed": fit.length / grams.num_layers,
            "angular_distance": grams.angular_distance(fit.start, fit.length),
            "block_influence": float(influence[fit.start : fit.start + fit.length].sum()),
            "calibration_loss": fit.loss,
            "solver": fit.solver,
            "ridge": ridge,
            "calibration_tokens": grams.tokens,
            "underdetermined": None
            if width is None
            else underdetermined_fit(fit.variant, grams.tokens, width),
            "cosine_distance": fit.cosine_distance,
        }
        for fit in fits
    ]
    return rows_table(rows, CALIBRATION_COLUMNS)


def selection_table(
    chosen: list[Selected], num_layers: int, tokens: int | None = None, width: int | None = None
) -> pa.Table:
    """SELECTION_COLUMNS of the spans the selection rules chose (`tokens`: the calibration
    tokens, `width`: the model's hidden size; None: unknown)."""
    rows = [
        {
            "length": s.length,
            "selection": s.selection,
            "variant": s.variant,
            "start": s.start,
            "removed": removed_label(s.removed),
            "fraction_removed": s.length / num_layers,
            "calibration_tokens": tokens,
            "underdetermined": None
            if tokens is None or width is None
            else underdetermined_fit(s.variant, tokens, width),
            "tied": max(1, len(s.tied)),
            "tied_removed": " ".join(removed_label(range(t + 1, t + s.length + 1)) for t in s.tied),
        }
        for s in chosen
    ]
    return rows_table(rows, SELECTION_COLUMNS)


_SUMS = ("tokens", "cross_entropy", "cross_entropy_full", "kl", "agreement")


def _means(sums: np.ndarray) -> np.ndarray:
    """The metrics (METRICS order) from summed (tokens, ce, ce_full, kl, agreement), (..., 5)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        tokens = sums[..., 0]
        ce, ce_full = sums[..., 1] / tokens, sums[..., 2] / tokens
        return np.stack(
            [ce, ce_full, np.exp(ce - ce_full), sums[..., 4] / tokens, sums[..., 3] / tokens], -1
        )


def run_scores(
    runs: pa.Table, settings: IntervalSettings, seed: int
) -> dict[tuple[str, str], dict[str, float | int]]:
    """{(variant, removed): scores} of every run: the token-weighted means of METRICS and their
    intervals, from the same bootstrap resamples of the sentences for every run (paired)."""
    variants = runs.column("variant").to_pylist()
    removed = runs.column("removed").to_pylist()
    run_of_row = list(zip(variants, removed, strict=True))
    keys = list(dict.fromkeys(run_of_row))
    sentence_of_row = runs.column("sentence_id").to_pylist()
    sentences = list(dict.fromkeys(sentence_of_row))
    index = {s: k for k, s in enumerate(sentences)}
    sums = np.zeros((len(keys), len(sentences), len(_SUMS)))
    overflowed = np.zeros(len(keys), dtype=np.int64)
    where = {key: k for k, key in enumerate(keys)}
    rows = [where[key] for key in run_of_row]
    columns = np.stack([runs.column(c).to_numpy().astype(np.float64) for c in _SUMS], 1)
    order = [index[s] for s in sentence_of_row]
    np.add.at(sums, (rows, order), columns)
    np.add.at(overflowed, rows, runs.column("overflowed").to_numpy())
    mean, low, high = ratio_intervals(  # (runs, metrics) each
        sums, _means, settings.bootstrap, seed, settings.confidence_level
    )
    out = {}
    for k, key in enumerate(keys):
        scores: dict[str, float | int] = {
            "sentences": len(sentences),
            "tokens": int(sums[k, :, 0].sum()),
            "overflowed": int(overflowed[k]),
        }
        for m, name in enumerate(METRICS):
            scores |= {name: mean[k, m], f"{name}_low": low[k, m], f"{name}_high": high[k, m]}
        out[key] = scores
    return out


def _with_scores(
    spans: list[dict],
    scores: dict[tuple[str, str], dict[str, float | int]],
    model: str,
    corpus: str,
) -> list[dict]:
    """Each span (a row naming its variant and the blocks removed) with the model, the corpus
    and its evaluation run's scores."""
    rows = []
    for span in spans:
        run = scores.get((span["variant"], span["removed"]))
        if run is None:
            raise ValueError(
                f"no evaluation run of {span['variant']} with blocks {span['removed']} removed"
            )
        rows.append({"model": model, "corpus": corpus, **span, **run})
    return rows


def span_table(
    scores: dict[tuple[str, str], dict[str, float | int]],
    calibration: pa.Table,
    *,
    model: str,
    corpus: str,
) -> pa.Table:
    """One row per (variant, length, start) of the calibration table, with its run's scores."""
    rows = _with_scores(calibration.to_pylist(), scores, model, corpus)
    rows.sort(key=lambda r: (r["variant"], r["length"], r["start"]))
    return rows_table(rows, SPAN_COLUMNS)


def selected_table(
    scores: dict[tuple[str, str], dict[str, float | int]],
    selection: pa.Table,
    *,
    model: str,
    corpus: str,
) -> pa.Table:
    """One row per (length, selection rule, variant): the span the rule chose on calibration
    sentences and its scores (`scores`: run_scores of the selected runs, on the selected
    sentences)."""
    return rows_table(_with_scores(selection.to_pylist(), scores, model, corpus), SELECTED_COLUMNS)
