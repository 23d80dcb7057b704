"""The span maps file of depth pruning: one safetensors file per model and corpus
(results/pruning/{model}/{corpus}/maps.safetensors) holding every span's map, tensors
`{variant}.start_{i}.length_{n}.{part}` with the parts of jtc.shortcuts.maps.ShortcutMap,
written by calibrate_pruning and read by run_pruned and the export (numpy, no torch). Its
metadata names the model the maps were fitted on, `model` and `model_fingerprint` (its cached
weights' digest, jtc.model.manifest.model_fingerprint), which the export checks against the
model it prunes (`model_problem`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np

from jtc.files.io import CorruptFileError, read_json
from jtc.files.tensors import read_tensor_file
from jtc.model.manifest import model_fingerprint
from jtc.pruning.fits import SpanFit
from jtc.pruning.variants import ROTATION_PART, variant_of
from jtc.shortcuts.maps import PARTS, ShortcutMap, _MapFileWriter, decoded_metadata

SPAN_FORMAT = "jtc-span-maps-v1"
MODEL_FINGERPRINT = "model_fingerprint"  # the metadata key of the fitted model's fingerprint


def span_tensor_name(variant: str, start: int, length: int, part: str) -> str:
    """The tensor of one part of a span map: `{variant}.start_{i}.length_{n}.{part}`."""
    return f"{variant}.start_{start}.length_{length}.{part}"


class SpanMapWriter(_MapFileWriter):
    """Writes the span maps of depth pruning (jtc.pruning.fits): add(variant, start,
    length, tensors by part name). For replaceme the map applies to block `start`'s
    feed-forward output X: h_{start+length} = h_start - X + pred(X); low_rank's predicts the
    difference: h_{start+length} = h_start + pred(h_start); rotation's `weight` is (s·Q)ᵀ, Q
    orthogonal: h_{start+length} = pred(h_start) = s·h_start Q (jtc.pruning.rotate splits it);
    rotation_replaceme's `weight` is ReplaceMe's Tᵀ and its part `rotation` (s·Q)ᵀ:
    h_{start+length} = s·(h_start - X + pred(X)) Q."""

    format = SPAN_FORMAT
    convention = (
        "pred = up(down(h)) or h @ weight.T; replaceme: h_(i+n) = h_i - X_i + pred(X_i); "
        "low_rank: h_(i+n) = h_i + pred(h_i); rotation: weight = (s Q)^T, h_(i+n) = pred(h_i); "
        "rotation_replaceme: h_(i+n) = (h_i - X_i + pred(X_i)) @ rotation"
    )

    def add(self, variant: str, start: int, length: int, tensors: Mapping[str, np.ndarray]) -> None:
        # refuse an unknown or incomplete set of parts before writing
        ShortcutMap({k: v for k, v in tensors.items() if k != ROTATION_PART})
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
            and (part in PARTS or part == ROTATION_PART)
        ):
            raise CorruptFileError(f"{path}: unexpected tensor '{name}'")
        return variant, int(start[6:]), int(length[7:]), part

    tensors, _ = read_tensor_file(path, SPAN_FORMAT, "span map", lambda n: wanted(*key(n)[:3]))
    grouped: dict[tuple[str, int, int], dict[str, np.ndarray]] = {}
    for name, value in tensors.items():
        variant, start, length, part = key(name)
        grouped.setdefault((variant, start, length), {})[part] = value
    return {
        k: _span_map(path, {p: v for p, v in parts.items() if p != ROTATION_PART})
        for k, parts in sorted(grouped.items())
    }


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


def load_stand_in(
    path: str | Path, variant: str, start: int, length: int
) -> tuple[ShortcutMap | None, np.ndarray | None]:
    """(map, rotation) of one span's stand-in: a variant without a map (drop) has neither
    (nothing is read); every other variant its map, and a rotated one (rotation_replaceme,
    jtc.pruning.variants) also its ROTATION_PART (s·Q)ᵀ."""
    record = variant_of(variant)
    if not record.has_map:
        return None, None
    span_map = load_span_map(path, variant, start, length)
    if not record.rotated:
        return span_map, None
    name = span_tensor_name(variant, start, length, ROTATION_PART)
    tensors, _ = read_tensor_file(path, SPAN_FORMAT, "span map", lambda n: n == name)
    if name not in tensors:
        raise CorruptFileError(
            f"{path}: the {variant} map of start {start}, length {length} "
            f"has no '{ROTATION_PART}' part: rerun calibrate_pruning"
        )
    return span_map, tensors[name]


CALIBRATION_KEYS = ("corpus", "calibration_text", "calibration_tokens", "ridge", "rank")


def calibration_record(path: str | Path) -> dict[str, object]:
    """What the span maps file `path` was calibrated on (its metadata: the corpus, the text and
    its size in tokens, the ridge and the low-rank stand-in's rank), for pruning.json; a key an
    older file lacks is None."""
    _, meta = read_tensor_file(path, SPAN_FORMAT, "span map", lambda name: False)
    decoded = decoded_metadata(meta)
    return {key: decoded.get(key) for key in CALIBRATION_KEYS}


def model_problem(path: str | Path, model_dir: str | Path) -> str | None:
    """Why the span maps file `path` does not belong to the cached model `model_dir` (fitted on
    another model, or on an earlier copy of it whose weights differ, or written before map
    files recorded the model's fingerprint), naming both; None when it does."""
    _, meta = read_tensor_file(path, SPAN_FORMAT, "span map", lambda _name: False)
    name = read_json(Path(model_dir) / "info.json").get("name", Path(model_dir).name)
    fitted = meta.get("model", "unknown")
    instead = (
        f"pass the maps file that calibrate_pruning fitted on model '{name}' "
        f"(results/pruning/{name}/CORPUS/maps.safetensors; jtc prune --maps FILE)"
    )
    if MODEL_FINGERPRINT not in meta:
        return (
            f"{path} (maps fitted on model '{fitted}') does not record which model's weights "
            f"its maps were fitted on (written by an older jtc), so it cannot be checked "
            f"against model '{name}' ({model_dir}) being pruned: rerun calibrate_pruning for "
            f"model '{name}' (delete {path} and rerun the snakemake command) and {instead}"
        )
    want = model_fingerprint(model_dir)
    if meta[MODEL_FINGERPRINT] == want:
        return None
    return (
        f"{path} holds maps fitted on model '{fitted}' (weights fingerprint "
        f"{meta[MODEL_FINGERPRINT]}), not on model '{name}' being pruned ({model_dir}, "
        f"weights fingerprint {want}): {instead}"
        + (
            "; its weights changed since the maps were fitted: rerun calibrate_pruning"
            if fitted == name
            else ""
        )
    )
