"""Figures a reader can use: each method drawn its own way, legends beside the data, not on it."""

import itertools

import matplotlib.pyplot as plt
import numpy as np
import pyarrow as pa
import pytest

from jtc.report.plots import METRIC_LABELS, early_exit_figure, method_style, prediction_panels
from jtc.shortcuts.methods import METHODS
from jtc.shortcuts.parts import VARIANTS

NAMES = [*METHODS, *VARIANTS]


def test_every_method_differs_from_every_other_in_colour_marker_and_line():
    styles = method_style(NAMES)
    for a, b in itertools.combinations(NAMES, 2):
        assert styles[a]["color"] != styles[b]["color"], (a, b)
        assert styles[a]["marker"] != styles[b]["marker"], (a, b)
    # and a name without a fixed style still gets one
    assert set(method_style(["other"])["other"]) == {"color", "marker", "linestyle"}


def prediction_table(methods, metrics, layers=6):
    rows = [
        {"method": m, "layer": layer, "metric": k, "mean": 0.5, "ci_low": 0.0, "ci_high": 1.0}
        for m in methods
        for k in metrics
        for layer in range(layers)
    ]
    return pa.Table.from_pylist(rows).to_pydict()


def overlaps(a, b) -> bool:
    return not (a.x1 <= b.x0 or b.x1 <= a.x0 or a.y1 <= b.y0 or b.y1 <= a.y0)


@pytest.mark.parametrize("count", [2, 6, 9])
def test_the_prediction_legend_lies_below_every_panel(count):
    methods = NAMES[:count]
    metrics = ["precision@1", "precision@5", "precision@10", *METRIC_LABELS][:6]
    fig = plt.figure(figsize=(12.6, 7.3))
    prediction_panels(fig, prediction_table(methods, metrics), metrics, methods, 3, "layer l")
    fig.canvas.draw()
    (legend,) = fig.legends
    box = legend.get_window_extent()
    assert [t.get_text() for t in legend.get_texts()] == methods
    assert not any(overlaps(box, ax.get_window_extent()) for ax in fig.axes)
    assert box.y0 >= 0  # inside the figure
    plt.close(fig)


def test_the_early_exit_legend_lies_below_the_curves(tmp_path, monkeypatch):
    rows = [
        {
            "method": m,
            "policy": p,
            "check": c if p == "confidence" else None,
            "check_every": k,
            "mean_layers": x,
            "macs_percent": 100 * x / 30 + 5 * k - 20 * (c == "shortlist"),
            "accuracy": x / 30,
        }
        for m in NAMES[:6]
        for p in ("confidence", "fixed")
        for c in ("full", "shortlist")
        for k in (1, 4)
        for x in np.linspace(1, 30, 8)
    ]
    seen = {}
    monkeypatch.setattr("jtc.report.plots._save", lambda fig, *paths: seen.setdefault("fig", fig))
    chosen = [
        {"method": m, "selection": s, "check": "full", "check_every": 1, "mean_layers": 20.0,
         "macs_percent": 300.0, "accuracy": 0.9}
        for m in NAMES[:6]
        for s in ("in_sample", "held_out")
    ]  # fmt: skip
    early_exit_figure(
        pa.Table.from_pylist(rows),
        "t",
        tmp_path / "a.png",
        tmp_path / "a.pdf",
        pa.Table.from_pylist(chosen),
    )
    fig = seen["fig"]
    fig.canvas.draw()
    (legend,) = fig.legends
    box = legend.get_window_extent()
    assert len(fig.axes) == 2 and not any(overlaps(box, ax.get_window_extent()) for ax in fig.axes)
    assert box.x0 >= fig.bbox.x0 - 1 and box.x1 <= fig.bbox.x1 + 1 and box.y0 >= fig.bbox.y0 - 1
    # every method: a confidence and a fixed curve and the λ chosen in sample and held out on
    # the left, one curve per check and interval on the right
    assert len(legend.get_texts()) == 6 * (2 + 2 * 2 + 2)
    texts = [t.get_text() for t in legend.get_texts()]
    assert f"{NAMES[0]}, λ chosen held out" in texts
    assert f"{NAMES[0]}, shortlist check every 4 layers" in texts
    plt.close(fig)
