"""The message a finished run ends with: where its results are, how to get the report, which
methods gave values that are not numbers and which were fitted on fewer rows than the width
(the depth pruning maps on fewer calibration tokens than the width too, and the spans a tie
chose) (torch-free: the workflow prints it when a run succeeds)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from jtc import paths
from jtc.files.io import read_table
from jtc.settings import CalibrationText


def _table(path: Path) -> list[dict] | None:
    return read_table(path).to_pylist() if path.is_file() else None


def _overflows(rows: list[dict]) -> dict[str, tuple[int, int]]:
    """{method: (most positions that overflowed at one layer, positions)} of a prediction
    table: an overflowed position counts as a miss in Precision@k and is left out of the other
    means (so their n is smaller)."""
    counted: dict[tuple[str, int], dict[str, int]] = {}
    for r in rows:
        counted.setdefault((r["method"], r["layer"]), {})[r["metric"]] = r["n"]
    worst: dict[str, tuple[int, int]] = {}
    for (method, _), n in counted.items():
        total = n.get("precision@1", 0)
        lost = total - n.get("surprisal", total)
        if lost > worst.get(method, (0, 0))[0]:
            worst[method] = (lost, total)
    return worst


def problems(results: str | Path, models: Iterable[str], corpora: Iterable[str]) -> list[str]:
    """What a reader should know before trusting the tables: r² that is not a number, decoded
    states that overflowed (inf or NaN), runs with parts replaced that overflowed, maps fitted on
    fewer training rows than the width."""
    found = []
    for model in models:
        for corpus in corpora:
            where = f"{model}/{corpus}"
            metrics = paths.under(results, paths.METRICS, model=model, corpus=corpus)
            r2 = _table(metrics / "r2.parquet") or []
            bad = sorted({r["method"] for r in r2 if not math.isfinite(r["r2"])})
            if bad:
                found.append(f"{where}: r² is not a number for some pairs of {', '.join(bad)}")
            prediction = _table(metrics / "prediction.parquet") or []
            for method, (lost, total) in sorted(_overflows(prediction).items()):
                found.append(
                    f"{where}: {method}'s mapped states overflowed (inf or NaN) at up to {lost} "
                    f"of {total} positions of a layer, counted as misses"
                )
            replaced = _table(metrics / "submodules.parquet") or []
            diverged = {}
            for r in replaced:
                if r["metric"] == "diverged" and r["mean"] > 0:
                    diverged.setdefault(r["method"], []).append(r["mean"])
            for variant, shares in sorted(diverged.items()):
                found.append(
                    f"{where}: runs with {variant} overflowed (inf or NaN) after "
                    f"{len(shares)} jump layers (up to {max(shares):.0%} of positions), counted "
                    f"as misses (submodules.csv, metric diverged)"
                )
            found += _underdetermined(where, metrics)
            widths = [r["hidden_size"] for r in _table(metrics / "parameters.parquet") or []]
            selected = _table(metrics / "pruning_selected.parquet") or []
            found += pruning_problems(where, selected, widths[0] if widths else None)
    return found


def pruning_problems(where: str, selected: list[dict], width: int | None = None) -> list[str]:
    """Depth pruning's maps fitted on fewer calibration tokens than the width (the model's
    hidden size, None: unknown), and the choices a tie decided (pruning_selected's
    `underdetermined`, `tied`; absent from older tables)."""
    found = []
    flagged = [r for r in selected if r.get("underdetermined")]
    if flagged:
        variants = ", ".join(dict.fromkeys(r["variant"] for r in flagged))
        found.append(
            f"{where}: depth pruning's {variants} maps fitted on "
            f"{flagged[0]['calibration_tokens']} calibration tokens, fewer than the width"
            + (f" {width}" if width else "")
            + ": "
            "underdetermined, they reproduce the calibration tokens, so `measured` cannot tell "
            "the spans apart and the maps are fitted to noise (pruning_selected.csv, "
            f"underdetermined; {CalibrationText.MORE_TEXT})"
        )
    tied = [r for r in selected if (r.get("tied") or 1) > 1]
    if tied:
        choices = "; ".join(
            f"{r['selection']} for {r['variant']} at length {r['length']} ({r['tied']} spans)"
            for r in tied
        )
        found.append(
            f"{where}: depth pruning's choice was a tie, broken by the angular distance: "
            f"{choices} (pruning_selected.csv, tied, tied_removed)"
        )
    return found


def _underdetermined(where: str, metrics: Path) -> list[str]:
    """The maps fitted on fewer training rows than the width they map from (the parameter and
    part r² tables' `underdetermined`), whose r² is dominated by overfitting."""
    found = []
    fits: dict[tuple[int, int], list[str]] = {}
    for r in _table(metrics / "parameters.parquet") or []:
        if r.get("underdetermined"):
            fits.setdefault((r["training_rows"], r["hidden_size"]), []).append(r["method"])
    for (rows, width), methods in fits.items():
        found.append(
            f"{where}: {', '.join(methods)} fitted on {rows} training rows, fewer than the width "
            f"{width}: underdetermined, their r² is dominated by overfitting (parameters.csv, "
            "underdetermined; raise sizes.train)"
        )
    parts = [r for r in _table(metrics / "parts_r2.parquet") or [] if r.get("underdetermined")]
    if parts:
        names = ", ".join(dict.fromkeys(r["part"] for r in parts))
        found.append(
            f"{where}: the sub-module part maps ({names}) fitted on {parts[0]['training_rows']} "
            "training rows, fewer than their input width: their r² is dominated by overfitting "
            "(parts_r2.csv, underdetermined)"
        )
    return found


def run_summary(results: str | Path, models: Iterable[str], corpora: Iterable[str]) -> str:
    """The end-of-run message."""
    results = Path(results)
    lines = [
        f"jtc: done. Tables: {results}/metrics/<model>/<corpus>/, figures: "
        f"{results}/figures/<model>/<corpus>/ (every file and column: docs/outputs.md).",
        f"jtc: the HTML report: the same command again with --report {results}/report.html",
    ]
    lines += [f"jtc: note: {p}" for p in problems(results, list(models), list(corpora))]
    return "\n".join(lines)
