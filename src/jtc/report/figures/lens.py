"""The logit-lens figure of a text (jtc.api): the top-1 token read from every layer at every
input token, one panel per method."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from jtc.report.figures.common import save_figure  # noqa: E402


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
    save_figure(fig, *paths)
