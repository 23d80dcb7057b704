"""Depth pruning's figures: the perplexity ratio of every span, and of the spans each selection
rule chose with the top-1 agreement."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogFormatter, MaxNLocator  # noqa: E402

from jtc.pruning.spans import SELECTIONS  # noqa: E402
from jtc.pruning.variants import VARIANTS  # noqa: E402
from jtc.report.figures.common import BAND_ALPHA, method_style, save_figure  # noqa: E402

# the order of depth pruning's variants and selection rules in the figures (others after, sorted)
PRUNING_VARIANTS, PRUNING_SELECTIONS = tuple(VARIANTS), SELECTIONS
RATIO_LABEL = "perplexity ratio\n(pruned / full, log scale)"


def _in_order(names, order: tuple[str, ...]) -> list[str]:
    present = set(names)
    return [n for n in order if n in present] + sorted(present - set(order))


def _floats(values) -> np.ndarray:
    """Values as floats, null as NaN (drawn as gaps)."""
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _log_ratio_axis(ax) -> None:
    """A log y axis read as plain numbers (1, 10, 100, then 10ⁿ; the ticks between them
    labelled where the axis spans less than a power of ten)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(
        FuncFormatter(
            lambda v, _: f"{v:g}" if 1e-3 <= v < 1e4 else f"$10^{{{round(np.log10(v))}}}$"
        )
    )
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))


