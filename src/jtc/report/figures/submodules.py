"""The sub-module maps' r² figure: one row per block, one column per part."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from jtc.model.adapters import PART_NAMES  # noqa: E402
from jtc.report.figures.common import r2_cells, save_figure  # noqa: E402


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
    r2_cells(
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
    save_figure(fig, png, pdf)
