"""What a closed-form method's map file keeps (config `maps`): the maps into the last layer, the
ones later stages read, or every layer pair; and the type they are stored in. A file of every
pair grows with L²·d² (mat at 32 × 4,096: 35 GB in float32), one of the maps into the last layer
with L·d² (1.1 GB); r² of every pair is computed where the maps are fitted, so the r² table is
the same either way."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jtc.files.tensors import STORED_DTYPES

PAIRS = ("last", "all")
KEPT = "kept_pairs"  # map file metadata: the `pairs` setting the file was written with
STORED_R2 = "stored_r2"  # map file metadata: {"s->t": r² of the stored map}, when not float32


@dataclass(frozen=True)
class MapStorage:
    """`pairs`: "last" (the maps into the last layer) or "all"; `dtype`: float32, bfloat16 or
    float16 (jtc.files.tensors.STORED_DTYPES). The defaults keep every pair in float32, as a
    map file written outside the workflow (jtc.shortcuts.maps.save_maps) does."""

    pairs: str = "all"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.pairs not in PAIRS:
            raise ValueError(f"maps.pairs {self.pairs!r}: one of {', '.join(PAIRS)}")
        if self.dtype not in STORED_DTYPES:
            raise ValueError(f"maps.dtype {self.dtype!r}: one of {', '.join(STORED_DTYPES)}")

    @classmethod
    def of(cls, param: Mapping[str, Any]) -> MapStorage:
        """The settings of a rule's param (config `maps`)."""
        return cls(**dict(param))

    def keeps(self, target: int, last: int) -> bool:
        """Whether the map into `target` is written (the last layer is `last`)."""
        return self.pairs == "all" or target == last
