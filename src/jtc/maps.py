"""Shortcut map files: one safetensors file per method and source layer, holding the maps from
that layer to each target layer, and the one rule that applies any of them (numpy, no torch).

A map into target t is the set of tensors named `to_{t}.<part>`. Every method is a composition
of optional parts, applied in this order (torch.nn conventions: pred = h @ weight.T):

    norm.{weight,bias,running_mean,running_var}   batch normalisation at evaluation (N-NJTC)
    down.weight (r, d), up.weight (d, r)           a rank-r product (NJTC, N-NJTC)
    weight (d, d)                                  a full matrix (mat; the tuned lens's I + W)
    bias (d,)                                      an intercept (the tuned lens)

so the stages that use maps (r², prediction, early exit, examples, the API) contain no
method-specific code: id is no map at all, everything else is a ShortcutMap.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from .io import CorruptFileError, atomic_path, rows_table

FORMAT = "jtc-shortcut-v1"
NORM_PARTS = ("norm.weight", "norm.bias", "norm.running_mean", "norm.running_var")
TRAINED_BUFFERS = ("norm.running_mean", "norm.running_var")  # stored, but not trained
PARTS = (*NORM_PARTS, "down.weight", "up.weight", "weight", "bias")
DEFAULT_NORM_EPS = 1e-5
# metadata key: {tensor name: sha256 of its name, dtype, shape and bytes}; safetensors itself has
# no checksum, so every reader verifies the tensors it reads against these
CHECKSUMS = "checksums"


def _digest(name: str, value: np.ndarray) -> str:
    value = np.ascontiguousarray(value)
    digest = hashlib.sha256(f"{name}|{value.dtype.str}|{value.shape}|".encode())
    digest.update(value.tobytes())
    return digest.hexdigest()


def _write(path: str | Path, tensors: dict[str, np.ndarray], meta: dict[str, str]) -> None:
    """Write tensors with their checksums in the metadata, atomically."""
    meta = {**meta, CHECKSUMS: json.dumps({n: _digest(n, v) for n, v in sorted(tensors.items())})}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta)


def _verified(
    path: str | Path, name: str, value: np.ndarray, meta: Mapping[str, str]
) -> np.ndarray:
    """A tensor read from `path`, checked against the checksum its file stores for it."""
    try:
        expected = json.loads(meta[CHECKSUMS])[name]
    except (KeyError, TypeError, ValueError):
        raise CorruptFileError(
            f"{path}: no checksum for tensor '{name}' (damaged, or written by an older jtc): "
            "delete it and rerun the workflow to rebuild it"
        ) from None
    if _digest(name, value) != expected:
        raise CorruptFileError(
            f"{path}: tensor '{name}' does not match its checksum (the file is damaged): "
            "delete it and rerun the workflow to rebuild it"
        )
    return value


@dataclass(frozen=True)
class ShortcutMap:
    """One fitted map from a source layer's states to a target layer's."""

    tensors: Mapping[str, np.ndarray]
    norm_eps: float = DEFAULT_NORM_EPS

    def __post_init__(self) -> None:
        unknown = sorted(set(self.tensors) - set(PARTS))
        if unknown:
            raise CorruptFileError(f"unknown shortcut map parts {unknown}; known: {list(PARTS)}")
        norm = [p for p in NORM_PARTS if p in self.tensors]
        if norm and len(norm) != len(NORM_PARTS):
            raise CorruptFileError(f"incomplete batch normalisation: has only {norm}")
        if ("down.weight" in self.tensors) != ("up.weight" in self.tensors):
            raise CorruptFileError("a low-rank map needs both down.weight and up.weight")
        if "weight" in self.tensors and "down.weight" in self.tensors:
            raise CorruptFileError("a map has either weight or down/up, not both")

    def _get(self, name: str) -> np.ndarray | None:
        value = self.tensors.get(name)
        return None if value is None else np.asarray(value, dtype=np.float64)

    def __call__(self, states: np.ndarray) -> np.ndarray:
        """The predicted target states (float64) of source states (n, d)."""
        h = np.asarray(states, dtype=np.float64)
        if "norm.weight" in self.tensors:
            scale, shift = self._norm_affine()
            h = h * scale + shift
        if "down.weight" in self.tensors:
            h = (h @ self._get("down.weight").T) @ self._get("up.weight").T
        elif "weight" in self.tensors:
            h = h @ self._get("weight").T
        bias = self._get("bias")
        return h if bias is None else h + bias

    def _norm_affine(self) -> tuple[np.ndarray, np.ndarray]:
        """Batch normalisation with running statistics as h * scale + shift."""
        scale = self._get("norm.weight") / np.sqrt(self._get("norm.running_var") + self.norm_eps)
        return scale, self._get("norm.bias") - self._get("norm.running_mean") * scale

    def affine(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The same map as (weight (d_out, d_in), bias or None): pred = h @ weight.T + bias.
        Every part is affine at evaluation, so every method has this form."""
        if "down.weight" in self.tensors:
            weight = self._get("up.weight") @ self._get("down.weight")
        elif "weight" in self.tensors:
            weight = self._get("weight")
        else:
            weight = np.eye(self.width)
        bias = self._get("bias")
        if "norm.weight" in self.tensors:
            scale, shift = self._norm_affine()
            bias = shift @ weight.T + (0.0 if bias is None else bias)
            weight = weight * scale
        return weight, bias

    @property
    def width(self) -> int:
        for name in ("weight", "down.weight", "norm.weight"):
            if name in self.tensors:
                return int(np.shape(self.tensors[name])[-1])
        raise CorruptFileError("an empty shortcut map")

    @property
    def rank(self) -> int | None:
        down = self.tensors.get("down.weight")
        return None if down is None else int(np.shape(down)[0])

    def parameter_counts(self) -> tuple[int, int]:
        """(trained parameters, stored buffers such as running statistics)."""
        buffers = sum(int(np.size(self.tensors[n])) for n in TRAINED_BUFFERS if n in self.tensors)
        total = sum(int(np.size(t)) for t in self.tensors.values())
        return total - buffers, buffers


