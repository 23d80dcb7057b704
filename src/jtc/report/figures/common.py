"""What every figure shares: each method's (and selection rule's) colour, marker and line
style, the r² cells of the heatmaps, and saving a figure to its files."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from jtc.files.io import atomic_path  # noqa: E402

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
    # depth pruning's low_rank stand-in (identity plus low rank), where drawn as a line: as rrr,
    # the shortcut method closest to it
    "low_rank": (COLORBLIND[2], "^", "--"),
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


def r2_cells(ax, grid: np.ndarray, annot: bool, **options) -> None:
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


def save_figure(fig: plt.Figure, *paths: str | Path) -> None:
    """Write the figure to each path (the format from its suffix), atomically, and close it."""
    for path in paths:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=Path(path).suffix[1:], dpi=150)
    plt.close(fig)
