"""Which models the literature's measures and the benchmarks run (jtc.measures.subjects): every
variant at the span export_selection chose, then each pruning.also_measure entry at the blocks
its rule chose, consecutive or not."""

import pyarrow as pa

from jtc.measures.subjects import FULL_MODEL, measured_subjects, subject_columns


def selection_table() -> pa.Table:
    rows = []
    for length, spans in ((2, {"measured": 3, "block_influence": 1}), (4, {"measured": 2})):
        for variant in ("drop", "mat", "replaceme"):
            for rule, start in spans.items():
                rows.append((length, rule, variant, start, f"{start + 1}-{start + length}"))
    rows.append((2, "lowest_block_influence", "drop", -1, "2,7"))
    names = ["length", "selection", "variant", "start", "removed"]
    return pa.table({name: [r[i] for r in rows] for i, name in enumerate(names)})


def test_every_variant_at_the_export_rule_then_the_other_rules_named():
    subjects = measured_subjects(
        selection_table(),
        "measured",
        ["replaceme", "drop"],
        ["drop@lowest_block_influence", "drop@block_influence"],
    )
    assert subjects[0] == FULL_MODEL
    got = [(s.length, s.variant, s.selection, s.start, s.removed) for s in subjects[1:]]
    assert got == [
        (2, "replaceme", "measured", 3, "4-5"),
        (2, "drop", "measured", 3, "4-5"),
        (2, "drop", "lowest_block_influence", -1, "2,7"),
        (2, "drop", "block_influence", 1, "2-3"),
        (4, "replaceme", "measured", 2, "3-6"),
        (4, "drop", "measured", 2, "3-6"),
    ]
    # only the subjects of another rule say it in their names; every row names its rule
    assert [s.name for s in subjects[1:4]] == [
        "replaceme, blocks 4-5 removed",
        "drop, blocks 4-5 removed",
        "drop (lowest_block_influence), blocks 2,7 removed",
    ]
    assert subject_columns(subjects[3])["selection"] == "lowest_block_influence"
    assert subject_columns(FULL_MODEL)["selection"] == ""
    # without also_measure: as before, the export rule's consecutive spans only
    plain = measured_subjects(selection_table(), "measured", ["drop"])
    assert [(s.variant, s.removed) for s in plain] == [
        ("full", ""),
        ("drop", "4-5"),
        ("drop", "3-6"),
    ]
