"""Which models the literature's measures score (jtc.measures): the full model, and for every
pruning length and stand-in, the span one selection rule chose on calibration sentences
(selection.parquet; the rule is `pruning.export_selection`, so the exported checkpoint is among
them), then the stand-ins `pruning.also_measure` names at the span another rule chose (drop at
ShortGPT's or UIDL's blocks, "drop@block_influence"), each built in memory by
jtc.pruning.pruned.pruned_copy (dropped_copy for blocks that are not consecutive)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from torch import nn

from jtc.model.adapters import Adapter
from jtc.pruning.map_file import load_stand_in
from jtc.pruning.pruned import dropped_copy, pruned_copy
from jtc.pruning.spans import parse_removed

FULL = "full"


@dataclass(frozen=True)
class Subject:
    """One model measured: the full model (variant 'full', length 0), or blocks `removed`
    (1-based, "13-20"; "4,13,14" where not consecutive, start -1) taken out with `variant`
    standing in for them, the span `selection` chose. `also`: named by pruning.also_measure,
    so its name says its selection rule."""

    variant: str
    length: int
    start: int
    removed: str
    selection: str = ""
    also: bool = False

    @property
    def name(self) -> str:
        if self.variant == FULL:
            return FULL
        chosen = f" ({self.selection})" if self.also else ""
        return f"{self.variant}{chosen}, blocks {self.removed} removed"


FULL_MODEL = Subject(FULL, 0, -1, "")
SUBJECT_COLUMNS = {
    "variant": pa.string(),  # full, or the stand-in
    "length": pa.int64(),  # blocks removed (0: the full model)
    "start": pa.int64(),  # the last block kept before the span (-1: the full model)
    "removed": pa.string(),  # blocks removed, 1-based ("13-20"; "" for the full model)
    "selection": pa.string(),  # the rule that chose them ("" for the full model)
}
ALSO_SEPARATOR = "@"  # pruning.also_measure's entries: variant@selection


def measured_subjects(
    selection: pa.Table,
    rule: str,
    variants: Sequence[str] | None = None,
    also: Sequence[str] = (),
) -> list[Subject]:
    """The full model, then for each length (ascending) and stand-in (in `variants`' order, or
    the table's), the consecutive span `rule` chose (selection.parquet rows), then each
    "variant@selection" of `also` at the blocks that selection chose (consecutive or not)."""
    table = selection.to_pylist()
    rows = [r for r in table if r["selection"] == rule and r["start"] >= 0]
    order = (
        list(variants) if variants is not None else list(dict.fromkeys(r["variant"] for r in rows))
    )
    subjects = [
        (r["length"], order.index(r["variant"]), _subject(r, also=False))
        for r in rows
        if r["variant"] in order
    ]
    for rank, entry in enumerate(dict.fromkeys(also)):
        variant, chosen_by = entry.split(ALSO_SEPARATOR)
        subjects += [
            (r["length"], len(order) + rank, _subject(r, also=True))
            for r in table
            if (r["variant"], r["selection"]) == (variant, chosen_by)
        ]
    subjects.sort(key=lambda s: s[:2])
    return [FULL_MODEL] + [s[2] for s in subjects]


def _subject(row: dict, also: bool) -> Subject:
    return Subject(
        row["variant"],
        int(row["length"]),
        int(row["start"]),
        row["removed"],
        row["selection"],
        also,
    )


def subject_model(
    model: nn.Module, adapter: Adapter, subject: Subject, maps: str | Path
) -> nn.Module:
    """The model `subject` names: `model` itself for the full model, else a pruned copy with the
    span's map read from the span maps file `maps` (model is not changed)."""
    if subject.variant == FULL:
        return model
    if subject.start < 0:  # blocks that are not consecutive: only dropping them is defined
        return dropped_copy(model, adapter, parse_removed(subject.removed))
    stand_in = load_stand_in(maps, subject.variant, subject.start, subject.length)
    return pruned_copy(model, adapter, subject.variant, subject.start, subject.length, *stand_in)


def subject_columns(subject: Subject) -> dict[str, object]:
    """The SUBJECT_COLUMNS values of one subject, for a row of a measure's table."""
    return {
        "variant": subject.variant,
        "length": subject.length,
        "start": subject.start,
        "removed": subject.removed,
        "selection": subject.selection,
    }
