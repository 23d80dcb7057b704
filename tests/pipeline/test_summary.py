"""The message a finished run ends with."""

import math

import pyarrow as pa
import pyarrow.parquet as pq

from jtc.pipeline.summary import problems, run_summary
from jtc.settings import CalibrationText


def write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def metric_row(method, layer, metric, mean, n):
    return {"method": method, "layer": layer, "metric": metric, "mean": mean, "n": n}


def test_the_summary_names_the_results_and_every_value_that_is_not_a_number(tmp_path):
    results = tmp_path / "results"
    bad, clean = results / "metrics/m/news", results / "metrics/m/wiki"
    write(bad / "r2.parquet", [{"method": "njtc", "r2": math.nan}, {"method": "mat", "r2": 0.5}])
    write(
        bad / "prediction.parquet",
        [
            metric_row("mat", 0, "precision@1", 0.2, 10),
            metric_row("mat", 0, "surprisal", 3.0, 7),  # 3 positions overflowed
            metric_row("id", 0, "precision@1", 0.1, 10),
            metric_row("id", 0, "surprisal", 5.0, 10),
        ],
    )
    write(
        bad / "submodules.parquet",
        [
            metric_row("mat_ln", 3, "diverged", 0.5, 10),
            metric_row("mat_ln", 6, "diverged", 0.1, 10),
            metric_row("mat_attn", 3, "diverged", 0.0, 10),
        ],
    )
    write(clean / "r2.parquet", [{"method": "mat", "r2": 0.5}])
    write(
        clean / "prediction.parquet",
        [metric_row("mat", 0, "precision@1", 0.2, 10), metric_row("mat", 0, "surprisal", 3, 10)],
    )
    found = problems(results, ["m"], ["news", "wiki"])
    assert found == [
        "m/news: r² is not a number for some pairs of njtc",
        "m/news: mat's mapped states overflowed (inf or NaN) at up to 3 of 10 positions of a "
        "layer, counted as misses",
        "m/news: runs with mat_ln overflowed (inf or NaN) after 2 jump layers (up to 50% of "
        "positions), counted as misses (submodules.csv, metric diverged)",
    ]
    assert problems(results, ["m"], ["wiki"]) == []
    message = run_summary(results, ["m"], ["wiki", "absent"])
    assert f"Tables: {results}/metrics/<model>/<corpus>/" in message
    assert f"--report {results}/report.html" in message and "note" not in message


def test_the_summary_names_underdetermined_pruning_and_tied_choices(tmp_path):
    results = tmp_path / "results"
    row = {"length": 8, "calibration_tokens": 352, "tied": 1, "underdetermined": False}
    write(
        results / "metrics/m/news/pruning_selected.parquet",
        [
            {**row, "selection": "measured", "variant": "drop"},
            {
                **row,
                "selection": "measured",
                "variant": "replaceme",
                "underdetermined": True,
                "tied": 21,
            },
            {
                **row,
                "selection": "angular_distance",
                "variant": "replaceme",
                "underdetermined": True,
            },
        ],  # fmt: skip
    )
    parameters = {"method": "id", "hidden_size": 576, "underdetermined": False}
    write(results / "metrics/m/news/parameters.parquet", [parameters])
    found = problems(results, ["m"], ["news"])
    assert found == [
        "m/news: depth pruning's replaceme maps fitted on 352 calibration tokens, fewer than the "
        "width 576: underdetermined, they reproduce the calibration tokens, so `measured` "
        "cannot tell the spans apart and the maps are fitted to noise (pruning_selected.csv, "
        f"underdetermined; {CalibrationText.MORE_TEXT})",
        "m/news: depth pruning's choice was a tie, broken by the angular distance: measured for "
        "replaceme at length 8 (21 spans) (pruning_selected.csv, tied, tied_removed)",
    ]
    assert "jtc: note: m/news: depth pruning's replaceme maps" in run_summary(
        results, ["m"], ["news"]
    )
