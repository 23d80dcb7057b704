"""The headline numbers of a run, read from its metric tables: per model, corpus and method, one
row (the map's size, r² and Precision@1 from the middle layer, the layers saved by early exit;
where the model was pruned, its best pruning at about a quarter of the blocks removed), and the
report's landing section stating them (reStructuredText)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from jtc import paths
from jtc.files.io import read_tables, rows_table
from jtc.settings import CalibrationText
from jtc.shortcuts.methods import METHODS

SCHEMA = {
    "model": pa.string(),
    "corpus": pa.string(),
    "method": pa.string(),
    "layers": pa.int64(),  # L, the model's last layer
    "middle_layer": pa.int64(),  # L // 2, where r² and the predictions are read
    "parameters": pa.int64(),  # trained parameters of one map
    "share_of_mat": pa.float64(),  # (parameters + buffers) / d²
    "r2_middle_to_last": pa.float64(),  # r² of the map from the middle layer into the last
    "precision1_middle": pa.float64(),  # Precision@1 at the middle layer (null: no head)
    "precision1_ci_low": pa.float64(),
    "precision1_ci_high": pa.float64(),
    "surprisal_middle": pa.float64(),  # nats, at the middle layer
    "exit_target": pa.float64(),  # the lowest target agreement of the early-exit table
    # at it, λ held out, the full check at every layer: layers saved (% of L), and multiply-adds
    # saved
    # (% of the full model's, the checks counted; negative: exiting costs more than it saves)
    "exit_saved_percent": pa.float64(),
    "exit_macs_saved_percent": pa.float64(),
    # from parameters.parquet: the rows the method's maps were fitted on (null: id), and whether
    # they are fewer than the width of the states a map reads (its r² then measures overfitting)
    "training_rows": pa.int64(),
    "hidden_size": pa.int64(),
    "underdetermined": pa.bool_(),
    # depth pruning, from pruning_selected.parquet (null without it; the same on every row of a
    # model and corpus): of the spans chosen for the length n closest to a quarter of the
    # blocks, the (variant, selection rule) with the lowest perplexity ratio on the evaluation
    # sentences, the blocks it removes (n, n / L and which) and its scores with their intervals
    "pruning_variant": pa.string(),
    "pruning_selection": pa.string(),
    "pruning_length": pa.int64(),
    "pruning_fraction_removed": pa.float64(),
    "pruning_removed": pa.string(),
    "pruning_perplexity_ratio": pa.float64(),
    "pruning_perplexity_ratio_low": pa.float64(),
    "pruning_perplexity_ratio_high": pa.float64(),
    "pruning_top1_agreement": pa.float64(),
    "pruning_top1_agreement_low": pa.float64(),
    "pruning_top1_agreement_high": pa.float64(),
    # how many spans tied with the chosen one in its rule's statistic (1: no tie), the
    # calibration tokens, and the variants whose maps were fitted on fewer of them than the
    # width (comma-separated, "" for none: underdetermined, `measured` cannot tell spans apart)
    "pruning_tied": pa.int64(),
    "pruning_calibration_tokens": pa.int64(),
    "pruning_underdetermined_variants": pa.string(),
}
PRUNING_COLUMNS = {  # headline column: pruning_selected column
    name: name.removeprefix("pruning_")
    for name in SCHEMA
    if name.startswith("pruning_") and name != "pruning_underdetermined_variants"
}
PRUNING_TARGET = 0.25  # the share of blocks removed the headline reads pruning at


# the metric tables the headline numbers come from (prediction and savings: decoded models;
# pruning: models and corpora that depth pruning runs on)
HEADLINE_SOURCES = {
    "r2": "r2.parquet",
    "parameters": "parameters.parquet",
    "prediction": "prediction.parquet",
    "savings": "early_exit_savings.parquet",
    "pruning": "pruning_selected.parquet",
}
DECODED_ONLY = ("prediction", "savings")
PRUNED_ONLY = ("pruning",)


def headline_sources(
    model: str, corpus: str, predicts: bool, pruning: bool = False
) -> dict[str, str]:
    """The tables of one model and corpus that the headline numbers read (the workflow plans
    them as the inputs of headline_table, which reads them): prediction and savings where the
    model `predicts`, pruning where depth pruning runs on this model and corpus (`pruning`)."""
    return {
        name: paths.metric(file).format(model=model, corpus=corpus)
        for name, file in HEADLINE_SOURCES.items()
        if (predicts or name not in DECODED_ONLY) and (pruning or name not in PRUNED_ONLY)
    }


@dataclass(frozen=True)
class Tables:
    """The metric tables of one model and corpus (prediction and savings: None for a model
    that does not predict; pruning, pruning_selected.parquet: None where it was not pruned)."""

    r2: pa.Table
    parameters: pa.Table
    prediction: pa.Table | None = None
    savings: pa.Table | None = None
    pruning: pa.Table | None = None


def _ordered(methods: set[str]) -> list[str]:
    return [m for m in METHODS if m in methods] + sorted(methods - set(METHODS))


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


def best_pruning(table: pa.Table | None) -> dict:
    """The headline's pruning columns (PRUNING_COLUMNS) from pruning_selected.parquet: among the
    rows of the length whose share of blocks removed is closest to PRUNING_TARGET (the shorter
    on a tie), the (variant, selection) with the lowest perplexity ratio; every column null
    without a table or a finite ratio."""
    rows = [
        r
        for r in (table.to_pylist() if table is not None else [])
        if _finite(r["perplexity_ratio"]) and _finite(r["fraction_removed"])
    ]
    if not rows:
        return dict.fromkeys([*PRUNING_COLUMNS, "pruning_underdetermined_variants"])
    flagged = dict.fromkeys(r["variant"] for r in rows if r.get("underdetermined"))
    closest = min(rows, key=lambda r: (abs(r["fraction_removed"] - PRUNING_TARGET), r["length"]))
    best = min(
        (r for r in rows if r["length"] == closest["length"]),
        key=lambda r: (r["perplexity_ratio"], r["variant"], r["selection"]),
    )
    return {column: best.get(name) for column, name in PRUNING_COLUMNS.items()} | {
        "pruning_underdetermined_variants": ", ".join(flagged)
    }


def headline_rows(model: str, corpus: str, tables: Tables) -> list[dict]:
    """One row per method of one model and corpus (see SCHEMA)."""
    r2 = tables.r2.to_pylist()
    last = max(r["target_layer"] for r in r2)
    middle = last // 2
    size = {r["method"]: r for r in tables.parameters.to_pylist()}
    into_last = {
        r["method"]: r["r2"]
        for r in r2
        if r["source_layer"] == middle and r["target_layer"] == last
    }
    at_middle = {}
    for r in tables.prediction.to_pylist() if tables.prediction is not None else []:
        if r["layer"] == middle and r["metric"] in ("precision@1", "surprisal"):
            at_middle[(r["method"], r["metric"])] = r
    saved = {}
    if tables.savings is not None and tables.savings.num_rows:
        held = [
            r
            for r in tables.savings.to_pylist()
            if r["selection"] == "held_out" and r["check"] == "full"
        ]
        target = min(r["target"] for r in held)
        every = min(r["check_every"] for r in held)
        saved = {r["method"]: r for r in held if (r["target"], r["check_every"]) == (target, every)}
    methods = {r["method"] for r in r2} | set(size)
    pruned = best_pruning(tables.pruning)
    rows = []
    for method in _ordered(methods):
        p1 = at_middle.get((method, "precision@1"), {})
        surprisal = at_middle.get((method, "surprisal"), {})
        row = {
            "model": model,
            "corpus": corpus,
            "method": method,
            "layers": last,
            "middle_layer": middle,
            "parameters": size.get(method, {}).get("parameters"),
            "share_of_mat": size.get(method, {}).get("share_of_mat"),
            "r2_middle_to_last": into_last.get(method),
            "precision1_middle": p1.get("mean"),
            "precision1_ci_low": p1.get("ci_low"),
            "precision1_ci_high": p1.get("ci_high"),
            "surprisal_middle": surprisal.get("mean"),
            "exit_target": saved.get(method, {}).get("target"),
            "exit_saved_percent": saved.get(method, {}).get("saved_percent"),
            "exit_macs_saved_percent": saved.get(method, {}).get("macs_saved_percent"),
            "training_rows": size.get(method, {}).get("training_rows"),
            "hidden_size": size.get(method, {}).get("hidden_size"),
            "underdetermined": size.get(method, {}).get("underdetermined"),
            **pruned,
        }
        rows.append(row)
    return rows


def read_headline_rows(pairs: Sequence[tuple]) -> list[dict]:
    """The headline rows of every (model, corpus, whether the model predicts[, whether depth
    pruning ran on it]) in `pairs`, in order, each from the tables headline_sources names."""
    rows = []
    for model, corpus, *flags in pairs:
        tables = Tables(**read_tables(headline_sources(model, corpus, *flags)))
        rows += headline_rows(model, corpus, tables)
    return rows


def headline_table(rows: list[dict]) -> pa.Table:
    return rows_table(rows, SCHEMA)


# --- the landing section -----------------------------------------------------------------


def _number(value: float | None, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return format(value, fmt)


def _percent(value: float | None) -> str:
    return _number(None if value is None else 100 * value, ".1f")


def _sentence(rows: list[dict]) -> str:
    """What the table says in words: the best shortcut's agreement against id's."""
    scored = [r for r in rows if r["precision1_middle"] is not None]
    if not scored:
        return "This model is not decoded (`predict: false` in the config): r² and map sizes only."
    first = rows[0]
    mapped = [r for r in scored if r["method"] != "id"] or scored
    best = max(mapped, key=lambda r: r["precision1_middle"])
    text = (
        f"From layer {first['middle_layer']} of {first['layers']}, **{best['method']}**'s top-1 "
        f"token agrees with the model's final prediction on "
        f"**{_percent(best['precision1_middle'])}%** of validation tokens "
        f"(95% interval {_percent(best['precision1_ci_low'])}–"
        f"{_percent(best['precision1_ci_high'])}%)"
    )
    base = next((r for r in scored if r["method"] == "id"), None)
    if base is not None and best is not base:
        text += f", against {_percent(base['precision1_middle'])}% for id (the state as it is)"
    return text + "."


def _ratio(value: float | None) -> str:
    """A perplexity ratio: two decimals, whole numbers from 100 (a poor stand-in's: thousands)."""
    return _number(value, ".2f" if value is None or value < 100 else ",.0f")


def _pruning(row: dict) -> str:
    """The best pruning at about a quarter of the blocks removed, in words; "" without it."""
    if row.get("pruning_variant") is None:
        return ""
    n, share = row["pruning_length"], row["pruning_fraction_removed"]
    blocks = f" of {round(n / share)}" if share else ""
    rule = row["pruning_selection"]
    where = (
        f"blocks {row['pruning_removed']}, chosen by {rule}"
        if rule != "lowest_block_influence"
        else f"blocks {row['pruning_removed'].replace(',', ', ')}, the {n} of lowest Block "
        "Influence, not consecutive"
    )
    return (
        f"**Depth pruning.** With {n}{blocks} blocks removed ({_percent(share)}%; {where}), "
        f"the best variant, **{row['pruning_variant']}**, multiplies the perplexity by "
        f"**{_ratio(row['pruning_perplexity_ratio'])}** (95% interval "
        f"{_ratio(row['pruning_perplexity_ratio_low'])}–"
        f"{_ratio(row['pruning_perplexity_ratio_high'])}; 1: no loss), and its top-1 token "
        f"agrees with the unpruned model's on **{_percent(row['pruning_top1_agreement'])}%** of "
        f"evaluation tokens ({_percent(row['pruning_top1_agreement_low'])}–"
        f"{_percent(row['pruning_top1_agreement_high'])}%)." + _pruning_caveats(row)
    )


def _pruning_caveats(row: dict) -> str:
    """Depth pruning's underdetermined maps and a choice a tie decided, in words ("": none)."""
    text = ""
    if (row.get("pruning_tied") or 1) > 1:
        text += (
            f" Its rule's statistic tied across {row['pruning_tied']} spans (broken by the "
            "angular distance; ``pruning_selected.csv``: tied, tied_removed)."
        )
    if row.get("pruning_underdetermined_variants"):
        text += (
            f" **Underdetermined pruning:** the {row['pruning_underdetermined_variants']} maps "
            f"were fitted on {_number(row['pruning_calibration_tokens'], ',d')} calibration "
            "tokens, fewer than the width: they reproduce them, so their calibration loss (the "
            "``measured`` rule) cannot tell the spans apart and the maps are fitted to noise; "
            f"{CalibrationText.MORE_TEXT} before reading them."
        )
    return text


def _underdetermined(rows: list[dict]) -> str:
    """What the maps fitted on fewer training rows than the width are worth, naming them; ""
    when there are none."""
    flagged = [r for r in rows if r["underdetermined"]]
    if not flagged:
        return ""
    fits: dict[tuple[int | None, int | None], list[str]] = {}
    for r in flagged:
        fits.setdefault((r["training_rows"], r["hidden_size"]), []).append(f"**{r['method']}**")
    named = "; ".join(
        f"{', '.join(methods)} on {_number(n, ',d')} training rows for a width of "
        f"{_number(d, ',d')}"
        for (n, d), methods in fits.items()
    )
    return (
        "**Underdetermined fits.** Fitted on fewer training rows than the width of the states "
        f"they map from: {named}. Each output coordinate of such a map has more inputs than "
        "there are rows to fit them (a low-rank or trained map sees the same rows), so it can "
        "reproduce its training rows: its held-out r² is dominated by overfitting, not by how "
        "linear the model is, and so is what is read through it. Fit on more training sentences "
        "than the width (``sizes.train``) before reading these numbers."
    )


COLUMNS = [  # (column, title, format)
    ("method", "method", None),
    ("parameters", "parameters / map", ",d"),
    ("r2_middle_to_last", "r² middle → last", ".3f"),
    ("precision1_middle", "Precision@1 at middle, % (95% CI)", "percent"),
    ("surprisal_middle", "surprisal at middle, nats", ".2f"),
    ("exit_saved_percent", "early exit: layers saved, %", ".1f"),
    ("exit_macs_saved_percent", "early exit: multiply-adds saved, %", ".1f"),
]


def _cell(row: dict, key: str, fmt: str | None) -> str:
    value = row[key]
    if fmt is None:
        return str(value)
    if fmt == "percent":
        if value is None:
            return "–"
        return (
            f"{_percent(value)} ({_percent(row['precision1_ci_low'])}–"
            f"{_percent(row['precision1_ci_high'])})"
        )
    return _number(value, fmt)


def landing_section(table: pa.Table) -> str:
    """The landing page's "Headline numbers" section: per model and corpus, a sentence and a
    table of every method. Wrapped in Jinja's raw block (Snakemake renders the landing page
    as a Jinja template, and names from the config must stay as they are)."""
    rows = table.to_pylist()
    pruned = any(r.get("pruning_variant") is not None for r in rows)
    targets = sorted({r["exit_target"] for r in rows if r["exit_target"] is not None})[:1]
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["corpus"]), []).append(row)
    lines = [
        "Headline numbers",
        "----------------",
        "",
        "Read from this run's tables (``results/metrics/headline.csv`` holds them all). The "
        "*middle layer* is L // 2 of a model's L layers; Precision@1 is the share of validation "
        "tokens whose top-1 token read from that layer equals the model's own final top-1 (95% "
        "bootstrap interval in brackets); early exit: the layers and the multiply-adds per token "
        "saved (the checks' maps and decodes counted; negative: exiting costs more than it "
        "saves) by the confidence threshold with the fewest layers that keeps the lowest target "
        "agreement"
        + "".join(f" ({_percent(t)}%)" for t in targets)
        + ", chosen on other validation positions than those it is scored on (held out), with "
        "the full check (the whole vocabulary decoded) at every layer; the early-exit tables "
        "compare cheaper checks.",
        "",
    ]
    if pruned:
        lines += [
            "*Depth pruning* removes n of a model's L blocks, n as close as the run has to a "
            "quarter of L, and stands in for them by a variant; of every variant and every rule "
            "choosing which blocks (on calibration sentences), the one with the lowest "
            "perplexity ratio exp(CE pruned − CE full) over every token of the evaluation "
            "sentences is given, with its top-1 agreement with the unpruned model (95% "
            "bootstrap intervals over sentences).",
            "",
        ]
    flagged = [
        f"{model} on {corpus} ({', '.join(r['method'] for r in group if r['underdetermined'])})"
        for (model, corpus), group in groups.items()
        if any(r["underdetermined"] for r in group)
    ]
    flagged += [
        f"{model} on {corpus} (depth pruning: {group[0]['pruning_underdetermined_variants']} on "
        "calibration tokens)"
        for (model, corpus), group in groups.items()
        if group[0].get("pruning_underdetermined_variants")
    ]
    if flagged:
        lines += [
            "**Maps fitted on fewer training rows than the width:** "
            + "; ".join(flagged)
            + ". Their r² is dominated by overfitting: see the note under each table.",
            "",
        ]
    for (model, corpus), group in groups.items():
        lines += [
            f".. list-table:: {model} on {corpus}",
            "   :header-rows: 1",
            "",
            "   * - " + "\n     - ".join(title for _, title, _ in COLUMNS),
        ]
        for row in group:
            cells = [_cell(row, key, fmt) for key, _, fmt in COLUMNS]
            lines.append("   * - " + "\n     - ".join(cells))
        lines += ["", _sentence(group), ""]
        pruning = _pruning(group[0])
        if pruning:
            lines += [pruning, ""]
        note = _underdetermined(group)
        if note:
            lines += [note, ""]
    return "{% raw %}\n" + "\n".join(lines) + "\n{% endraw %}\n"
