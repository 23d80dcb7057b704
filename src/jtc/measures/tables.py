"""The measures' tables (jtc.measures.context, jtc.measures.fidelity): per subject (the full
model, and each length and variant at the span the export rule chose) the measure's means with
paired bootstrap intervals, over windows (context perplexity) or over prompts (generation
fidelity): every subject is resampled with the same draws of the units."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jtc.evaluation.intervals import ratio_intervals
from jtc.files.io import rows_table
from jtc.measures.subjects import SUBJECT_COLUMNS
from jtc.settings import IntervalSettings

SUBJECT_KEYS = tuple(SUBJECT_COLUMNS)
CONTEXT_METRICS = (
    "cross_entropy",
    "cross_entropy_full",
    "perplexity",
    "perplexity_full",
    "perplexity_ratio",
    "top1_agreement",
)
GENERATION_METRICS = ("first_difference", "agreement_share", "identical_share")


def _interval_columns(metrics: Sequence[str]) -> dict[str, pa.DataType]:
    return {f"{m}{end}": pa.float64() for m in metrics for end in ("", "_low", "_high")}


CONTEXT_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "context": pa.int64(),
    **SUBJECT_COLUMNS,
    "windows": pa.int64(),  # windows scored (windows_wanted where the corpus had enough)
    "windows_wanted": pa.int64(),
    "tokens": pa.int64(),
    **_interval_columns(CONTEXT_METRICS),
}
GENERATION_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    **SUBJECT_COLUMNS,
    "prompts": pa.int64(),
    "new_tokens": pa.int64(),
    **_interval_columns(GENERATION_METRICS),
}


def _context_means(sums: np.ndarray) -> np.ndarray:
    """CONTEXT_METRICS from summed (tokens, ce, ce_full, agreement), (..., 4)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ce, ce_full = sums[..., 1] / sums[..., 0], sums[..., 2] / sums[..., 0]
        agreement = sums[..., 3] / sums[..., 0]
        return np.stack(
            [ce, ce_full, np.exp(ce), np.exp(ce_full), np.exp(ce - ce_full), agreement], -1
        )


def _generation_means(sums: np.ndarray) -> np.ndarray:
    """GENERATION_METRICS from summed (prompts, first_difference, agreement, new tokens,
    identical), (..., 5)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.stack(
            [sums[..., 1] / sums[..., 0], sums[..., 2] / sums[..., 3], sums[..., 4] / sums[..., 0]],
            -1,
        )


def _intervals(
    rows: pa.Table,
    group: Sequence[str],
    unit: str,
    sums: Sequence[str],
    means: Callable[[np.ndarray], np.ndarray],
    metrics: Sequence[str],
    settings: IntervalSettings,
    seed: int,
) -> list[dict]:
    """Per group of `rows` (its `group` columns, in first-seen order): the `metrics` from the
    summed columns `sums`, and their bootstrap intervals over the `unit`s, the same draws for
    every group."""
    keys = list(zip(*(rows.column(c).to_pylist() for c in group), strict=True))
    groups = list(dict.fromkeys(keys))
    units = rows.column(unit).to_pylist()
    index = {u: k for k, u in enumerate(dict.fromkeys(units))}
    where = {g: k for k, g in enumerate(groups)}
    table = np.zeros((len(groups), len(index), len(sums)))
    values = np.stack([rows.column(c).to_numpy().astype(np.float64) for c in sums], 1)
    np.add.at(table, ([where[k] for k in keys], [index[u] for u in units]), values)
    mean, low, high = ratio_intervals(
        table, means, settings.bootstrap, seed, settings.confidence_level
    )
    out = []
    for g, key in enumerate(groups):
        row: dict = dict(zip(group, key, strict=True))
        for m, name in enumerate(metrics):
            row |= {name: mean[g, m], f"{name}_low": low[g, m], f"{name}_high": high[g, m]}
        row["units"] = int(len(index))
        row["first_sum"] = float(table[g, :, 0].sum())
        out.append(row)
    return out


def context_table(
    windows: pa.Table, settings: IntervalSettings, seed: int, *, model: str, corpus: str
) -> pa.Table:
    """CONTEXT_COLUMNS: one row per (context, subject) of the per-window rows
    (jtc.measures.context.WINDOW_COLUMNS)."""
    rows = []
    for context in dict.fromkeys(windows.column("context").to_pylist()):
        part = windows.filter(pc.equal(windows.column("context"), context))
        wanted = part.column("windows_wanted")[0].as_py()
        done = _intervals(
            part,
            ("context", *SUBJECT_KEYS),
            "window",
            ("tokens", "cross_entropy", "cross_entropy_full", "agreement"),
            _context_means,
            CONTEXT_METRICS,
            settings,
            seed,
        )
        for row in done:
            units, tokens = row.pop("units"), row.pop("first_sum")
            rows.append(
                {"model": model, "corpus": corpus, **row}
                | {"windows": units, "windows_wanted": wanted, "tokens": int(tokens)}
            )
    return rows_table(rows, CONTEXT_COLUMNS)


def generation_table(
    prompts: pa.Table, settings: IntervalSettings, seed: int, *, model: str, corpus: str
) -> pa.Table:
    """GENERATION_COLUMNS: one row per subject of the per-prompt rows
    (jtc.measures.fidelity.PROMPT_COLUMNS)."""
    new = prompts.column("new_tokens").to_numpy()
    first = prompts.column("first_difference").to_numpy()
    with_units = prompts.append_column("_prompt", pa.array(np.ones(prompts.num_rows)))
    with_units = with_units.append_column("_identical", pa.array((first == new).astype(float)))
    done = _intervals(
        with_units,
        SUBJECT_KEYS,
        "sentence_id",
        ("_prompt", "first_difference", "agreement", "new_tokens", "_identical"),
        _generation_means,
        GENERATION_METRICS,
        settings,
        seed,
    )
    rows = []
    for row in done:
        units = row.pop("units")
        row.pop("first_sum")
        rows.append(
            {"model": model, "corpus": corpus, **row, "prompts": units, "new_tokens": int(new[0])}
        )
    return rows_table(rows, GENERATION_COLUMNS)
