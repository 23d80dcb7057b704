"""The measures' tables (jtc.measures.tables): token-weighted means per subject, windows and
prompts counted, and paired bootstrap intervals that hold the mean."""

import numpy as np
import pyarrow as pa
import pytest

from jtc.measures.tables import context_table, generation_table
from jtc.settings import IntervalSettings

INTERVALS = IntervalSettings(top_k=(1,), bootstrap=200, confidence_level=0.9)
SUBJECTS = [("full", 0, -1, "", ""), ("drop", 2, 1, "2-3", "measured")]


def windows() -> pa.Table:
    rng = np.random.default_rng(0)
    rows = []
    full = rng.uniform(10, 20, size=5)
    for variant, length, start, removed, selection in SUBJECTS:
        for w in range(5):
            ce = full[w] * (1.0 if variant == "full" else 1.5)
            rows.append(
                {"context": 8, "variant": variant, "length": length, "start": start,
                 "removed": removed, "selection": selection, "window": w, "tokens": 7,
                 "cross_entropy": ce, "cross_entropy_full": full[w],
                 "agreement": 7 if variant == "full" else 3, "windows_wanted": 6}
            )  # fmt: skip
    return pa.Table.from_pylist(rows)


def test_context_table():
    table = context_table(windows(), INTERVALS, 0, model="m", corpus="c").to_pylist()
    full, drop = table
    assert full["variant"] == "full" and full["perplexity_ratio"] == pytest.approx(1.0)
    assert full["top1_agreement"] == 1.0 and full["windows"] == 5 and full["windows_wanted"] == 6
    ce_full = sum(r["cross_entropy_full"] for r in windows().to_pylist()[:5]) / 35
    assert drop["cross_entropy"] == pytest.approx(1.5 * ce_full)
    assert drop["perplexity_ratio"] == pytest.approx(np.exp(0.5 * ce_full))
    assert drop["top1_agreement"] == pytest.approx(3 / 7) and drop["tokens"] == 35
    assert drop["perplexity_ratio_low"] <= drop["perplexity_ratio"] <= drop["perplexity_ratio_high"]


def test_generation_table():
    rows = [
        {"variant": v, "length": n, "start": s, "removed": r, "selection": c, "sentence_id": p,
         "prompt_tokens": 5, "new_tokens": 4, "first_difference": 4 if v == "full" else p,
         "agreement": 4 if v == "full" else p + 1 - (p == 4)}
        for v, n, s, r, c in SUBJECTS
        for p in range(5)
    ]  # fmt: skip
    full, drop = generation_table(
        pa.Table.from_pylist(rows), INTERVALS, 0, model="m", corpus="c"
    ).to_pylist()
    assert (full["first_difference"], full["agreement_share"], full["identical_share"]) == (
        4.0, 1.0, 1.0,
    )  # fmt: skip
    assert drop["prompts"] == 5 and drop["new_tokens"] == 4
    assert drop["first_difference"] == pytest.approx(2.0)
    assert drop["agreement_share"] == pytest.approx(14 / 20)
    assert drop["identical_share"] == pytest.approx(1 / 5)
    assert drop["first_difference_low"] <= 2.0 <= drop["first_difference_high"]
