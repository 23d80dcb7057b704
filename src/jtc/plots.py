"""Figures: r² heatmaps (source layer × target layer)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import seaborn as sns  # noqa: E402

from .io import atomic_path  # noqa: E402


def r2_matrix(table: pa.Table, method: str) -> np.ndarray:
    """(L+1, L+1) array of r² for `method`, NaN where no pair was fitted (target <= source)."""
    rows = table.filter(pc.equal(table.column("method"), method)).to_pydict()
    size = max(rows["target_layer"], default=0) + 1
    grid = np.full((size, size), np.nan)
    for s, t, v in zip(rows["source_layer"], rows["target_layer"], rows["r2"], strict=True):
        grid[s, t] = v
    return grid


def r2_heatmap(table: pa.Table, method: str, title: str, png: str | Path, pdf: str | Path) -> None:
    grid = r2_matrix(table, method)  # colours clip at -1; annotations show the true value
    size = grid.shape[0]
    fig, ax = plt.subplots(figsize=(2.5 + 0.22 * size, 2 + 0.2 * size))
    sns.heatmap(
        grid,
        ax=ax,
        vmin=-1.0,
        vmax=1.0,
        cmap="viridis",
        square=True,
        annot=size <= 13,
        fmt=".2f",
        annot_kws={"size": 7},
        cbar_kws={"label": "r²"},
        mask=np.isnan(grid),
    )
    ax.set_xlabel("target layer l'")
    ax.set_ylabel("source layer l")
    ax.set_title(title)
    fig.tight_layout()
    for path in (png, pdf):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=Path(path).suffix[1:], dpi=150)
    plt.close(fig)
