"""Synthetic r² and parameter tables of a five-layer model, as the report's headline reads them."""

import pyarrow as pa

from jtc.files.io import rows_table
from jtc.shortcuts.maps import PARAMETER_COLUMNS

LAST = 4  # layers 0..4: the middle layer is 2


def r2_table(methods):
    rows = [
        {"method": m, "source_layer": s, "target_layer": t, "r2": 0.1 * s + t / 100 + i / 1000}
        for i, m in enumerate(methods)
        for s in range(LAST)
        for t in range(s + 1, LAST + 1)
    ]
    return pa.Table.from_pylist(rows)


def parameters(methods):
    size = {"id": 0, "mat": 64, "njtc": 16}
    return rows_table(
        [{"method": m, "parameters": size[m], "share_of_mat": size[m] / 64} for m in methods],
        PARAMETER_COLUMNS,
    )
