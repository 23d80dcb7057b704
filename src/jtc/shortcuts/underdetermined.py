"""Fits with fewer training rows than unknowns (torch-free): a map fitted on n training rows
whose output coordinates each depend on d > n inputs (the width of the states it maps from) is
underdetermined. Least squares then fits the training rows exactly (many maps do), and a
low-rank or trained map sees the same n rows in d dimensions: the held-out r² of such a map
measures overfitting, not how linear the model is. The fit stages record the rows in each map
file's metadata (TRAINING_ROWS) and warn; the table stages mark the maps (`underdetermined`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

log = logging.getLogger("jtc")

TRAINING_ROWS = "training_rows"  # map file metadata: the rows the maps were fitted on
_OLDER = "n_train"  # the same number, as map files written before TRAINING_ROWS name it


def underdetermined(rows: int | None, width: int | None) -> bool | None:
    """Whether a fit on `rows` training rows of `width` inputs has fewer rows than unknowns per
    output coordinate (None where either is unknown)."""
    if rows is None or width is None:
        return None
    return rows < width


def training_rows(metadata: Mapping[str, object]) -> int | None:
    """The training rows a map file's (decoded) metadata records, None if it records none."""
    rows = metadata.get(TRAINING_ROWS, metadata.get(_OLDER))
    return None if rows is None else int(rows)  # type: ignore[call-overload]


def message(model: str, corpus: str, method: str, rows: int, width: int) -> str:
    """The warning for an underdetermined fit, naming what was fitted and how to go on."""
    return (
        f"{model} on {corpus}, {method}: fitted on {rows} training rows, fewer than the width "
        f"{width} of the states it maps from (the inputs of one output coordinate): the fit is "
        f"underdetermined (a low-rank or trained map sees the same {rows} rows in {width} "
        "dimensions), it can reproduce its training rows and its held-out r² is dominated by "
        f"overfitting; set sizes.train to at least {width} (well above it for stable maps)"
    )


def warn_if_underdetermined(model: str, corpus: str, method: str, rows: int, width: int) -> bool:
    """Log the warning (logger "jtc") when a fit has fewer rows than its width; whether it did."""
    if underdetermined(rows, width):
        log.warning("%s", message(model, corpus, method, rows, width))
        return True
    return False
