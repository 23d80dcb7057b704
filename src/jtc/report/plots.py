"""Figures: r² heatmaps (source layer × target layer; block × part), prediction metrics by
layer, early exit and depth pruning."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogFormatter, MaxNLocator  # noqa: E402

from jtc.files.io import atomic_path  # noqa: E402
from jtc.model.adapters import PART_NAMES  # noqa: E402

# seaborn's "colorblind" palette, as constants: importing seaborn (pandas, scipy.stats) would
# add about 1.2 CPU-s to every figure job; only the heatmaps import it
COLORBLIND = (
    "#0173b2",
    "#de8f05",
    "#029e73",
    "#d55e00",
    "#cc78bc",
    "#ca9161",
    "#fbafe4",
    "#949494",
    "#ece133",
    "#56b4e9",
)


# every method and sub-module variant drawn the same way in every figure: a colour, a marker and
# a line style, so that methods stay apart in print, in grey and where lines coincide
STYLES = {
    "id": ("#000000", "o", ":"),
    "mat": (COLORBLIND[0], "s", "-"),
    "rrr": (COLORBLIND[2], "^", "--"),
    "njtc": (COLORBLIND[1], "v", "-."),
    "nnjtc": (COLORBLIND[5], "D", (0, (5, 1, 1, 1, 1, 1))),
    "one_jump": (COLORBLIND[6], "p", (0, (3, 1, 1, 1))),
    "one_jump_selected": (COLORBLIND[8], "<", (0, (3, 1, 1, 1, 1, 1))),
    "tuned_lens": (COLORBLIND[4], "P", "-"),
    "mat_attn": (COLORBLIND[3], "X", "--"),
    "mat_ffn": (COLORBLIND[9], "*", "-."),
    "mat_ln": (COLORBLIND[7], "h", (0, (1, 1))),
    # depth pruning's span-selection rules (never drawn beside the methods above)
    "angular_distance": (COLORBLIND[0], "o", "-"),
    "block_influence": (COLORBLIND[1], "s", "--"),
    "measured": (COLORBLIND[2], "^", "-."),
    "lowest_block_influence": (COLORBLIND[3], "D", ":"),
}
_MARKERS = "os^vDPX*hp<>"
_LINES = ("-", "--", "-.", ":")
BAND_ALPHA = 0.12  # bootstrap intervals: light enough that overlapping bands stay readable


def method_style(names: list[str]) -> dict[str, dict]:
    """Line options (color, marker, linestyle) per name: STYLES', else from a cycle."""
    styles = {}
    for i, name in enumerate(names):
        color, marker, line = STYLES.get(
            name,
            (COLORBLIND[i % len(COLORBLIND)], _MARKERS[i % len(_MARKERS)], _LINES[i % 4]),
        )
        styles[name] = {"color": color, "marker": marker, "linestyle": line}
    return styles


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


def r2_matrix(table: pa.Table, method: str) -> np.ndarray:
    """(L+1, L+1) array of r² for `method`, NaN where no pair was fitted (target <= source)."""
    rows = table.filter(pc.equal(table.column("method"), method)).to_pydict()
    size = max(rows["target_layer"], default=0) + 1
    grid = np.full((size, size), np.nan)
    for s, t, v in zip(rows["source_layer"], rows["target_layer"], rows["r2"], strict=True):
        grid[s, t] = v
    return grid


def _r2_cells(ax, grid: np.ndarray, annot: bool, **options) -> None:
    """r² cells coloured from -1 to 1 (clipped; the annotations show the true value)."""
    import seaborn as sns

    sns.heatmap(
        grid,
        ax=ax,
        vmin=-1.0,
        vmax=1.0,
        cmap="viridis",
        annot=annot,
        fmt=".2f",
        annot_kws={"size": 7},
        cbar_kws={"label": "r²"},
        mask=np.isnan(grid),
        **options,
    )


def r2_heatmaps(
    table: pa.Table, methods: list[str], title: str, png: str | Path, pdf: str | Path
) -> None:
    """One r² heatmap per method (source × target layer), side by side on one colour scale."""
    columns = min(3, len(methods))
    rows = -(-len(methods) // columns)
    size = r2_matrix(table, methods[0]).shape[0]
    side = 1.5 + 0.2 * size
    fig, axes = plt.subplots(
        rows, columns, figsize=(columns * side + 1.2, rows * side + 0.8), squeeze=False
    )
    for i, ax in enumerate(axes.flat):
        if i >= len(methods):
            ax.set_axis_off()
            continue
        _r2_cells(ax, r2_matrix(table, methods[i]), annot=size <= 13, square=True, cbar=False)
        ax.set_title(methods[i])
        ax.set_xlabel("target layer l'" if i + columns >= len(methods) else "")
        ax.set_ylabel("source layer l" if i % columns == 0 else "")
        ax.tick_params(labelsize=6)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 0.9, 1))
    scale = fig.add_axes((0.92, 0.2, 0.015, 0.6))
    fig.colorbar(axes.flat[0].collections[0], cax=scale, label="r² (colours clip at -1)")
    _save(fig, png, pdf)


