"""run_benchmarks' documents table (jtc.measures.benchmarks.DOCUMENT_COLUMNS) built by hand, for
the tests of the tables made from it."""

from __future__ import annotations

from collections.abc import Callable, Collection

import pyarrow as pa

from jtc.measures.benchmarks import DOCUMENT_COLUMNS
from jtc.measures.subjects import Subject, subject_columns


def documents_table(
    scores: dict[tuple[str, str], list],
    subjects: dict[str, Subject],
    choices: Callable[[str, int], int],
    norm: Collection[str] | None = None,
) -> pa.Table:
    """(variant, task) -> acc per document, each variant one of `subjects`; acc_norm the same
    (on every task, or on those in `norm` and null on the others); `choices(task, doc)`."""
    rows = [
        {
            **subject_columns(subjects[v]),
            "task": t,
            "split": "validation",
            "shots": 0,
            "doc_id": d,
            "acc": a,
            "acc_norm": a if norm is None or t in norm else None,
            "choices": choices(t, d),
        }
        for (v, t), values in scores.items()
        for d, a in enumerate(values)
    ]
    return pa.Table.from_pylist(rows, pa.schema(DOCUMENT_COLUMNS))
