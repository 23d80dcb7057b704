"""Which models the literature's measures score (jtc.measures): the full model, and for every
pruning length and stand-in, the span one selection rule chose on calibration sentences
(selection.parquet; the rule is `pruning.export_selection`, so the exported checkpoint is among
them), each built in memory by jtc.pruning.pruned.pruned_copy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from torch import nn

from jtc.model.adapters import Adapter
from jtc.pruning.map_file import load_stand_in
from jtc.pruning.pruned import pruned_copy

FULL = "full"


@dataclass(frozen=True)
class Subject:
    """One model measured: the full model (variant 'full', length 0), or blocks `removed`
    (1-based, "13-20") taken out with `variant` standing in for them."""

    variant: str
    length: int
    start: int
    removed: str

    @property
    def name(self) -> str:
        if self.variant == FULL:
            return FULL
        return f"{self.variant}, blocks {self.removed} removed"


FULL_MODEL = Subject(FULL, 0, -1, "")
SUBJECT_COLUMNS = {
    "variant": pa.string(),  # full, or the stand-in
    "length": pa.int64(),  # blocks removed (0: the full model)
    "start": pa.int64(),  # the last block kept before the span (-1: the full model)
    "removed": pa.string(),  # blocks removed, 1-based ("13-20"; "" for the full model)
}


def measured_subjects(
    selection: pa.Table, rule: str, variants: Sequence[str] | None = None
) -> list[Subject]:
    """The full model, then for each length (ascending) and stand-in (in `variants`' order, or
    the table's), the consecutive span `rule` chose (selection.parquet rows)."""
    rows = [r for r in selection.to_pylist() if r["selection"] == rule and r["start"] >= 0]
    order = (
        list(variants) if variants is not None else list(dict.fromkeys(r["variant"] for r in rows))
    )
    rows = [r for r in rows if r["variant"] in order]
    rows.sort(key=lambda r: (r["length"], order.index(r["variant"])))
    return [FULL_MODEL] + [
        Subject(r["variant"], int(r["length"]), int(r["start"]), r["removed"]) for r in rows
    ]


def subject_model(
    model: nn.Module, adapter: Adapter, subject: Subject, maps: str | Path
) -> nn.Module:
    """The model `subject` names: `model` itself for the full model, else a pruned copy with the
    span's map read from the span maps file `maps` (model is not changed)."""
    if subject.variant == FULL:
        return model
    stand_in = load_stand_in(maps, subject.variant, subject.start, subject.length)
    return pruned_copy(model, adapter, subject.variant, subject.start, subject.length, *stand_in)


def subject_columns(subject: Subject) -> dict[str, object]:
    """The SUBJECT_COLUMNS values of one subject, for a row of a measure's table."""
    return {
        "variant": subject.variant,
        "length": subject.length,
        "start": subject.start,
        "removed": subject.removed,
    }
