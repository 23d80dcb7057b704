"""The early exit figure: Precision@1 against the layers run and against the multiply-adds."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pyarrow as pa  # noqa: E402

from jtc.report.figures.common import method_style, save_figure  # noqa: E402


def early_exit_figure(
    table: pa.Table,
    title: str,
    png: str | Path,
    pdf: str | Path,
    savings: pa.Table | None = None,
) -> None:
    """Precision@1 against the cost of early exit, one colour per method. Left, against the
    mean number of layers run (the paper's view, the checks not counted): the confidence rule's
    λ sweep checking every layer (solid) and exiting every token at a fixed layer (dashed).
    Right, against the multiply-adds per token as a share of the full model's, the checks (a
    map and a decode each) counted: one line per check (full, shortlist) and interval. With
    `savings`, the λ chosen for each target (the full check at the first interval) on both
    panels: filled markers in sample, hollow held out (scored on positions the λ was not chosen
    on)."""
    rows = table.to_pylist()
    methods = sorted({r["method"] for r in rows})
    variants = sorted(
        {(r["check"], r["check_every"]) for r in rows if r["policy"] == "confidence"},
        key=lambda v: (v[0] != "full", v),
    )
    intervals = sorted({every for _, every in variants})
    styles = method_style(methods)
    dashes = {v: ["-", ":", "-.", (0, (5, 1)), (0, (1, 2))][i % 5] for i, v in enumerate(variants)}
    marks = 2 if savings is not None else 0  # the chosen λ in sample and held out
    legend_rows = -(-len(methods) * (2 + len(variants) + marks) // 3)  # (three columns)
    legend_height = 0.3 + 0.17 * legend_rows  # inches
    fig, (layers_ax, macs_ax) = plt.subplots(1, 2, figsize=(11.5, 4.4 + legend_height), sharey=True)

    def curve(ax, method, policy, x, variant=None, **style):
        points = sorted(
            (r[x], r["accuracy"])
            for r in rows
            if r["method"] == method
            and r["policy"] == policy
            and (variant is None or (r["check"], r["check_every"]) == variant)
        )
        ax.plot([p[0] for p in points], [p[1] for p in points], **style)

    for method in methods:
        base = dict(styles[method], linewidth=1.2)
        first = ("full", intervals[0]) if intervals else None
        confident = dict(base, marker=None, label=f"{method}, confidence exit")
        curve(layers_ax, method, "confidence", "mean_layers", first, **confident)
        fixed = dict(base, linestyle="--", linewidth=0.8, markersize=3)
        curve(layers_ax, method, "fixed", "mean_layers", label=f"{method}, fixed exit", **fixed)
        for check, every in variants:
            style = dict(base, marker=None, linestyle=dashes[(check, every)])
            label = f"{method}, {check} check every {every} layer{'s' if every > 1 else ''}"
            variant = (check, every)
            curve(macs_ax, method, "confidence", "macs_percent", variant, label=label, **style)
        chosen = [
            r
            for r in (savings.to_pylist() if savings is not None else [])
            if r["method"] == method and (r["check"], r["check_every"]) == (first or ("full", 1))
        ]
        for selection, face in (("in_sample", styles[method]["color"]), ("held_out", "none")):
            points = [r for r in chosen if r["selection"] == selection]
            for ax, x in ((layers_ax, "mean_layers"), (macs_ax, "macs_percent")):
                ax.scatter(
                    [r[x] for r in points],
                    [r["accuracy"] for r in points],
                    marker=styles[method]["marker"],
                    s=36,
                    facecolors=face,
                    edgecolors=styles[method]["color"],
                    zorder=3,
                    label=(
                        f"{method}, λ chosen {selection.replace('_', ' ')}"
                        if points and ax is layers_ax
                        else None
                    ),
                )
    layers_ax.set_xlabel("mean layers run (checks not counted)")
    layers_ax.set_ylabel("Precision@1 against the full model")
    layers_ax.set_ylim(-0.02, 1.02)
    macs_ax.set_xlabel("multiply-adds per token, % of the full model (checks counted)")
    macs_ax.axvline(100.0, color="0.5", linewidth=0.8)
    for ax in (layers_ax, macs_ax):
        ax.grid(alpha=0.3)
    handles, labels = layers_ax.get_legend_handles_labels()
    more_handles, more_labels = macs_ax.get_legend_handles_labels()
    fig.legend(
        handles + more_handles,
        labels + more_labels,
        fontsize=7,
        loc="lower center",
        ncol=3,
        frameon=False,
    )
    fig.suptitle(f"Early exit — {title}")
    fig.tight_layout(rect=(0, legend_height / fig.get_figheight(), 1, 0.95))
    save_figure(fig, png, pdf)
