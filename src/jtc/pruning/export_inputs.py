"""What a pruned checkpoint is made from (`jtc prune --model-dir --maps`, the export_pruned
stage), each checked before anything is loaded and refused as the input it is: a model folder
that does not exist or is no jtc model cache (what to pass instead), a damaged cache (how to
cache it again), a maps file that is not the span maps of calibrate_pruning (what it is, what is
expected), or maps fitted on another model (jtc.pruning.map_file.model_problem). A wrong input
is never a reason to delete a valid one."""

from __future__ import annotations

from pathlib import Path

from jtc.files.io import CorruptFileError
from jtc.model.manifest import cache_problem, safetensors_header
from jtc.pruning.map_file import SPAN_FORMAT, model_problem

MAPS_EXPECTED = (
    "the span maps file calibrate_pruning wrote for the model pruned "
    "(results/pruning/MODEL/CORPUS/maps.safetensors of a finished workflow run)"
)
# the other tensor files of jtc, by their format (metadata "format")
OTHER_FORMATS = {
    "jtc-shortcuts-v2": "a map file of a shortcut method (results/maps/MODEL/CORPUS/METHOD"
    ".safetensors)",
    "jtc-part-maps-v1": "the block parts' map file (results/maps/MODEL/CORPUS/parts.safetensors)",
    "jtc-shortlist-v1": "the shortlist's factorisation (results/maps/MODEL/CORPUS/shortlist"
    ".safetensors)",
}


def _format(header: dict) -> str | None:
    """The format a safetensors file's metadata names (jtc's tensor files), else None."""
    meta = header.get("__metadata__")
    return meta.get("format") if isinstance(meta, dict) else None


def _what(header: dict) -> str:
    """What a safetensors file that is no span maps file holds, from its header."""
    fmt = _format(header)
    if fmt in OTHER_FORMATS:
        return OTHER_FORMATS[fmt]
    if fmt:
        return f"a safetensors file of format '{fmt}'"
    tensors = sorted(name for name in header if name != "__metadata__")
    if not tensors:
        return "a safetensors file without tensors"
    return (
        f"a model's weights ({len(tensors)} tensors such as '{tensors[0]}', no jtc format; "
        "a model.safetensors?)"
    )


def maps_problem(maps: str | Path, label: str = "the maps file") -> str | None:
    """Why `maps` is not a span maps file (missing, a folder, not safetensors, another kind of
    file: what it is), naming it as the wrong input; None when it is one (its tensors are
    checked as they are read)."""
    path = Path(maps)
    if not path.exists():
        return f"{label} {path} does not exist; pass {MAPS_EXPECTED}"
    if path.is_dir():
        return f"{label} {path} is a folder; pass {MAPS_EXPECTED}"
    try:
        _, header = safetensors_header(path, metadata=True)
    except (CorruptFileError, OSError) as exc:
        return f"{label} {path} is not a safetensors file ({exc}); pass {MAPS_EXPECTED}"
    if _format(header) == SPAN_FORMAT:
        return None
    return f"{label} {path} is {_what(header)}, not span maps; pass {MAPS_EXPECTED}"


def export_problem(
    model_dir: str | Path,
    maps: str | Path | None,
    labels: tuple[str, str] = ("the model folder", "the maps file"),
) -> str | None:
    """Why a pruned checkpoint cannot be made from the cached model `model_dir` and the maps
    file `maps` (None: drop, which reads none), each input named by its label in `labels` (the
    CLI's options); None when it can."""
    problem = cache_problem(model_dir, labels[0])
    if problem is None and maps is not None:
        problem = maps_problem(maps, labels[1]) or model_problem(maps, model_dir)
    return problem
