"""The headline numbers of a run and the report's landing section stating them."""

import math
from pathlib import Path

import pyarrow as pa
from docutils.core import publish_parts
from jinja2 import Environment
from tables import LAST, parameters, r2_table

from jtc.evaluation.exit_tables import SAVINGS_COLUMNS
from jtc.evaluation.prediction import SUMMARY_COLUMNS
from jtc.files.io import read_table, rows_table, write_table
from jtc.report.headline import (
    SCHEMA,
    Tables,
    best_pruning,
    headline_rows,
    headline_sources,
    headline_table,
    landing_section,
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


# --- depth pruning -------------------------------------------------------------------------

BLOCKS = 30  # L: lengths 4 (13%) and 8 (27%), 8 the closer to a quarter


def pruning_row(length, selection, variant, ratio, agreement, start=10, removed=None):
    return {
        "model": "lm",
        "corpus": "news",
        "length": length,
        "fraction_removed": length / BLOCKS,
        "selection": selection,
        "variant": variant,
        "start": start,
        "removed": removed or f"{start + 1}-{start + length}",
        "sentences": 20,
        "tokens": 400,
        "cross_entropy": 3.0 + math.log(ratio),
        "cross_entropy_full": 3.0,
        "perplexity_ratio": ratio,
        "perplexity_ratio_low": ratio - 0.1,
        "perplexity_ratio_high": ratio + 0.2,
        "top1_agreement": agreement,
        "top1_agreement_low": agreement - 0.03,
        "top1_agreement_high": agreement + 0.02,
        "kl": math.log(ratio),
        "kl_low": 0.0,
        "kl_high": 1.0,
    }


def pruning_selected():
    """The best at n = 8 is replaceme by block_influence (not the first row, nor the first
    variant); n = 4 has a lower ratio still (a rule reading every length would pick it)."""
    rows = [
        pruning_row(4, "angular_distance", "drop", 1.05, 0.97),
        pruning_row(4, "lowest_block_influence", "drop", 1.2, 0.95, -1, "3,17,22,25"),
        pruning_row(8, "angular_distance", "drop", 2.5, 0.81),
        pruning_row(8, "block_influence", "drop", 2.2, 0.83, start=12),
        pruning_row(8, "lowest_block_influence", "drop", 1.9, 0.84, -1, "3,9,14,17,20,22,24,25"),
        pruning_row(8, "angular_distance", "replaceme", 1.7, 0.86),
        pruning_row(8, "block_influence", "replaceme", 1.46, 0.873, start=12),
        pruning_row(8, "measured", "replaceme", float("nan"), 0.9),  # (not finite: never best)
        pruning_row(8, "measured", "low_rank", 2345.6, 0.2),
    ]
    return pa.Table.from_pylist(rows)


PRUNED = {
    "pruning_variant": "replaceme",
    "pruning_selection": "block_influence",
    "pruning_length": 8,
    "pruning_removed": "13-20",
    "pruning_perplexity_ratio": 1.46,
    "pruning_top1_agreement": 0.873,
}


def test_the_headline_reads_the_best_pruning_at_about_a_quarter_of_the_blocks():
    assert best_pruning(None) == dict.fromkeys(best_pruning(pruning_selected()))
    best = best_pruning(pruning_selected())
    assert set(best) == {c for c in SCHEMA if c.startswith("pruning_")}
    assert {k: best[k] for k in PRUNED} == PRUNED
    assert math.isclose(best["pruning_fraction_removed"], 8 / 30)
    assert math.isclose(best["pruning_perplexity_ratio_high"], 1.66)
    assert math.isclose(best["pruning_top1_agreement_low"], 0.843)
    # on every row of the model and corpus
    methods = ["id", "mat"]
    tables = Tables(r2_table(methods), parameters(methods), pruning=pruning_selected())
    rows = headline_rows("lm", "news", tables)
    assert [r["method"] for r in rows] == methods
    assert all({k: r[k] for k in PRUNED} == PRUNED for r in rows)
    assert headline_table(rows).schema.field("pruning_length").type == pa.int64()


def test_the_landing_page_states_the_best_pruning_and_nothing_for_a_model_not_pruned():
    methods = ["id", "mat"]
    pruned = Tables(r2_table(methods), parameters(methods), pruning=pruning_selected())
    plain = Tables(r2_table(methods), parameters(methods))
    rows = headline_rows("lm", "news", pruned) + headline_rows("enc", "wiki", plain)
    html = rendered(landing_section(headline_table(rows)))
    assert "System Message" not in html  # valid reStructuredText
    assert html.count("Depth pruning.") == 1
    assert "With 8 of 30 blocks removed (26.7%; blocks 13-20, chosen by block_influence)" in html
    assert "<strong>replaceme</strong>" in html and "<strong>1.46</strong>" in html
    assert "95% interval 1.36–1.66" in html and "<strong>87.3%</strong>" in html
    assert "84.3–89.3%" in html
    # under lm's table, before enc's
    assert html.index("Depth pruning.") < html.index("enc on wiki")
    # a model without pruning: its rows and section as before, the pruning columns null
    plain_rows = headline_rows("enc", "wiki", plain)
    assert all(r[c] is None for r in plain_rows for c in SCHEMA if c.startswith("pruning_"))
    table = headline_table(plain_rows)
    alone = landing_section(table)
    assert "pruning" not in alone.lower()
    before = table.drop_columns([c for c in table.column_names if c.startswith("pruning_")])
    assert alone == landing_section(before)  # as from a headline table before pruning


def test_a_pruning_of_blocks_not_consecutive_and_a_huge_ratio_read_well():
    rows = [
        pruning_row(8, "lowest_block_influence", "drop", 1.9, 0.84, -1, "3,9,14,17,20,22,24,25"),
        pruning_row(8, "measured", "low_rank", 2345.6, 0.2),
    ]
    section = landing_section(
        headline_table(
            headline_rows(
                "lm",
                "news",
                Tables(r2_table(["id"]), parameters(["id"]), pruning=pa.Table.from_pylist(rows)),
            )
        )
    )
    assert "blocks 3, 9, 14, 17, 20, 22, 24, 25, the 8 of lowest Block Influence" in section
    big = [pruning_row(8, "measured", "low_rank", 2345.6, 0.2)]
    tables = Tables(r2_table(["id"]), parameters(["id"]), pruning=pa.Table.from_pylist(big))
    assert "**2,346** (95% interval 2,346–2,346" in landing_section(
        headline_table(headline_rows("lm", "news", tables))
    )


def test_the_pruning_table_is_a_source_only_where_pruning_ran():
    plain = headline_sources("lm", "news", True)
    assert "pruning" not in plain and headline_sources("lm", "news", True, False) == plain
    pruned = headline_sources("lm", "news", True, pruning=True)
    assert pruned == {**plain, "pruning": "results/metrics/lm/news/pruning_selected.parquet"}
    assert set(headline_sources("enc", "news", False, True)) == {"r2", "parameters", "pruning"}


def test_the_headline_stage_reads_the_pruning_table_of_the_pairs_that_name_it(
    tmp_path, monkeypatch
):
    from jtc.stages.report import headline_table as stage

    monkeypatch.chdir(tmp_path)
    methods = ["id", "mat"]
    for model in ("lm", "enc"):
        sources = headline_sources(model, "news", False, pruning=model == "lm")
        tables = {"r2": r2_table(methods), "parameters": parameters(methods)}
        tables["pruning"] = pruning_selected()
        for name, path in sources.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            write_table(tables[name], path)
    out, landing = tmp_path / "headline.parquet", tmp_path / "landing.rst"
    # a pair with the pruning flag, and one without it (as the workflow passed them before)
    stage([["lm", "news", False, True], ["enc", "news", False]], "Title\n=====\n", out, landing)
    rows = {(r["model"], r["method"]): r for r in read_table(out).to_pylist()}
    assert rows[("lm", "mat")]["pruning_variant"] == "replaceme"
    assert rows[("enc", "mat")]["pruning_variant"] is None
    text = landing.read_text()
    assert text.startswith("Title\n=====\n\n") and text.count("Depth pruning.") == 1


def test_the_landing_page_names_underdetermined_pruning_and_a_tie():
    extra = {"calibration_tokens": 352, "underdetermined": True, "tied": 21}
    rows = [
        pruning_row(8, "angular_distance", "drop", 2.5, 0.81) | extra | {"underdetermined": False},
        pruning_row(8, "measured", "replaceme", 1.3, 0.9, start=1) | extra,
    ]
    tables = Tables(r2_table(["id"]), parameters(["id"]), pruning=pa.Table.from_pylist(rows))
    row = headline_rows("lm", "news", tables)[0]
    assert row["pruning_underdetermined_variants"] == "replaceme"
    assert (row["pruning_tied"], row["pruning_calibration_tokens"]) == (21, 352)
    html = rendered(landing_section(headline_table([row])))
    assert "System Message" not in html
    assert "tied across 21 spans" in html
    assert "the replaceme maps were fitted on 352 calibration tokens, fewer than the width" in html
    assert "lm on news (depth pruning: replaceme on calibration tokens)" in html
