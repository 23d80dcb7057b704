"""Where a model's weights are looked for, and what can be known about them before loading.

A source is tried in this order and every failure is reported:
  1. "package:NAME/SUBPATH": a folder or .gguf file inside an installed Python package;
  2. "parts:FILE": a .gguf file joined from pinned parts (jtc.model.joined);
  3. a local path: a model folder, or a .gguf file;
  4. a Hugging Face hub id (with an optional revision).

This module imports neither torch nor transformers: the workflow calls it while it plans.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jtc.files.io import CorruptFileError
from jtc.model.adapters import (
    ADAPTERS,
    UnsupportedArchitecture,
    architecture_problem,
    missing_head_message,
    part_adapter,
    task_from_classes,
)
from jtc.model.joined import Parts, is_parts, locate, parts_problem
from jtc.model.manifest import safetensors_header
from jtc.model.packages import package_path


class ModelSourceError(RuntimeError):
    """No source of a model could be loaded."""


@dataclass(frozen=True)
class Candidate:
    """One place to load weights from: a folder or hub id, and a GGUF file name within it."""

    kind: str  # "package", "parts", "local", "hub"
    location: str
    gguf_file: str | None = None
    revision: str | None = None

    def describe(self) -> str:
        where = f"{self.location}/{self.gguf_file}" if self.gguf_file else self.location
        rev = f" @ {self.revision}" if self.revision else ""
        return f"{self.kind} '{where}{rev}'"


def shareable_source(source: str | None) -> str | None:
    """A model source fit to share, without the exporting machine's folders: a local path cut
    to its last component, a package path to what follows site-packages (the package's own
    path); a hub id as it is."""
    match = re.fullmatch(r"(local|package|parts) '(.*)'", source or "")
    if match is None:
        return source
    kind, where = match.groups()
    if kind == "package":
        inside = re.split(r"[/\\](?:site|dist)-packages[/\\]", where)
        return f"package '{inside[-1] if len(inside) > 1 else Path(where).name}'"
    return f"{kind} '{Path(where).name}'"


def _split_gguf(path: Path) -> tuple[str, str | None]:
    if path.suffix.lower() == ".gguf":
        return str(path.parent), path.name
    return str(path), None


def candidates(spec: dict[str, Any]) -> tuple[list[Candidate], list[str]]:
    """The sources to try for a config entry, and the reasons some were ruled out. A "parts:"
    source's candidate is its joined file, which resolve_model writes before loading it."""
    source: str = spec["source"]
    tried: list[str] = []
    if source.startswith("package:"):
        path = package_path(source)
        if isinstance(path, str):
            return [], [path]
        location, gguf = _split_gguf(path)
        return [Candidate("package", location, gguf)], tried
    if is_parts(spec):
        joined = Parts.of(spec).joined
        return [Candidate("parts", str(joined.parent), joined.name)], tried
    path = Path(source).expanduser()
    if path.exists():
        location, gguf = _split_gguf(path.resolve())
        return [Candidate("local", location, gguf)], tried
    tried.append(f"local path '{source}' (does not exist)")
    return [Candidate("hub", source, None, spec.get("revision"))], tried


def gguf_files(spec: dict[str, Any]) -> list[Path] | None:
    """The GGUF file a source reads, as one path or, before a "parts:" source is joined, its
    parts in order (jtc.model.gguf_header reads either); None for any other source or one
    that is not all there."""
    if is_parts(spec):
        parts = Parts.of(spec)
        if parts.joined.is_file():
            return [parts.joined]
        found = [locate(part) for part in parts.files]
        return None if any(isinstance(p, str) for p in found) else found  # type: ignore[return-value]
    cands, _ = candidates(spec)
    if not cands or cands[0].kind == "hub" or not cands[0].gguf_file:
        return None
    return [Path(cands[0].location) / cands[0].gguf_file]


