"""The disk a run's jobs write, estimated while planning, and the run refused before any job
starts when it exceeds the free space of the results folder's filesystem (torch-free; read by
the Snakefile, never by a job).

Each job's outputs are estimated from its shape (jtc.pipeline.job_shape.stage_shape: the
model's depth L and width d, the rows) and the config: the large ones precisely (the model
cache, the layer states, the map files, the recorded block parts, the per-position scores, the
span maps, a pruned checkpoint), every other output (a table, a figure, a page) as a small flat
allowance, and each job's log beside it. A run keeps the outputs it replaces until it succeeds
(jtc.pipeline.keep), so nothing is counted as freed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from jtc.pipeline.job_shape import ITEMSIZE, Shape, stage_shape
from jtc.pruning.spans import export_length, resolved_lengths, spans
from jtc.pruning.variants import variant_of
from jtc.settings import CalibrationSettings, ExportSettings, LowRankSettings, RankSettings
from jtc.shortcuts.methods import METHODS, fitted_targets, rank_of

# a table, a figure, a report page, a json file: the tiny project's 148 outputs take 1.7 MB,
# the largest 270 KB (an HTML table)
SMALL_BYTES = 100_000
LOG_BYTES = 20_000  # a job's log and benchmark record
# the layer states' Parquet files (zstd, level 1) over their raw floats: floats barely compress
# (0.95-0.97 at widths 256 and 2,048, float32 and float16, 6,000-20,000 rows), and each file's
# first values are dictionary-encoded before Parquet falls back to plain pages: about 256 KB more
# a file, at most 40% of a small one (a tiny GPT-2 of width 256, 1,766 rows: 1.11; 2026-11-29)
STATES_RATIO = 0.95
DICTIONARY_BYTES = 256_000
STATES_ROW_BYTES = 8  # a states row's sentence id and position (compressed), per file
SCORE_ROW_BYTES = 80  # decode_predictions: one row of a layer's per-position scores, compressed
TENSOR_BYTES = 160  # a safetensors tensor's entry in the header (its name, shape, offsets)
TOKEN_BYTES = 50  # a tokenizer's files per vocabulary entry (Qwen2.5: 7 MB for 151,646)
RESERVE_BYTES = 500_000_000  # left free: a run that would leave less is refused
SHOWN = 5  # the largest outputs a refusal names
# what shrinks each rule's outputs (the refusal's advice)
SHRINKS = {
    "resolve_model": ["models.NAME.dtype: bfloat16", "models.NAME.cache: reference"],
    "extract_hidden": ["storage_dtype: float16", "sizes.train", "positions_per_sentence"],
    "record_parts": ["storage_dtype: float16", "submodules.sentences", "sizes.train"],
    "fit_map": ["maps.pairs: last", "maps.dtype: bfloat16"],
    "train_map": ["training.METHOD.targets: last", "methods"],
    "decode_predictions": ["sizes.validation", "methods"],
    "calibrate_pruning": ["pruning.lengths", "pruning.variants"],
    "export_pruned": ["pruning.export_length"],
    "fit_parts": ["submodules.models"],
}


@dataclass(frozen=True)
class Write:
    """What one job is estimated to write."""

    rule: str
    wildcards: Mapping[str, str]
    bytes: int

    def describe(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in self.wildcards.items())
        return f"{self.rule}({where}): {human(self.bytes)}"


class Job(NamedTuple):
    """A job to estimate: its rule, wildcards and number of output files."""

    rule: str
    wildcards: Mapping[str, str]
    outputs: int = 1


def human(count: float) -> str:
    """Bytes in decimal units: 1.2 GB, 340 MB."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{int(count)} B"


def _shape(rule: str, config: dict[str, Any], wildcards: Mapping[str, str]) -> Shape:
    stage = rule if rule in ("calibrate_pruning", "replace_parts") else "extract_hidden"
    return stage_shape(stage, config, wildcards["model"], wildcards.get("split", "train"))


def _tensors(count: int, floats: int, itemsize: int = 4) -> int:
    """`count` tensors of `floats` elements each, with their header entries."""
    return count * (floats * itemsize + TENSOR_BYTES)