def part_r2_heatmap(table: pa.Table, title: str, png: str | Path, pdf: str | Path) -> None:
    """r² of the sub-module maps: one row per block, one column per part, in block order."""
    rows = table.to_pylist()
    parts = [p for p in PART_NAMES if any(r["part"] == p for r in rows)]
    blocks = sorted({r["block"] for r in rows})
    grid = np.full((len(blocks), len(parts)), np.nan)
    for r in rows:
        grid[blocks.index(r["block"]), parts.index(r["part"])] = r["r2"]
    modules = {r["part"]: r["module"] for r in rows}
    fig, ax = plt.subplots(figsize=(7.5, 1.5 + 0.22 * len(blocks)))
    _r2_cells(
        ax,
        grid,
        annot=True,
        xticklabels=[f"{p}\n" + modules[p].replace("->", " →\n") for p in parts],
        yticklabels=blocks,
    )
    ax.collections[0].colorbar.set_label("r² (colours clip at -1; the numbers are exact)")
    ax.set_xlabel("part")
    ax.set_ylabel("block")
    ax.tick_params(axis="x", labelsize=7, rotation=0)
    ax.tick_params(axis="y", labelsize=7, rotation=0)
    ax.set_title(title)
    fig.tight_layout()
    _save(fig, png, pdf)


def _save(fig: plt.Figure, *paths: str | Path) -> None:
    for path in paths:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=Path(path).suffix[1:], dpi=150)
    plt.close(fig)


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
    _save(fig, png, pdf)


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
    _save(fig, png, pdf)


def lens_heatmap(
    table: pa.Table,
    title: str,
    label: str,
    scale: tuple[float, float] | None,
    masked: bool,
    *paths: str | Path,
) -> None:
    """One layer × input-token panel per method, stacked (a shared colour scale, width bounded
    whatever the text's length): each cell the top-1 token read from that layer, coloured by
    the table's `value` (a rank on a log scale), on `scale` or else the values' range."""
    import seaborn as sns
    from matplotlib.colors import LogNorm

    rows = table.to_pylist()
    methods = list(dict.fromkeys(r["method"] for r in rows))
    layers = sorted({r["layer"] for r in rows})
    positions = sorted({r["position"] for r in rows})
    inputs = {r["position"]: r["input_token"] for r in rows}
    values = np.array([r["value"] for r in rows], dtype=float)
    low, high = scale if scale else (float(np.nanmin(values)), float(np.nanmax(values)))
    rank = label.startswith("rank")
    norm = LogNorm(vmin=max(1.0, low), vmax=max(2.0, high)) if rank else None
    cell = min(0.75, 15.0 / len(positions))  # at most about 17 inches wide
    width = 2.5 + cell * len(positions)
    panel = 0.6 + 0.14 * len(layers)
    height = panel * len(methods) + 1.0
    fig, axes = plt.subplots(len(methods), 1, figsize=(width, height), squeeze=False)
    font = max(3.5, min(5.5, 8 * cell, 40 * 0.14))
    for ax, method in zip(axes[:, 0], methods, strict=True):
        grid = np.full((len(layers), len(positions)), np.nan)
        text = np.full((len(layers), len(positions)), "", dtype=object)
        for r in rows:
            if r["method"] == method:
                i, j = layers.index(r["layer"]), positions.index(r["position"])
                grid[i, j], text[i, j] = r["value"], r["token"][:8]
        sns.heatmap(
            grid,
            ax=ax,
            vmin=None if rank else low,
            vmax=None if rank else high,
            norm=norm,
            cmap="Blues_r" if rank else "Blues",
            annot=text,
            fmt="",
            annot_kws={"size": font},
            cbar_kws={"label": label, "pad": 0.01},
            xticklabels=[inputs[p][:10] for p in positions],
            yticklabels=layers,
        )
        ax.invert_yaxis()
        ax.set_ylabel(f"{method}\nlayer l")
        ax.tick_params(axis="x", rotation=60, labelsize=font + 1)
        ax.tick_params(axis="y", labelsize=5)
    axes[-1, 0].set_xlabel(
        "input token (read with it masked)"
        if masked
        else "input token (the prediction is for the next one)"
    )
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / height))
    _save(fig, *paths)


# --- depth pruning -----------------------------------------------------------------------

# the order of depth pruning's variants and selection rules in the figures (others after, sorted)
PRUNING_VARIANTS = ("drop", "mat", "replaceme", "rrr")
PRUNING_SELECTIONS = ("angular_distance", "block_influence", "measured", "lowest_block_influence")
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
        _save(_empty_figure(f"Depth pruning, every span — {title}"), png, pdf)
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
    _save(fig, png, pdf)


def pruning_selection_figure(table: pa.Table, title: str, png: str | Path, pdf: str | Path) -> None:
    """Depth pruning, the spans each selection rule chose: the perplexity ratio (top row, log
    scale) and the top-1 agreement with the unpruned model (bottom row) against the blocks
    removed n, one column per variant, one marker and line per selection rule with its
    bootstrap interval as bars (the rules' points spread a little sideways so that their bars
    stay apart); grey lines at 1 (the unpruned model). A rule is drawn in the columns of the
    variants it has rows for (lowest_block_influence: drop's only)."""
    rows = table.to_pylist()
    if not rows:
        _save(_empty_figure(f"Depth pruning, the chosen spans — {title}"), png, pdf)
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
    _save(fig, png, pdf)