def save_maps(
    path: str | Path,
    maps: Mapping[int, np.ndarray | Mapping[str, np.ndarray]],
    metadata: Mapping[str, object],
) -> None:
    """Store one source layer's maps, {target layer: tensors by part name}; a bare array is a
    full matrix (`weight`)."""
    tensors = {}
    for target, parts in sorted(maps.items()):
        parts = {"weight": parts} if isinstance(parts, np.ndarray) else parts
        ShortcutMap(parts)  # refuse an unknown or incomplete set of parts before writing
        for name, value in parts.items():
            tensors[f"to_{target}.{name}"] = np.ascontiguousarray(value, dtype=np.float32)
    meta = {
        "format": FORMAT,
        "convention": "pred = up(down(norm(h))) + bias, or h @ weight.T + bias",
        "targets": json.dumps(sorted(maps)),
    }
    meta.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in metadata.items()})
    _write(path, tensors, meta)


def _split_name(path: str | Path, name: str) -> tuple[int, str]:
    target, _, part = name.partition(".")
    if not (target.startswith("to_") and target[3:].isdigit() and part in PARTS):
        raise CorruptFileError(f"{path}: unexpected tensor '{name}'")
    return int(target[3:]), part


def _read(path: str | Path, target: int | None) -> tuple[dict[int, dict[str, np.ndarray]], dict]:
    try:
        with safe_open(str(path), framework="numpy") as handle:
            meta = handle.metadata() or {}
            grouped: dict[int, dict[str, np.ndarray]] = {}
            for name in handle.keys():
                t, part = _split_name(path, name)
                if target is None or t == target:
                    value = _verified(path, name, handle.get_tensor(name), meta)
                    grouped.setdefault(t, {})[part] = value
    except (SafetensorError, OSError, ValueError) as exc:
        raise CorruptFileError(f"cannot read shortcut maps {path}: {exc}") from exc
    return grouped, meta


def _to_map(path: str | Path, parts: dict[str, np.ndarray], meta: dict) -> ShortcutMap:
    try:
        return ShortcutMap(parts, float(meta.get("norm_eps", DEFAULT_NORM_EPS)))
    except CorruptFileError as exc:
        raise CorruptFileError(f"{path}: {exc}") from None


def load_maps(path: str | Path) -> dict[int, ShortcutMap]:
    """{target layer: map} from a file written by save_maps."""
    grouped, meta = _read(path, None)
    return {t: _to_map(path, parts, meta) for t, parts in sorted(grouped.items())}


