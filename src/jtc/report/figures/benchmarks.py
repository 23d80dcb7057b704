"""The benchmark figure: each task's accuracy (acc, the headline metric) for the full model and
each pruned model beside the task's chance level, and each pruned model's share of the full
model's accuracy retained (the ratio of averages, ReplaceMe's)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from jtc.report.figures.common import method_style, save_figure  # noqa: E402

FULL = "full"  # jtc.measures.subjects.FULL (report does not import measures' model code)


def _label(row: dict) -> str:
    if row["variant"] == FULL:
        return FULL
    return f"{row['variant']} ({row['removed']} removed)"


def _floats(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def benchmark_figure(
    accuracy: pa.Table, retained: pa.Table, title: str, png: str | Path, pdf: str | Path
) -> None:
    """Left: grouped bars, one group per task, one bar per measured model, with 95% bootstrap
    intervals, a tick at each task's chance level. Right: % retained per pruned model (the
    ratio of averages of acc; 100: the full model's accuracy)."""
    rows = [r for r in accuracy.to_pylist() if r["headline"]]
    subjects = list(dict.fromkeys(_label(r) for r in rows))
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [max(len(tasks), 1), 1.6]}
    )
    fig.suptitle(title)
    if not rows:
        left.axis("off")
        right.axis("off")
        left.text(0.5, 0.5, "no rows to draw", ha="center", va="center")
        save_figure(fig, png, pdf)
        return
    styles = method_style(subjects)
    width = 0.8 / len(subjects)
    for k, subject in enumerate(subjects):
        mine = {r["task"]: r for r in rows if _label(r) == subject}
        values = _floats([mine[t]["accuracy"] if t in mine else None for t in tasks])
        low = _floats([mine[t]["accuracy_low"] if t in mine else None for t in tasks])
        high = _floats([mine[t]["accuracy_high"] if t in mine else None for t in tasks])
        x = np.arange(len(tasks)) - 0.4 + width * (k + 0.5)
        left.bar(x, values, width, color=styles[subject]["color"], label=subject)
        left.errorbar(x, values, [values - low, high - values], fmt="none", ecolor="black", lw=0.8)
    chance = {r["task"]: r["chance"] for r in rows}
    for i, task in enumerate(tasks):
        left.hlines(chance[task], i - 0.45, i + 0.45, color="gray", lw=0.8, ls=":")
    split = {r["task"]: f"{r['split']}, {r['shots']}-shot" for r in rows}
    left.set_xticks(np.arange(len(tasks)), [f"{t}\n({split[t]})" for t in tasks], fontsize=7)
    left.set_ylabel("accuracy (acc; dotted: chance)")
    left.set_ylim(0, 1)
    left.legend(fontsize=7, ncol=2, loc="upper right")
    kept = [r for r in retained.to_pylist() if r["variant"] != FULL and r["headline"]]
    labels = [_label(r) for r in kept]
    values = _floats([r["retained_of_averages"] for r in kept])
    low, high = (
        _floats([r["retained_of_averages_low"] for r in kept]),
        _floats([r["retained_of_averages_high"] for r in kept]),
    )
    y = np.arange(len(kept))
    right.barh(y, values, color=[styles[label]["color"] for label in labels])
    right.errorbar(
        values, y, xerr=[values - low, high - values], fmt="none", ecolor="black", lw=0.8
    )
    right.axvline(100, color="gray", lw=0.8, ls="--")
    right.set_yticks(y, labels, fontsize=7)
    right.invert_yaxis()
    right.set_xlabel("% of the full model's acc retained\n(ratio of averages over tasks)")
    fig.tight_layout()
    save_figure(fig, png, pdf)