def map_bytes(method: str, shape: Shape, config: dict[str, Any], itemsize: int = 4) -> int:
    """A method's map file (results/maps/): its maps from every source layer to the targets it
    keeps, each map's tensors (jtc.shortcuts.maps): mat d × d; rrr, NJTC and the one-map
    methods a rank-r pair (r, d) + (d, r), N-NJTC's and the one-map methods' with batch
    normalisation's four d vectors; the tuned lens d × d + d. mat and rrr keep the pairs
    maps.pairs asks for (rrr: of those its training.rrr.targets fits), in maps.dtype; the
    trained ones theirs (training.METHOD.targets), in float32."""
    layers, d = shape.layers, shape.width
    if method == "id":
        return 0
    spec = METHODS[method]
    if method == "mat":
        targets = "last" if config["maps"]["pairs"] == "last" else "all"
    elif spec.last_only:
        targets = "last"
    else:
        kind = RankSettings if method == "rrr" else LowRankSettings
        targets = kind.from_config(config, method).targets
        if method == "rrr" and config["maps"]["pairs"] == "last":
            targets = "last"
    pairs = sum(len(fitted_targets(method, targets, s, layers)) for s in range(layers))
    if method in ("mat", "tuned_lens"):
        per_map = _tensors(1, d * d, itemsize)
        if method == "tuned_lens":
            per_map += _tensors(1, d, itemsize)
    else:
        kind = RankSettings if method == "rrr" else LowRankSettings
        rank = rank_of(kind.from_config(config, method), d)
        per_map = _tensors(2, rank * d, itemsize)
        if method != "rrr" and method != "njtc":  # batch normalisation
            per_map += _tensors(4, d, itemsize)
    return pairs * per_map