def local_config(spec: dict[str, Any]) -> dict[str, Any] | None:
    """The config.json of a model folder found locally; None for hub ids, GGUF files, or a
    folder without a readable config (resolve_model then reports the full story)."""
    cands, _ = candidates(spec)
    if not cands or cands[0].kind == "hub" or cands[0].gguf_file:
        return None
    try:
        config = json.loads((Path(cands[0].location) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def local_width(spec: dict[str, Any]) -> int | None:
    """The width (hidden size) of a locally found model, from its config.json (None if unknown)."""
    config = local_config(spec) or {}
    for key in ("hidden_size", "n_embd", "d_model"):
        if isinstance(config.get(key), int) and not isinstance(config[key], bool):
            return config[key]
    return None


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def looks_like_path(source: str) -> bool:
    """Whether a source can only be a local path, never a hub id (`name` or `org/name`): it is
    absolute, starts with ./, ../ or ~, names a .gguf file, or has a slash a hub id cannot."""
    if source.startswith(("/", "./", "../", "~", "\\")) or source in (".", ".."):
        return True
    if source.lower().endswith(".gguf") or "\\" in source:
        return True
    return "/" in source and (not _HUB_ID.match(source) or ".." in source.split("/"))


def source_problem(name: str, spec: dict[str, Any]) -> str | None:
    """While planning: a package source that is not installed (or lacks the path), or a source
    that can only be a local path and does not exist. Both are refused before resolve_model
    runs, so a typo never replaces a cached model with a failed job."""
    source: str = spec["source"]
    key = f"config key 'models.{name}.source'"
    if source.startswith("package:"):
        cands, tried = candidates(spec)
        return None if cands else f"{key}: {tried[0]}"
    if is_parts(spec):
        return parts_problem(name, spec)
    if looks_like_path(source) and not Path(source).expanduser().exists():
        return f"{key}: local path '{source}' does not exist (a path is never a hub id)"
    return None


def local_num_layers(spec: dict[str, Any]) -> int | None:
    """The block count of a locally found model, from its config.json (None if unknown)."""
    config = local_config(spec) or {}
    for key in ("num_hidden_layers", "n_layer"):
        if isinstance(config.get(key), int):
            return config[key]
    return None


def planning_problem(name: str, spec: dict[str, Any]) -> str | None:
    """What is already known to be wrong with a model entry before any weights are loaded: an
    architecture without an adapter, prediction asked of a model without a decoder head, or a
    device_map without the accelerate package."""
    if spec.get("device_map") is not None and importlib.util.find_spec("accelerate") is None:
        return (
            f"model '{name}': models.{name}.device_map needs the accelerate package "
            "(pip install accelerate)"
        )
    config = local_config(spec)
    if config is None:
        return None
    model_type = str(config.get("model_type"))
    problem = architecture_problem(model_type, config)
    if problem:
        return f"model '{name}': {problem}"
    architectures = config.get("architectures") or []
    declared = ADAPTERS.get(model_type)
    if declared is not None:
        task, has_head = declared.task, declared.has_head(architectures)
    else:  # found when the model is cached; a checkpoint's classes tell whether it has a head
        task = task_from_classes(architectures)
        if task is None and config.get("auto_map") and not spec.get("trust_remote_code"):
            return (
                f"model '{name}': its config.json asks for custom code (auto_map, model type "
                f"'{model_type}'), which jtc runs only with models.{name}.trust_remote_code: "
                "true (off by default: set it only for code you trust)"
            )
        # (custom code's classes tell nothing: known once the model is cached)
        has_head = task is not None or not architectures or bool(config.get("auto_map"))
    if spec.get("predict", True) and not has_head:
        return missing_head_message(name, task, "/".join(architectures) or "no head class")
    return None


def part_problem(name: str, spec: dict[str, Any]) -> str | None:
    """An architecture, known before loading, whose block parts jtc cannot name."""
    config = local_config(spec)
    if config is None:
        return None
    declared = ADAPTERS.get(str(config.get("model_type")))
    if declared is None:
        return None  # known once the model is cached (jtc.pipeline.planning.resolved_problem)
    try:
        part_adapter(declared)
    except UnsupportedArchitecture as err:
        return f"model '{name}': {err}"
    return None


# models.NAME.cache: "copy" (the default) caches the weights in results/models/NAME;
# "reference" reads them in place from a local folder of safetensors files
CACHE_MODES = ("copy", "reference")
SINGLE_FILE = "model.safetensors"  # what transformers reads from a folder first
SHARD_INDEX = "model.safetensors.index.json"  # else this, and the shards it lists
STORED_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64"}


def referenced_files(folder: Path) -> list[Path] | str:
    """The files of a model folder that transformers reads its weights from (model.safetensors,
    else model.safetensors.index.json and the shards it lists), or why the folder has none."""
    if (folder / SINGLE_FILE).is_file():
        return [folder / SINGLE_FILE]
    index = folder / SHARD_INDEX
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            return f"its {SHARD_INDEX} cannot be read ({type(exc).__name__}: {exc})"
        missing = [shard for shard in shards if not (folder / shard).is_file()]
        if missing or not shards:
            return f"its {SHARD_INDEX} lists shards that are not there: {', '.join(missing)}"
        return [index, *(folder / shard for shard in shards)]
    pickles = sorted(p.name for p in folder.glob("*.bin"))
    held = (
        f"it holds {', '.join(pickles[:3])}: pickled weights, which are never read in place"
        if pickles
        else "it holds no weights transformers reads"
    )
    return f"it has no {SINGLE_FILE} or {SHARD_INDEX} ({held})"


def stored_dtypes(files: list[Path]) -> set[str]:
    """The types the floating-point tensors of these safetensors files are stored in (float32,
    bfloat16, float16, or safetensors' own name of another); CorruptFileError for a file whose
    header cannot be read."""
    found: set[str] = set()
    for path in files:
        if path.suffix != ".safetensors":
            continue
        _, header = safetensors_header(path)
        for tensor in header.values():
            kind = str(tensor.get("dtype", ""))
            if kind.startswith(("F", "BF")):
                found.add(STORED_DTYPES.get(kind, kind))
    return found


def reference_problem(name: str, spec: dict[str, Any]) -> str | None:
    """For models.NAME.cache: reference, before any weights are loaded: a source that is not a
    local folder of safetensors weights (a hub id, a GGUF file, a "parts:" or "package:"
    source, a folder of .bin pickles), or weights stored in another type than the compute
    dtype (models.NAME.dtype). None for cache: copy, or a source that can be referenced."""
    if spec.get("cache", "copy") != "reference":
        return None
    source, dtype = str(spec["source"]), spec.get("dtype", "float32")
    key = f"config key 'models.{name}.cache'"
    copy = f"set models.{name}.cache: copy (the default) to cache a copy of the weights"
    what = _unreferenceable(spec)
    if isinstance(what, str):
        return (
            f"{key}: reference reads the weights in place from a local folder of *.safetensors "
            f"files, and the source '{source}' is {what}; {copy}"
        )
    try:
        stored = stored_dtypes(what)
    except CorruptFileError as exc:
        return f"{key}: the source '{source}' cannot be referenced: {exc}"
    if stored and stored != {dtype}:
        return (
            f"{key}: reference runs the model on the weights as stored, and the source "
            f"'{source}' stores them in {' and '.join(sorted(stored))} while models.{name}.dtype "
            f"is {dtype}; set models.{name}.dtype: {sorted(stored)[0]} to run in the stored "
            f"type, or {copy} converted to {dtype}"
        )
    return None


def _unreferenceable(spec: dict[str, Any]) -> list[Path] | str:
    """The files a source's cache would reference, or what the source is that none can be."""
    source = str(spec["source"])
    if source.startswith("package:"):
        return (
            "a package: source (a folder inside an installed package, which reinstalling replaces)"
        )
    if is_parts(spec):
        return "a parts: source (a GGUF file joined from parts, dequantised as it is loaded)"
    cands, _ = candidates(spec)
    if not cands or cands[0].kind == "hub":
        return "a Hugging Face hub id, not a local folder"
    if cands[0].gguf_file:
        return "a GGUF file (dequantised as it is loaded, so never read in place)"
    files = referenced_files(Path(cands[0].location))
    return f"a folder without safetensors weights: {files}" if isinstance(files, str) else files
