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

from jtc.report.figures.common import COLORBLIND, method_style, save_figure  # noqa: E402

FULL = "full"  # jtc.measures.subjects.FULL (report does not import measures' model code)


def _label(row: dict, rules: bool) -> str:
    """A measured model's name; with `rules`, the selection rule that chose its blocks too
    (a table with stand-ins at other rules' blocks, pruning.also_measure, where two models
    could share a variant and blocks)."""
    if row["variant"] == FULL:
        return FULL
    rule = f", {row['selection']}" if rules else ""
    return f"{row['variant']} ({row['removed']} removed{rule})"


def _floats(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def benchmark_figure(
    accuracy: pa.Table, retained: pa.Table, title: str, png: str | Path, pdf: str | Path
) -> None:
    """Left: grouped bars, one group per task, one bar per measured model, with 95% bootstrap
    intervals, a tick at each task's chance level. Right: % retained per pruned model (the
    ratio of averages of acc; 100: the full model's accuracy)."""
    rows = [r for r in accuracy.to_pylist() if r["headline"]]
    rules = len({r["selection"] for r in rows if r["variant"] != FULL}) > 1
    subjects = list(dict.fromkeys(_label(r, rules) for r in rows))
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig, (left, right) = plt.subplots(
        1,
        2,
        figsize=(5 + 0.9 * len(tasks), 5.2 + 0.12 * len(subjects)),
        gridspec_kw={"width_ratios": [max(len(tasks), 1), 2.2]},
    )
    fig.suptitle(title)
    if not rows:
        left.axis("off")
        right.axis("off")
        left.text(0.5, 0.5, "no rows to draw", ha="center", va="center")
        save_figure(fig, png, pdf)
        return
    styles = method_style(subjects)
    # a second round of the colour cycle is hatched, so that no two bars look alike
    hatches = {s: "//" if k >= len(COLORBLIND) else None for k, s in enumerate(subjects)}
    width = 0.8 / len(subjects)
    for k, subject in enumerate(subjects):
        mine = {r["task"]: r for r in rows if _label(r, rules) == subject}
        values = _floats([mine[t]["accuracy"] if t in mine else None for t in tasks])
        low = _floats([mine[t]["accuracy_low"] if t in mine else None for t in tasks])
        high = _floats([mine[t]["accuracy_high"] if t in mine else None for t in tasks])
        x = np.arange(len(tasks)) - 0.4 + width * (k + 0.5)
        left.bar(
            x, values, width, color=styles[subject]["color"], hatch=hatches[subject], label=subject
        )
        left.errorbar(x, values, [values - low, high - values], fmt="none", ecolor="black", lw=0.8)
    chance = {r["task"]: r["chance"] for r in rows}
    for i, task in enumerate(tasks):
        left.hlines(chance[task], i - 0.45, i + 0.45, color="gray", lw=0.8, ls=":")
    split = {r["task"]: f"{r['split']}, {r['shots']}-shot" for r in rows}
    left.set_xticks(
        np.arange(len(tasks)),
        [f"{t}\n({split[t]})" for t in tasks],
        fontsize=7,
        rotation=30,
        ha="right",
    )
    left.set_ylabel("accuracy (acc; dotted: chance)")
    left.set_ylim(0, 1)

    kept = [r for r in retained.to_pylist() if r["variant"] != FULL and r["headline"]]
    labels = [_label(r, rules) for r in kept]
    values = _floats([r["retained_of_averages"] for r in kept])
    low, high = (
        _floats([r["retained_of_averages_low"] for r in kept]),
        _floats([r["retained_of_averages_high"] for r in kept]),
    )
    y = np.arange(len(kept))
    right.barh(
        y,
        values,
        color=[styles[label]["color"] for label in labels],
        hatch=[hatches[label] for label in labels],
    )
    right.errorbar(
        values, y, xerr=[values - low, high - values], fmt="none", ecolor="black", lw=0.8
    )
    right.axvline(100, color="gray", lw=0.8, ls="--")
    right.set_yticks(y, labels, fontsize=7)
    right.invert_yaxis()
    right.set_xlabel("% of the full model's acc\nretained (ratio of averages)")
    legend_rows = -(-len(subjects) // 3)
    fig.legend(*left.get_legend_handles_labels(), fontsize=7, ncol=3, loc="lower center")
    fig.tight_layout(rect=(0, 0.04 * legend_rows + 0.02, 1, 1))
    save_figure(fig, png, pdf)