def load_map(path: str | Path, target: int) -> ShortcutMap:
    """The one map into `target` from a file written by save_maps."""
    grouped, meta = _read(path, target)
    if target not in grouped:
        raise CorruptFileError(f"{path}: holds no map to layer {target}")
    return _to_map(path, grouped[target], meta)


def to_last_layer(files: list[str], source: int, states: np.ndarray, last: int) -> np.ndarray:
    """States of layer `source` mapped to the last layer by a method's map files, one per
    source layer (none: id, the states as they are)."""
    if source == last or not files:
        return states
    return load_map(files[source], last)(states)


PARAMETER_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "method": pa.string(),
    "hidden_size": pa.int64(),
    "rank": pa.int64(),
    "parameters": pa.int64(),  # trained, per map (one layer pair)
    "buffers": pa.int64(),  # stored but not trained (batch normalisation's running statistics)
    "share_of_mat": pa.float64(),  # (parameters + buffers) / d²
}


def parameter_table(
    files: Mapping[str, str | Path], *, num_layers: int, width: int, model: str, corpus: str
) -> pa.Table:
    """Parameters of one map per method (`files`: its map file from layer 0, read for the map
    into the last layer), beside id's none and mat's d²."""
    common = {"model": model, "corpus": corpus}
    rows: list[dict[str, object]] = [
        {
            **common,
            "method": "id",
            "hidden_size": width,
            "parameters": 0,
            "buffers": 0,
            "share_of_mat": 0.0,
        }
    ]
    for method, path in sorted(files.items()):
        shortcut = load_map(path, num_layers)
        parameters, buffers = shortcut.parameter_counts()
        rows.append(
            {
                **common,
                "method": method,
                "hidden_size": shortcut.width,
                "rank": shortcut.rank,
                "parameters": parameters,
                "buffers": buffers,
                "share_of_mat": (parameters + buffers) / shortcut.width**2,
            }
        )
    return rows_table(rows, PARAMETER_COLUMNS)


def read_metadata(path: str | Path) -> dict[str, object]:
    """A map file's metadata, numbers and lists decoded from their JSON text."""
    _, meta = _read(path, -1)
    decoded: dict[str, object] = {}
    for key, text in meta.items():
        try:
            decoded[key] = json.loads(text)
        except ValueError:
            decoded[key] = text
    return decoded


# --- sub-module maps: one file per block, a full matrix per part -------------------------------

PART_FORMAT = "jtc-part-maps-v1"


def save_part_maps(
    path: str | Path, weights: Mapping[tuple[int, str], np.ndarray], metadata: Mapping[str, object]
) -> None:
    """Store {(block 1..L, part name): weight (d_out, d_in)} as tensors `block_{b}.{part}`."""
    tensors = {
        f"block_{block}.{part}": np.ascontiguousarray(w, dtype=np.float32)
        for (block, part), w in sorted(weights.items())
    }
    meta = {"format": PART_FORMAT, "convention": "part output = part input @ weight.T"}
    meta.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in metadata.items()})
    _write(path, tensors, meta)


def load_part_maps(
    paths: str | Path | Sequence[str | Path],
) -> dict[tuple[int, str], ShortcutMap]:
    """{(block, part): map} from one or several files written by save_part_maps."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    maps: dict[tuple[int, str], ShortcutMap] = {}
    for path in paths:
        maps.update(_read_part_maps(path))
    return maps


def _read_part_maps(path: str | Path) -> dict[tuple[int, str], ShortcutMap]:
    maps: dict[tuple[int, str], ShortcutMap] = {}
    try:
        with safe_open(str(path), framework="numpy") as handle:
            meta = handle.metadata() or {}
            if meta.get("format") != PART_FORMAT:
                raise CorruptFileError(f"{path}: not a sub-module map file ({PART_FORMAT})")
            for name in handle.keys():
                block, _, part = name.partition(".")
                if not (block.startswith("block_") and block[6:].isdigit() and part):
                    raise CorruptFileError(f"{path}: unexpected tensor '{name}'")
                weight = _verified(path, name, handle.get_tensor(name), meta)
                maps[(int(block[6:]), part)] = ShortcutMap({"weight": weight})
    except (SafetensorError, OSError, ValueError) as exc:
        raise CorruptFileError(f"cannot read sub-module maps {path}: {exc}") from exc
    return maps