def _panel_grid(count: int) -> tuple[int, int]:
    """(rows, columns) of `count` panels: at most three a row, four as two by two."""
    columns = 2 if count == 4 else min(3, count)
    return -(-count // columns), columns


def _removed_label(length: int, fraction: float | None, prefix: str = "n = ") -> str:
    """The blocks removed and their share of the model's blocks: "n = 4 (13%)"."""
    share = "" if fraction is None else f" ({100 * fraction:.0f}%)"
    return f"{prefix}{length}{share}"


def _empty_figure(title: str) -> plt.Figure:
    """A figure saying that its table has no rows (a file for the report all the same)."""
    fig, ax = plt.subplots(figsize=(6, 2))
    ax.axis("off")
    ax.text(0.5, 0.5, "no rows to draw", ha="center", va="center")
    fig.suptitle(title)
    return fig


def _figure_legend(fig: plt.Figure, axes, columns: int, title: str) -> None:
    """One legend below the panels, gathered from all of them (a name drawn in one panel only,
    such as lowest_block_influence, is still listed), each name once."""
    entries: dict[str, object] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    fig.legend(
        list(entries.values()),
        list(entries),
        loc="lower center",
        ncol=max(1, min(columns, len(entries))),
        title=title,
        frameon=False,
        fontsize=8,
        title_fontsize=8,
    )


def pruning_span_figure(table: pa.Table, title: str, png: str | Path, pdf: str | Path) -> None:
    """Depth pruning, every span: the perplexity ratio (pruned / full, log scale, its bootstrap
    interval as a band) against the start i of the span removed (blocks i+1..i+n), one panel per
    variant on a shared y axis, one line per length n; a grey line at 1 (no loss)."""
    rows = table.to_pylist()
    if not rows:
        save_figure(_empty_figure(f"Depth pruning, every span — {title}"), png, pdf)
        return
    variants = _in_order((r["variant"] for r in rows), PRUNING_VARIANTS)
    lengths = sorted({r["length"] for r in rows})
    fraction = {r["length"]: r["fraction_removed"] for r in rows}
    labels = {n: _removed_label(n, fraction[n]) for n in lengths}
    styles = method_style([labels[n] for n in lengths])
    grid_rows, columns = _panel_grid(len(variants))
    legend_height = 0.45 + 0.2 * -(-len(lengths) // 4)  # inches
    fig, axes = plt.subplots(
        grid_rows,
        columns,
        figsize=(4.2 * columns, 3.2 * grid_rows + legend_height + 0.5),
        sharey=True,
        squeeze=False,
    )
    for ax, variant in zip(axes.flat, variants, strict=False):
        for n in lengths:
            picked = sorted(
                (r for r in rows if r["variant"] == variant and r["length"] == n),
                key=lambda r: r["start"],
            )
            if not picked:
                continue
            start = [r["start"] for r in picked]
            style = styles[labels[n]]
            ax.plot(
                start,
                _floats(r["perplexity_ratio"] for r in picked),
                label=labels[n],
                markersize=3,
                linewidth=1.2,
                **style,
            )
            ax.fill_between(
                start,
                _floats(r["perplexity_ratio_low"] for r in picked),
                _floats(r["perplexity_ratio_high"] for r in picked),
                color=style["color"],
                alpha=BAND_ALPHA,
                linewidth=0,
            )
        ax.axhline(1.0, color="0.5", linewidth=0.8, zorder=0)
        _log_ratio_axis(ax)
        ax.set_title(variant)
        ax.set_xlabel("start i (blocks i+1..i+n removed)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3, which="major")
    for ax in axes[:, 0]:
        ax.set_ylabel(RATIO_LABEL)
    for ax in axes.flat[len(variants) :]:
        ax.axis("off")
    _figure_legend(fig, axes, 4, "blocks removed (bands: 95% bootstrap intervals)")
    fig.suptitle(f"Depth pruning, every span — {title}")
    fig.tight_layout(rect=(0, legend_height / fig.get_figheight(), 1, 0.95))
    save_figure(fig, png, pdf)


def pruning_selection_figure(table: pa.Table, title: str, png: str | Path, pdf: str | Path) -> None:
    """Depth pruning, the spans each selection rule chose: the perplexity ratio (top row, log
    scale) and the top-1 agreement with the unpruned model (bottom row) against the blocks
    removed n, one column per variant, one marker and line per selection rule with its
    bootstrap interval as bars (the rules' points spread a little sideways so that their bars
    stay apart); grey lines at 1 (the unpruned model). A rule is drawn in the columns of the
    variants it has rows for (lowest_block_influence: drop's only)."""
    rows = table.to_pylist()
    if not rows:
        save_figure(_empty_figure(f"Depth pruning, the chosen spans — {title}"), png, pdf)
        return
    variants = _in_order((r["variant"] for r in rows), PRUNING_VARIANTS)
    selections = _in_order((r["selection"] for r in rows), PRUNING_SELECTIONS)
    lengths = sorted({r["length"] for r in rows})
    fraction = {r["length"]: r["fraction_removed"] for r in rows}
    styles = method_style(selections)
    gap = min(np.diff(lengths), default=1)
    spread = 0.3 * gap  # the sideways spread of the rules' points, in blocks
    offset = {
        s: spread * (i / (len(selections) - 1) - 0.5) if len(selections) > 1 else 0.0
        for i, s in enumerate(selections)
    }
    metrics = (
        ("perplexity_ratio", RATIO_LABEL),
        ("top1_agreement", "top-1 agreement\nwith the unpruned model"),
    )
    legend_height = 0.45 + 0.2 * -(-len(selections) // 4)  # inches
    columns = len(variants)
    fig, axes = plt.subplots(
        2,
        columns,
        figsize=(max(4.6, 3.3 * columns + 0.6), 6.2 + legend_height),
        sharex=True,
        sharey="row",
        squeeze=False,
    )
    for column, variant in enumerate(variants):
        for (metric, label), ax in zip(metrics, axes[:, column], strict=True):
            for selection in selections:
                picked = sorted(
                    (r for r in rows if r["variant"] == variant and r["selection"] == selection),
                    key=lambda r: r["length"],
                )
                if not picked:
                    continue
                x = np.array([r["length"] for r in picked], dtype=float) + offset[selection]
                value = _floats(r[metric] for r in picked)
                low = _floats(r[f"{metric}_low"] for r in picked)
                high = _floats(r[f"{metric}_high"] for r in picked)
                bars = np.vstack([value - low, high - value])
                ax.errorbar(
                    x,
                    value,
                    yerr=np.where(np.isfinite(bars), np.maximum(bars, 0.0), 0.0),
                    label=selection,
                    markersize=4.5,
                    linewidth=1.0,
                    capsize=2.5,
                    elinewidth=0.9,
                    **styles[selection],
                )
            ax.axhline(1.0, color="0.5", linewidth=0.8, zorder=0)
            if metric == "perplexity_ratio":
                _log_ratio_axis(ax)
                ax.set_title(variant)
            if column == 0:
                ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        bottom = axes[1, column]
        bottom.set_xticks(
            lengths, [_removed_label(n, fraction[n], "").replace(" ", "\n") for n in lengths]
        )
        bottom.set_xlim(lengths[0] - 0.5 * gap, lengths[-1] + 0.5 * gap)
        bottom.set_xlabel("blocks removed n")
    _figure_legend(fig, axes, 4, "span chosen by (bars: 95% bootstrap intervals)")
    fig.suptitle(f"Depth pruning, the chosen spans — {title}")
    fig.tight_layout(rect=(0, legend_height / fig.get_figheight(), 1, 0.95))
    save_figure(fig, png, pdf)
