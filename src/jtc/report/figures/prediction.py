"""The prediction figure: each metric's mean against the layer, one line per method, with its
bootstrap interval as a band (also the sub-module runs' figure, against the jump layer)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pyarrow as pa  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from jtc.report.figures.common import BAND_ALPHA, method_style, save_figure  # noqa: E402

METRIC_LABELS = {
    "surprisal": "Surprisal (nats)",
    "kl": "KL(final ‖ shortcut) (nats)",
    "cross_entropy": "cross-entropy to gold (nats)",
    "diverged": "share of runs that overflowed",
}


def prediction_figure(
    table: pa.Table,
    title: str,
    png: str | Path,
    pdf: str | Path,
    heading: str = "Prediction from layer l against the final layer",
    xlabel: str = "layer l",
) -> None:
    """One panel per metric: its mean against the layer, one line per method, with the
    bootstrap interval as a band."""
    data = table.to_pydict()
    metrics = list(dict.fromkeys(data["metric"]))
    methods = sorted(set(data["method"]))
    columns = 3
    rows = -(-len(metrics) // columns)
    fig = plt.figure(figsize=(4.2 * columns, 3.2 * rows + 0.9))
    prediction_panels(fig, data, metrics, methods, columns, xlabel)
    fig.suptitle(f"{heading} — {title}")
    save_figure(fig, png, pdf)


def prediction_panels(
    fig: plt.Figure, data: dict, metrics: list[str], methods: list[str], columns: int, xlabel: str
) -> None:
    """prediction_figure's panels and legend (below them) on `fig`."""
    rows = -(-len(metrics) // columns)
    axes = fig.subplots(rows, columns, squeeze=False)
    styles = method_style(methods)
    for ax, metric in zip(axes.flat, metrics, strict=False):
        for method in methods:
            picked = [
                i
                for i, (m, k) in enumerate(zip(data["method"], data["metric"], strict=True))
                if m == method and k == metric
            ]
            picked.sort(key=lambda i: data["layer"][i])
            layer = [data["layer"][i] for i in picked]
            ax.plot(
                layer,
                [data["mean"][i] for i in picked],
                label=method,
                markersize=3.5,
                linewidth=1.2,
                **styles[method],
            )
            ax.fill_between(
                layer,
                [data["ci_low"][i] for i in picked],
                [data["ci_high"][i] for i in picked],
                color=styles[method]["color"],
                alpha=BAND_ALPHA,
                linewidth=0,
            )
        ax.set_xlabel(xlabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(METRIC_LABELS.get(metric, metric.replace("precision", "Precision")))
        if metric.startswith("precision") or metric == "diverged":
            ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(metrics) :]:
        ax.axis("off")
    _legend_below(fig, axes, len(methods), "method (bands: 95% bootstrap intervals)")
    fig.tight_layout(rect=(0, 0.9 / fig.get_figheight(), 1, 0.95))


def _legend_below(fig: plt.Figure, axes, columns: int, title: str | None = None) -> None:
    """One legend for the figure, below its panels (never over the data)."""
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        ncol=min(columns, len(labels)),
        title=title,
        frameon=False,
        fontsize=8,
    )
