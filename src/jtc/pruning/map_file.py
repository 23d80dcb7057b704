"""The span maps file of depth pruning: one safetensors file per model and corpus
(results/pruning/{model}/{corpus}/maps.safetensors) holding every span's map, tensors
`{variant}.start_{i}.length_{n}.{part}` with the parts of jtc.shortcuts.maps.ShortcutMap,
written by calibrate_pruning and read by run_pruned and the export (numpy, no torch)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np

from jtc.files.io import CorruptFileError
from jtc.files.tensors import read_tensor_file
from jtc.pruning.fits import SpanFit
from jtc.shortcuts.maps import PARTS, ShortcutMap, _MapFileWriter

SPAN_FORMAT = "jtc-span-maps-v1"


def span_tensor_name(variant: str, start: int, length: int, part: str) -> str:
    """The tensor of one part of a span map: `{variant}.start_{i}.length_{n}.{part}`."""
    return f"{variant}.start_{start}.length_{length}.{part}"


class SpanMapWriter(_MapFileWriter):
    """Writes the span maps of depth pruning (jtc.pruning.fits): add(variant, start,
    length, tensors by part name). For replaceme the map applies to block `start`'s
    feed-forward output X: h_{start+length} = h_start - X + pred(X)."""

    format = SPAN_FORMAT
    convention = "pred = up(down(h)) or h @ weight.T; replaceme: h_(i+n) = h_i - X_i + pred(X_i)"

    def add(self, variant: str, start: int, length: int, tensors: Mapping[str, np.ndarray]) -> None:
        ShortcutMap(tensors)  # refuse an unknown or incomplete set of parts before writing
        for part, value in sorted(tensors.items()):
            self._tensors.add(span_tensor_name(variant, start, length, part), value)


def save_span_maps(
    path: str | Path, fits: Iterable[SpanFit], metadata: Mapping[str, object]
) -> None:
    """Store the map of every fit that has one (drop has none), in the order given."""
    with SpanMapWriter(path, metadata) as writer:
        for fit in fits:
            if fit.tensors:
                writer.add(fit.variant, fit.start, fit.length, fit.tensors)


def _span_map(path: str | Path, parts: dict[str, np.ndarray]) -> ShortcutMap:
    try:
        return ShortcutMap(parts)
    except CorruptFileError as exc:
        raise CorruptFileError(f"{path}: {exc}") from None


def load_span_maps(
    path: str | Path, wanted: Callable[[str, int, int], bool]
) -> dict[tuple[str, int, int], ShortcutMap]:
    """{(variant, start, length): map} of a file written by SpanMapWriter: those `wanted`
    accepts (it is asked about every tensor of the file; the others are not read)."""

    def key(name: str) -> tuple[str, int, int, str]:
        variant, start, length, part = (name.split(".", 3) + ["", "", ""])[:4]
        if not (
            start.startswith("start_")
            and start[6:].isdigit()
            and length.startswith("length_")
            and length[7:].isdigit()
            and part in PARTS
        ):
            raise CorruptFileError(f"{path}: unexpected tensor '{name}'")
        return variant, int(start[6:]), int(length[7:]), part

    tensors, _ = read_tensor_file(path, SPAN_FORMAT, "span map", lambda n: wanted(*key(n)[:3]))
    grouped: dict[tuple[str, int, int], dict[str, np.ndarray]] = {}
    for name, value in tensors.items():
        variant, start, length, part = key(name)
        grouped.setdefault((variant, start, length), {})[part] = value
    return {k: _span_map(path, parts) for k, parts in sorted(grouped.items())}


def load_span_map(path: str | Path, variant: str, start: int, length: int) -> ShortcutMap:
    """One span's map from a file written by SpanMapWriter; a ValueError naming the spans the
    file has for that variant when it has not this one."""
    key = (variant, start, length)
    seen: set[tuple[str | int, ...]] = set()

    def wanted(*span: str | int) -> bool:  # every span of the file is asked about
        seen.add(span)
        return span == key

    found = load_span_maps(path, wanted)
    if key in found:
        return found[key]
    spans = sorted((i, n) for v, i, n in seen if v == variant)
    have = ", ".join(f"start {i} length {n}" for i, n in spans) or "none"
    raise ValueError(
        f"{path} has no {variant} map for start {start}, length {length} (blocks "
        f"{start + 1}-{start + length}); its {variant} spans: {have}"
    )


def read_replaceme_map(path: str | Path, start: int, length: int) -> np.ndarray:
    """The ReplaceMe transform of a span (weight (d, d), new MLP output X @ weight.T), its
    checksum verified."""
    return load_span_map(path, "replaceme", start, length).tensors["weight"]
