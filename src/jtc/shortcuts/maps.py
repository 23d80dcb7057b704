"""Shortcut map files: one safetensors file per model, corpus and method, holding that method's
maps from every source layer to each of its target layers, and the one rule that applies any of
them (numpy, no torch).

A map from layer s into layer t is the set of tensors named `from_{s}.to_{t}.<part>`. Every
method is a composition of optional parts, applied in this order (torch.nn conventions:
pred = h @ weight.T):

    norm.{weight,bias,running_mean,running_var}   batch normalisation at evaluation (N-NJTC)
    down.weight (r, d), up.weight (d, r)           a rank-r product (NJTC, N-NJTC, rrr)
    weight (d, d)                                  a full matrix (mat; the tuned lens's I + W)
    bias (d,)                                      an intercept (the tuned lens)

so the stages that use maps (r², prediction, early exit, examples, the API) contain no
method-specific code: id is no map at all, everything else is a ShortcutMap. A file is written
one source layer at a time (MapWriter), so a job never holds more than one source's maps, and
read one map at a time (safetensors reads only the tensors asked for).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from jtc.files.io import CorruptFileError, rows_table
from jtc.files.tensors import TensorWriter, read_tensor_file
from jtc.shortcuts.storage import KEPT

FORMAT = "jtc-shortcuts-v2"  # v1: one file per source layer
NORM_PARTS = ("norm.weight", "norm.bias", "norm.running_mean", "norm.running_var")
TRAINED_BUFFERS = ("norm.running_mean", "norm.running_var")  # stored, but not trained
PARTS = (*NORM_PARTS, "down.weight", "up.weight", "weight", "bias")
DEFAULT_NORM_EPS = 1e-5


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

    def to_torch(self, dtype=None, device=None):
        """The map as a frozen torch.nn.Linear (its `affine` form; float32 unless `dtype`), to
        apply inside a torch model or to hooked activations: module(h) for h of shape (..., d)."""
        import torch

        weight, bias = self.affine()
        linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(weight))
            if bias is not None:
                linear.bias.copy_(torch.from_numpy(bias))
        return linear.requires_grad_(False).to(device=device, dtype=dtype or torch.float32)

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


MapsBySource = Mapping[int, Mapping[int, "np.ndarray | Mapping[str, np.ndarray]"]]


class _MapFileWriter:
    """A map file written a piece at a time inside a `with` block: it appears (atomically) only
    when the block ends without an error. Subclasses name the format and the tensors."""

    format: str
    convention: str

    def __init__(self, path: str | Path, metadata: Mapping[str, object], dtype: str = "float32"):
        self.path = Path(path)
        self.metadata = {**metadata, "dtype": dtype} if dtype != "float32" else dict(metadata)
        self._tensors = TensorWriter(path, dtype)

    def _layout(self) -> dict[str, object]:
        """Metadata that describes what was written (e.g. the layer pairs)."""
        return {}

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is not None:
            self._tensors.discard()
            return
        meta = {"format": self.format, "convention": self.convention, **self._layout()}
        meta.update(self.metadata)
        self._tensors.close(
            {k: v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()}
        )


class MapWriter(_MapFileWriter):
    """Writes one method's map file a source layer at a time:

    with MapWriter(path, {"method": "mat", ...}) as maps:
        maps.add(source, {target: tensors by part name, or a bare full matrix})
    """

    format = FORMAT
    convention = "pred = up(down(norm(h))) + bias, or h @ weight.T + bias"

    def __init__(self, path: str | Path, metadata: Mapping[str, object], dtype: str = "float32"):
        super().__init__(path, metadata, dtype)
        self.pairs: list[tuple[int, int]] = []

    def add(self, source: int, maps: Mapping[int, np.ndarray | Mapping[str, np.ndarray]]) -> None:
        """Store the maps from `source`, {target layer: parts}."""
        for target, parts in sorted(maps.items()):
            parts = {"weight": parts} if isinstance(parts, np.ndarray) else parts
            ShortcutMap(parts)  # refuse an unknown or incomplete set of parts before writing
            if not 0 <= source < target:
                raise ValueError(f"a map from layer {source} to layer {target}")
            for name, value in sorted(parts.items()):
                self._tensors.add(f"from_{source}.to_{target}.{name}", value)
            self.pairs.append((source, target))

    def _layout(self) -> dict[str, object]:
        return {"pairs": self.pairs}


def save_maps(path: str | Path, maps: MapsBySource, metadata: Mapping[str, object]) -> None:
    """Store a method's maps, {source layer: {target layer: tensors by part name}}; a bare array
    is a full matrix (`weight`)."""
    with MapWriter(path, metadata) as writer:
        for source, targets in sorted(maps.items()):
            writer.add(source, targets)


def _split_name(path: str | Path, name: str) -> tuple[int, int, str]:
    source, _, rest = name.partition(".")
    target, _, part = rest.partition(".")
    if not (
        source.startswith("from_")
        and source[5:].isdigit()
        and target.startswith("to_")
        and target[3:].isdigit()
        and part in PARTS
    ):
        raise CorruptFileError(f"{path}: unexpected tensor '{name}'")
    return int(source[5:]), int(target[3:]), part


def _read(
    path: str | Path, source: int | None, target: int | None
) -> tuple[dict[tuple[int, int], dict[str, np.ndarray]], dict]:
    """The tensors of the maps from `source` (None: every source) into `target` (None: every
    target), {(source, target): parts}, and the file's metadata."""

    def wanted(name: str) -> bool:
        s, t, _ = _split_name(path, name)
        return source in (None, s) and target in (None, t)

    tensors, meta = read_tensor_file(path, FORMAT, "shortcut map", wanted)
    grouped: dict[tuple[int, int], dict[str, np.ndarray]] = {}
    for name, value in tensors.items():
        s, t, part = _split_name(path, name)
        grouped.setdefault((s, t), {})[part] = value
    return grouped, meta


