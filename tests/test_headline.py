"""The headline numbers of a run and the report's landing section stating them."""

import math

import pyarrow as pa
from docutils.core import publish_parts
from jinja2 import Environment

from jtc.evaluation.exit_tables import SAVINGS_COLUMNS
from jtc.evaluation.prediction import SUMMARY_COLUMNS
from jtc.files.io import rows_table
from jtc.report.headline import Tables, headline_rows, headline_table, landing_section
from jtc.shortcuts.maps import PARAMETER_COLUMNS

LAST = 4  # layers 0..4: the middle layer is 2


def r2_table(methods):
    rows = [
        {"method": m, "source_layer": s, "target_layer": t, "r2": 0.1 * s + t / 100 + i / 1000}
        for i, m in enumerate(methods)
        for s in range(LAST)
        for t in range(s + 1, LAST + 1)
    ]
    return pa.Table.from_pylist(rows)


def parameters(methods):
    size = {"id": 0, "mat": 64, "njtc": 16}
    return rows_table(
        [{"method": m, "parameters": size[m], "share_of_mat": size[m] / 64} for m in methods],
        PARAMETER_COLUMNS,
    )


def prediction(methods):
    rows = []
    for i, m in enumerate(methods):
        for layer in range(LAST + 1):
            p1 = layer / LAST if m != "mat" else min(1.0, 0.3 + layer / LAST)
            rows.append(
                {
                    "method": m,
                    "layer": layer,
                    "metric": "precision@1",
                    "mean": p1,
                    "ci_low": p1 - 0.05,
                    "ci_high": p1 + 0.05,
                    "n": 100,
                }  # fmt: skip
            )
            rows.append(
                {
                    "method": m,
                    "layer": layer,
                    "metric": "surprisal",
                    "mean": 5.0 - layer - i,
                    "ci_low": 0.0,
                    "ci_high": 9.0,
                    "n": 100,
                }  # fmt: skip
            )
    return rows_table(rows, SUMMARY_COLUMNS)


def savings(methods):
    rows = [
        {
            "method": m,
            "selection": selection,
            "check_every": every,
            "target": target,
            "check": check,
            "saved_percent": 10.0 * (i + 1) + target + (selection == "held_out") + every,
            "macs_saved_percent": -5.0 * i + target + 50.0 * (check == "shortlist"),
        }
        for i, m in enumerate(methods)
        for target in (0.99, 0.9, 0.95)
        for selection in ("in_sample", "held_out")
        for check in ("shortlist", "full")
        for every in (1, 4)
    ]
    return rows_table(rows, SAVINGS_COLUMNS)


def test_one_row_per_method_read_at_the_middle_layer():
    methods = ["id", "mat", "njtc"]
    tables = Tables(r2_table(methods), parameters(methods), prediction(methods), savings(methods))
    rows = {r["method"]: r for r in headline_rows("m", "news", tables)}
    assert list(rows) == ["id", "mat", "njtc"]  # the methods' own order
    mat = rows["mat"]
    assert (mat["layers"], mat["middle_layer"]) == (LAST, 2)
    assert mat["parameters"] == 64 and rows["njtc"]["share_of_mat"] == 0.25
    assert math.isclose(mat["r2_middle_to_last"], 0.2 + 0.04 + 0.001)  # the pair 2 → 4
    assert math.isclose(mat["precision1_middle"], 0.8)
    assert math.isclose(mat["precision1_ci_low"], 0.75)
    assert math.isclose(rows["id"]["precision1_middle"], 0.5)
    assert math.isclose(rows["njtc"]["surprisal_middle"], 5.0 - 2 - 2)
    # early exit: at the lowest target, λ held out, the full check at every layer
    assert mat["exit_target"] == 0.9 and math.isclose(mat["exit_saved_percent"], 22.9)
    assert math.isclose(mat["exit_macs_saved_percent"], -4.1)


def test_a_model_that_is_not_decoded_has_r2_and_sizes_only():
    methods = ["id", "mat"]
    rows = headline_rows("enc", "wiki", Tables(r2_table(methods), parameters(methods)))
    assert [r["method"] for r in rows] == methods
    assert all(r["precision1_middle"] is None and r["exit_saved_percent"] is None for r in rows)
    assert rows[1]["r2_middle_to_last"] is not None
    table = headline_table(rows)
    assert table.num_rows == 2 and table.schema.field("precision1_middle").type == pa.float64()


def rendered(section: str) -> str:
    """The section as Snakemake's report renders its landing page: Jinja, then docutils."""
    text = Environment().from_string(section).render(snakemake=None)
    return publish_parts(text, writer="html")["html_body"]


def test_the_landing_section_renders_each_model_as_a_table_and_a_sentence():
    decoded = ["id", "mat", "njtc"]
    rows = headline_rows(
        "lm{{x}}",  # a name Jinja would read as a template: kept as it is
        "news",
        Tables(r2_table(decoded), parameters(decoded), prediction(decoded), savings(decoded)),
    )
    rows += headline_rows("enc", "wiki", Tables(r2_table(["id", "mat"]), parameters(["id", "mat"])))
    html = rendered(landing_section(headline_table(rows)))
    assert "lm{{x}} on news" in html and "enc on wiki" in html
    assert html.count("<table") == 2 and "System Message" not in html  # valid reStructuredText
    # the best mapped method against id, in words, with its interval
    assert "<strong>mat</strong>" in html and "<strong>80.0%</strong>" in html
    assert "75.0–85.0%" in html and "against 50.0% for id" in html
    assert "0.241" in html and "64" in html  # r² and parameters of mat
    assert "lowest target agreement (90.0%)" in html
    assert "not decoded" in html and html.count("–") >= 4  # the encoder's empty cells
