"""The r² figure: one heatmap per method, source layer × target layer."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from jtc.report.figures.common import r2_cells, save_figure  # noqa: E402


def r2_matrix(table: pa.Table, method: str) -> np.ndarray:
    """(L+1, L+1) array of r² for `method`, NaN where no pair was fitted (target <= source)."""
    rows = table.filter(pc.equal(table.column("method"), method)).to_pydict()
    size = max(rows["target_layer"], default=0) + 1
    grid = np.full((size, size), np.nan)
    for s, t, v in zip(rows["source_layer"], rows["target_layer"], rows["r2"], strict=True):
        grid[s, t] = v
    return grid


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
        r2_cells(ax, r2_matrix(table, methods[i]), annot=size <= 13, square=True, cbar=False)
        ax.set_title(methods[i])
        ax.set_xlabel("target layer l'" if i + columns >= len(methods) else "")
        ax.set_ylabel("source layer l" if i % columns == 0 else "")
        ax.tick_params(labelsize=6)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 0.9, 1))
    scale = fig.add_axes((0.92, 0.2, 0.015, 0.6))
    fig.colorbar(axes.flat[0].collections[0], cax=scale, label="r² (colours clip at -1)")
    save_figure(fig, png, pdf)
