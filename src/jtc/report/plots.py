"""Figures: r² heatmaps (source layer × target layer; block × part) and prediction metrics by
layer."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

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
