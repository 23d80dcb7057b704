"""The runs of the chosen spans (jtc.pruning.runs.selected_runs): each set of blocks a rule
chose once per variant, consecutive ones with their variant, the others dropped; the sweep
(span_runs) no longer carries them."""

import pyarrow as pa

from jtc.pruning.runs import SpanRun, selected_runs, span_runs
from jtc.settings import SpanRunSettings


def test_selected_runs_are_each_chosen_set_once():
    rows = [
        ("measured", "mat", 3, "4-5"),
        ("angular_distance", "mat", 3, "4-5"),  # the same span: one run
        ("measured", "drop", 1, "2-3"),
        ("lowest_block_influence", "drop", -1, "2,5"),
    ]
    selection = pa.Table.from_pylist(
        [
            {
                "length": 2,
                "selection": rule,
                "variant": v,
                "start": s,
                "removed": r,
                "fraction_removed": 0.4,
            }
            for rule, v, s, r in rows
        ]  # fmt: skip
    )
    assert selected_runs(selection) == [
        SpanRun.span("mat", 3, 2),
        SpanRun.span("drop", 1, 2),
        SpanRun("drop", -1, 2, (2, 5)),
    ]
    sweep = span_runs(6, SpanRunSettings.defaults(lengths=[2], variants=["drop"]))
    assert all(run.start >= 0 for run in sweep) and len(sweep) == 5