def span_map_bytes(shape: Shape, config: dict[str, Any]) -> int:
    """calibrate_pruning's span maps (pruning/maps.safetensors): every span of every variant
    with a map, float32: d × d (and the rotation of a rotated one), a rank-r pair for one
    whose fit reads pruning.rank (its variant record's settings)."""
    calibration = CalibrationSettings.from_config(config)
    lengths = resolved_lengths(calibration.lengths, shape.layers)
    d, total = shape.width, 0
    for name in calibration.variants:
        variant = variant_of(name)
        if not variant.has_map:
            continue
        if "rank" in variant.settings:  # a rank-r pair (r, d) + (d, r)
            rank = calibration.rank or max(1, d // 100)
            per_span = _tensors(2, rank * d)
        else:  # a d × d map, and its rotation where it has one
            per_span = _tensors(1 + variant.rotated, d * d)
        total += len(spans(shape.layers, lengths, name)) * per_span
    return total


def _model_bytes(config: dict[str, Any], model: str, shape: Shape) -> int:
    """The cached model's weights in its compute dtype, none when the cache refers to the
    source's files (models.NAME.cache: reference)."""
    spec = config["models"].get(model, {})
    if spec.get("cache", "copy") == "reference":
        return 0
    return shape.parameters * shape.parameter_bytes


def states_file_bytes(rows: int, width: int, itemsize: int) -> int:
    """One layer's (or block part's) states file: its floats as Parquet stores them, the
    dictionary-encoded start, and each row's sentence id and position."""
    floats = rows * width * itemsize
    dictionary = min(DICTIONARY_BYTES, 0.4 * floats)
    return int(floats * STATES_RATIO + dictionary + rows * STATES_ROW_BYTES)


def large_bytes(rule: str, wildcards: Mapping[str, str], config: dict[str, Any]) -> int:
    """What a job of `rule` writes beyond its small outputs (0 for a rule that writes only
    tables, figures and pages)."""
    if "model" not in wildcards:
        return 0
    shape = _shape(rule, config, wildcards)
    model, d, layers = wildcards["model"], shape.width, shape.layers
    stored = ITEMSIZE.get(config["storage_dtype"], 4)
    if rule == "resolve_model":
        return _model_bytes(config, model, shape) + TOKEN_BYTES * shape.vocab
    if rule == "extract_hidden":  # a file per layer 0..L and positions.parquet
        return (layers + 1) * states_file_bytes(shape.rows, d, stored)
    if rule == "record_parts":  # every block part's input and output
        return layers * 8 * states_file_bytes(shape.rows, d, stored)
    if rule == "fit_map":
        itemsize = ITEMSIZE[config["maps"]["dtype"]]
        closed = [m for m in config["methods"] if m != "id" and not METHODS[m].trained]
        return sum(map_bytes(m, shape, config, itemsize) for m in closed)
    if rule == "train_map":
        return map_bytes(wildcards["method"], shape, config)
    if rule == "fit_parts":  # a d × d map per part of every block
        return _tensors(layers * 4, d * d)
    if rule == "fit_shortlist":  # the head's rank-k factors
        rank = config["early_exit"]["shortlist_rank"] or 0
        return _tensors(2, (shape.vocab + d) * rank)
    if rule == "decode_predictions":  # every method's scores at every layer
        validation = stage_shape("extract_hidden", config, model, "validation")
        methods = len(config["methods"])
        return methods * validation.rows * (layers + 1) * SCORE_ROW_BYTES
    if rule == "calibrate_pruning":
        return span_map_bytes(shape, config)
    if rule == "export_pruned":  # the model less the blocks removed
        export = ExportSettings.from_config(config)
        lengths = resolved_lengths(config["pruning"]["lengths"], layers)
        removed = export.export_length or export_length(lengths, layers)
        return int(_model_bytes(config, model, shape) * (layers - removed) / layers)
    return 0


def job_bytes(job: Job, config: dict[str, Any]) -> int:
    """What one job writes: its large outputs, a small allowance for each other output, its
    log."""
    large = large_bytes(job.rule, job.wildcards, config)
    small = max(0, job.outputs - 1) if large else job.outputs
    return large + (small + (1 if large else 0)) * SMALL_BYTES + LOG_BYTES


def planned_writes(jobs: Iterable[Job], config: dict[str, Any]) -> list[Write]:
    """Every job's estimated writes, largest first."""
    writes = [Write(j.rule, dict(j.wildcards), job_bytes(j, config)) for j in jobs]
    return sorted(writes, key=lambda w: -w.bytes)


def existing_parent(folder: str | os.PathLike) -> Path:
    """`folder`, or its nearest parent that exists (results/ before the first run)."""
    path = Path(folder).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


Usage = Callable[[Path], Any]  # shutil.disk_usage: (total, used, free)


def already_set(hint: str, config: dict[str, Any]) -> bool:
    """Whether the config already has a SHRINKS hint's value ("key: value"; for a
    models.NAME key, every model has it); a hint without a value (a size) never is."""
    key, sep, value = hint.partition(": ")
    if not sep:
        return False
    path = key.split(".")
    if path[:2] == ["models", "NAME"]:
        specs = config.get("models", {}).values()
        return bool(specs) and all(str(spec.get(path[2])) == value for spec in specs)
    node: Any = config
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return str(node) == value


def disk_check(
    writes: list[Write],
    results: str | os.PathLike,
    usage: Usage = shutil.disk_usage,
    config: dict[str, Any] | None = None,
) -> tuple[str | None, str]:
    """(why the run is refused or None, the line that says what it writes and what is free):
    refused when the estimate exceeds the free space of `results`'s filesystem less
    RESERVE_BYTES, or when the filesystem reports no free space at all. The refusal names the
    keys that shrink the largest outputs, but those `config` already sets so."""
    total = sum(w.bytes for w in writes)
    where = existing_parent(results)
    try:
        disk = usage(where)
    except OSError as err:
        return (
            f"jtc: the disk of {where} reports no free space ({err}); this run writes about "
            f"{human(total)}",
            "",
        )
    if not disk.total:
        return (
            f"jtc: the disk of {where} reports no free space (total {disk.total} B, free "
            f"{disk.free} B); this run writes about {human(total)}",
            "",
        )
    note = f"jtc: this run writes about {human(total)}; {human(disk.free)} free on {where}"
    if total <= disk.free - RESERVE_BYTES:
        return None, note
    largest = writes[:SHOWN]
    keys = list(dict.fromkeys(k for w in largest for k in SHRINKS.get(w.rule, [])))
    keys = [k for k in keys if config is None or not already_set(k, config)]
    lines = [
        f"jtc: this run writes about {human(total)} but {where} has {human(disk.free)} free "
        f"(keeping {human(RESERVE_BYTES)} free); its largest outputs:",
        *(f"  {w.describe()}" for w in largest),
    ]
    if keys:
        lines.append("config keys that shrink them: " + ", ".join(keys))
    lines.append(
        "free some space, write results/ elsewhere (-d), or change these keys (or, if it will "
        "fit when it runs, --config disk_check=warn)"
    )
    return "\n".join(lines), note
