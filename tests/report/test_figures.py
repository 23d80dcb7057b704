"""Figures a reader can use: each method drawn its own way, legends beside the data, not on it."""

import itertools
import math

import matplotlib.pyplot as plt
import numpy as np
import pyarrow as pa
import pytest

from jtc.report.figures.common import method_style
from jtc.report.figures.early_exit import early_exit_figure
from jtc.report.figures.prediction import METRIC_LABELS, prediction_panels
from jtc.report.figures.pruning import pruning_selection_figure, pruning_span_figure
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
    monkeypatch.setattr(
        "jtc.report.figures.early_exit.save_figure", lambda fig, *paths: seen.setdefault("fig", fig)
    )
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


# --- depth pruning -------------------------------------------------------------------------

BLOCKS = 30  # L
RULES = ["angular_distance", "block_influence", "measured"]


def pruning_metrics(ratio: float) -> dict:
    """The metric columns of a pruned model whose perplexity grew `ratio` times."""
    agreement = 1 / ratio**0.1
    return {
        "sentences": 12,
        "tokens": 240,
        "cross_entropy": 3.0 + math.log(ratio),
        "cross_entropy_full": 3.0,
        "perplexity_ratio": ratio,
        "perplexity_ratio_low": 0.9 * ratio,
        "perplexity_ratio_high": 1.2 * ratio,
        "top1_agreement": agreement,
        "top1_agreement_low": 0.9 * agreement,
        "top1_agreement_high": min(1.0, 1.05 * agreement),
        "kl": math.log(ratio),
        "kl_low": 0.8 * math.log(ratio),
        "kl_high": 1.2 * math.log(ratio),
    }


def pruning_spans(variants, lengths=(4, 8)):
    """Every span of every variant and length; low_rank's ratios in the thousands."""
    rows = [
        {
            "model": "m",
            "corpus": "news",
            "variant": v,
            "length": n,
            "start": i,
            "removed": f"{i + 1}-{i + n}",
            "fraction_removed": n / BLOCKS,
            **pruning_metrics(
                math.exp(0.1 * n + 0.02 * abs(i - 18) * n + 7.0 * (v == "low_rank") + 0.1 * k)
            ),
            "angular_distance": 0.2 + 0.01 * abs(i - 18),
            "block_influence": 0.1 * n,
            "calibration_loss": None,  # (may be null)
        }
        for k, v in enumerate(variants)
        for n in lengths
        for i in range(BLOCKS - n + 1)
    ]
    return pa.Table.from_pylist(rows)


def pruning_selected(variants, lengths=(4, 8), lowest=True):
    """One row per length, rule and variant; lowest_block_influence for drop (`lowest`)."""
    rows = []
    for k, v in enumerate(variants):
        rules = RULES + (["lowest_block_influence"] if lowest and v == "drop" else [])
        for n in lengths:
            for j, rule in enumerate(rules):
                consecutive = rule != "lowest_block_influence"
                rows.append(
                    {
                        "model": "m",
                        "corpus": "news",
                        "length": n,
                        "fraction_removed": n / BLOCKS,
                        "selection": rule,
                        "variant": v,
                        "start": 17 if consecutive else -1,
                        "removed": f"18-{17 + n}" if consecutive else "3,9,14,22"[: 2 * n],
                        **pruning_metrics(
                            math.exp(0.1 * n + 0.2 * j + 7.0 * (v == "low_rank") + k)
                        ),
                    }
                )
    return pa.Table.from_pylist(rows)


@pytest.fixture
def drawn(monkeypatch):
    """The figures saved (and still written to their files)."""
    import jtc.report.figures.pruning as pruning

    figures = []
    save = pruning.save_figure
    monkeypatch.setattr(
        pruning, "save_figure", lambda fig, *paths: (figures.append(fig), save(fig, *paths))
    )
    return figures


def written(tmp_path, name):
    png, pdf = tmp_path / f"{name}.png", tmp_path / f"{name}.pdf"
    return png, pdf


def assert_written(*paths):
    for path in paths:
        assert path.exists() and path.stat().st_size > 1000, path


@pytest.mark.parametrize("variants", [["replaceme"], ["low_rank", "drop", "mat"]])
def test_the_pruning_span_figure_draws_one_panel_per_variant_and_a_line_per_length(
    tmp_path, drawn, variants
):
    png, pdf = written(tmp_path, "spans")
    pruning_span_figure(pruning_spans(variants), "m on news", png, pdf)
    assert_written(png, pdf)
    (fig,) = drawn
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    # the variants in their fixed order, on one log scale
    order = [v for v in ("drop", "mat", "replaceme", "low_rank") if v in variants]
    assert [ax.get_title() for ax in panels] == order
    assert all(ax.get_yscale() == "log" for ax in panels)
    assert len({ax.get_ylim() for ax in panels}) == 1  # shared y
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["n = 4 (13%)", "n = 8 (27%)"]
    # a line per length with every start, and the line at 1
    lines = panels[0].get_lines()
    assert [len(line.get_xdata()) for line in lines] == [BLOCKS - 3, BLOCKS - 7, 2]
    assert list(lines[-1].get_ydata()) == [1.0, 1.0]


@pytest.mark.parametrize("lowest", [True, False])
@pytest.mark.parametrize("variants", [["drop"], ["drop", "replaceme", "low_rank"]])
def test_the_pruning_selection_figure_draws_each_rule_under_each_variant(
    tmp_path, drawn, variants, lowest
):
    png, pdf = written(tmp_path, "selection")
    pruning_selection_figure(pruning_selected(variants, lowest=lowest), "m on news", png, pdf)
    assert_written(png, pdf)
    (fig,) = drawn
    axes = np.array(fig.axes).reshape(2, len(variants))
    assert [ax.get_title() for ax in axes[0]] == variants
    assert all(ax.get_yscale() == "log" for ax in axes[0])
    assert all(ax.get_yscale() == "linear" for ax in axes[1])
    rules = RULES + ["lowest_block_influence"] * lowest
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == rules
    for column, variant in enumerate(variants):
        drawn_rules = [c.get_label() for c in axes[0, column].containers]
        assert drawn_rules == (rules if variant == "drop" else RULES)
    # one point per length, at n (spread a little sideways), with its interval
    ratio = axes[0, 0].containers[0]
    x = ratio.lines[0].get_xdata()
    assert len(x) == 2 and abs(x[0] - 4) < 1 and abs(x[1] - 8) < 1
    assert [t.get_text() for t in axes[1, 0].get_xticklabels()] == ["4\n(13%)", "8\n(27%)"]


def test_a_pruning_table_without_rows_still_gives_both_files(tmp_path):
    spans = pruning_spans(["drop"]).slice(0, 0)
    pruning_span_figure(spans, "empty", *written(tmp_path, "spans"))
    pruning_selection_figure(pruning_selected(["drop"]).slice(0, 0), "e", *written(tmp_path, "s"))
    assert_written(*written(tmp_path, "spans"), *written(tmp_path, "s"))