def _to_map(path: str | Path, parts: dict[str, np.ndarray], meta: dict) -> ShortcutMap:
    try:
        return ShortcutMap(parts, float(meta.get("norm_eps", DEFAULT_NORM_EPS)))
    except CorruptFileError as exc:
        raise CorruptFileError(f"{path}: {exc}") from None


def load_maps(path: str | Path, source: int) -> dict[int, ShortcutMap]:
    """{target layer: map} of the maps from `source` in a file written by MapWriter."""
    grouped, meta = _read(path, source, None)
    return {t: _to_map(path, parts, meta) for (_, t), parts in sorted(grouped.items())}


def load_map(path: str | Path, source: int, target: int) -> ShortcutMap:
    """The one map from `source` into `target` in a file written by MapWriter."""
    grouped, meta = _read(path, source, target)
    if (source, target) not in grouped:
        kept = (
            ""
            if meta.get(KEPT) != "last"
            else (
                " (it keeps the maps into the last layer only: config maps.pairs last; "
                "maps.pairs: all keeps every pair)"
            )
        )
        raise CorruptFileError(f"{path}: holds no map from layer {source} to layer {target}{kept}")
    return _to_map(path, grouped[(source, target)], meta)


def to_last_layer(
    path: str | Path | None, source: int, states: np.ndarray, last: int
) -> np.ndarray:
    """States of layer `source` mapped to the last layer by a method's map file (None: id, the
    states as they are)."""
    if source == last or path is None:
        return states
    return load_map(path, source, last)(states)


PARAMETER_COLUMNS = {
    "model": pa.string(),
    "corpus": pa.string(),
    "method": pa.string(),
    "hidden_size": pa.int64(),
    "rank": pa.int64(),
    "parameters": pa.int64(),  # trained, per map (one layer pair)
    "buffers": pa.int64(),  # stored but not trained (batch normalisation's running statistics)
    "share_of_mat": pa.float64(),  # (parameters + buffers) / d²
    # trained parameters of every distinct map into the last layer, from all layers (what early
    # exit keeps in memory): L maps for a per-layer method, 1 for one_jump
    "exit_parameters": pa.int64(),
}


def parameter_table(
    files: Mapping[str, str | Path], *, num_layers: int, width: int, model: str, corpus: str
) -> pa.Table:
    """Parameters of one map per method (`files`: its map file, read for the map from layer 0
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
            "exit_parameters": 0,
        }
    ]
    for method, path in sorted(files.items()):
        shortcut = load_map(path, 0, num_layers)
        parameters, buffers = shortcut.parameter_counts()
        # maps into the last layer, told apart by a digest of their bytes (not the bytes: L
        # d × d maps of a large model would be held at once); one_jump stores one L times
        distinct = {}
        for source in range(num_layers):
            into_last = load_map(path, source, num_layers)
            digest = hashlib.sha256()
            for name, tensor in sorted(into_last.tensors.items()):
                digest.update(name.encode())
                digest.update(np.ascontiguousarray(tensor).tobytes())
            distinct[digest.hexdigest()] = into_last.parameter_counts()[0]
        rows.append(
            {
                **common,
                "method": method,
                "hidden_size": shortcut.width,
                "rank": shortcut.rank,
                "parameters": parameters,
                "buffers": buffers,
                "share_of_mat": (parameters + buffers) / shortcut.width**2,
                "exit_parameters": sum(distinct.values()),
            }
        )
    return rows_table(rows, PARAMETER_COLUMNS)


def decoded_metadata(meta: Mapping[str, str]) -> dict[str, object]:
    """A map file's metadata as _MapFileWriter wrote it: numbers and lists decoded from their
    JSON text, strings as they are."""
    decoded: dict[str, object] = {}
    for key, text in meta.items():
        try:
            decoded[key] = json.loads(text)
        except ValueError:
            decoded[key] = text
    return decoded


def read_metadata(path: str | Path) -> dict[str, object]:
    """A map file's metadata, numbers and lists decoded from their JSON text."""
    _, meta = _read(path, -1, -1)
    return decoded_metadata(meta)


# --- sub-module maps: one file per model and corpus, a full matrix per block part -------------

PART_FORMAT = "jtc-part-maps-v1"


class PartMapWriter(_MapFileWriter):
    """Writes the sub-module map file a block at a time: add(block, {part name: weight})."""

    format = PART_FORMAT
    convention = "part output = part input @ weight.T"

    def add(self, block: int, weights: Mapping[str, np.ndarray]) -> None:
        for part, weight in sorted(weights.items()):
            self._tensors.add(f"block_{block}.{part}", weight)


def save_part_maps(
    path: str | Path, weights: Mapping[tuple[int, str], np.ndarray], metadata: Mapping[str, object]
) -> None:
    """Store {(block 1..L, part name): weight (d_out, d_in)} as tensors `block_{b}.{part}`."""
    with PartMapWriter(path, metadata) as writer:
        for (block, part), weight in sorted(weights.items()):
            writer.add(block, {part: weight})


def load_part_maps(path: str | Path) -> dict[tuple[int, str], ShortcutMap]:
    """{(block, part): map} from a file written by PartMapWriter."""
    maps: dict[tuple[int, str], ShortcutMap] = {}
    tensors, _ = read_tensor_file(path, PART_FORMAT, "sub-module maps")
    for name, weight in tensors.items():
        block, _, part = name.partition(".")
        if not (block.startswith("block_") and block[6:].isdigit() and part):
            raise CorruptFileError(f"{path}: unexpected tensor '{name}'")
        maps[(int(block[6:]), part)] = ShortcutMap({"weight": weight})
    return maps
