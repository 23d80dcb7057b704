"""The planning note for fits on too few training rows per coefficient: named with the sizes
that reach 4, only where the rows and the width are known before any job."""

import copy

from configs import BASE

from jtc.pipeline.config import validate_config
from jtc.pipeline.planning import rows_note


def config(train, positions, methods=("id", "mat")):
    cfg = copy.deepcopy(BASE)
    cfg.update(sizes={"train": train}, positions_per_sentence=positions, methods=list(methods))
    return validate_config(cfg)


def test_qwen_15b_at_three_positions_is_flagged_with_the_sizes_that_reach_four():
    """800 sentences × 3 positions at width 1,536: 1.6 rows per coefficient; 2,048 sentences or
    8 positions a sentence reach 4 × 1,536 = 6,144 rows."""
    note = rows_note(config(800, 3), {"qwen-1_5b": 1536, "smollm2": 576})
    assert note is not None
    (line,) = [x for x in note.splitlines() if x.startswith("- ")]
    assert line == (
        "- qwen-1_5b: 800 training sentences × 3 positions = 2400 rows at width 1536, 1.6 rows "
        "per coefficient; sizes.train 2048 or positions_per_sentence 8 (or all, every token) "
        "reaches 4"
    )  # smollm2's 2,400 rows are 4.2 a coefficient: not named


def test_no_note_where_the_rows_or_the_width_are_not_known_or_suffice():
    assert rows_note(config(800, "all"), {"m": 1536}) is None  # the fit counts the tokens
    assert rows_note(config(800, 3), {"m": None}) is None  # a GGUF file before resolve_model
    assert rows_note(config(2048, 3), {"m": 1536}) is None  # 6,144 rows: 4 a coefficient
    assert rows_note(config(800, 3, methods=["id"]), {"m": 1536}) is None  # nothing is fitted
