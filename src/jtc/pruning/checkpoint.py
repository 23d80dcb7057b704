"""Depth pruning exported as a standard checkpoint: blocks start+1..start+length of a causal LM
removed, and for the ReplaceMe variant (arXiv 2505.02819) a linear transform folded into the MLP
of block `start`.

Blocks are numbered 1..L and h_l is the residual stream after block l (h_0: the embeddings).
Block i's output is h_i = r_i + X, X its MLP output before the residual add. ReplaceMe fits a
d × d transform so that r_i + X·T ≈ h_{i+n}; the pruned model computes X·T in block i (the
transform folded into the MLP's final linear layer) and has no blocks i+1..i+n. `drop` removes
the blocks with no transform. Either way the result is the model's own architecture with L − n
blocks and no new parameters: `AutoModelForCausalLM.from_pretrained(folder)` loads it without
custom code.

The transform comes in torch.nn convention, `weight` of shape (d, d) with new output
X @ weight.T (weight = Tᵀ), as `replaceme.start_{i}.length_{n}.weight` in the workflow's maps
file (results/pruning/{model}/{corpus}/maps.safetensors; jtc.pruning.map_file); `export` reads
it from there, for `jtc prune` and the export_pruned stage.

`rotation` folds a scaled rotation h_{i+n} := s·h_i Q (its map `rotation.start_{i}.length_{n}
.weight` = (s·Q)ᵀ in the maps file) into the embeddings and blocks 1..i of a pre-norm RMSNorm
model (jtc.pruning.rotate), and removes the span: the same architecture again. `prune_comp`
(Prune&Comp's magnitude compensation, h_{i+n} := s·h_i) is that fold with Q = I.
`rotation_replaceme` folds both: its transform (`weight`) into block i's MLP first, then its
rotation (part `rotation`) into the embeddings and blocks 1..i.

`write_pruned` checks what it writes before it puts the folder in place
(jtc.pruning.export_check).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from jtc.files.stamps import write_own_stamp
from jtc.model.adapters import Adapter, UnsupportedArchitecture
from jtc.model.kept_blocks import prune_config
from jtc.model.sources import shareable_source
from jtc.pruning import rotate
from jtc.pruning.export_check import check_batch, check_export, check_fold, hooked_logits
from jtc.pruning.export_inputs import export_problem
from jtc.pruning.map_file import calibration_record, load_stand_in
from jtc.pruning.mlp_fold import final_linear, fold_problem, fold_transform
from jtc.pruning.out_folder import replace_problem
from jtc.pruning.variants import EXPORTED, ROTATION_PART, VARIANTS, variant_of

FORMAT = "jtc-pruned-model-v1"  # pruning.json's "format"
DESCRIPTION = "pruning.json"


# --- pruning in memory ------------------------------------------------------------------------


def span_problem(num_layers: int, start: int, length: int, transform: bool = False) -> str | None:
    """Why blocks start+1..start+length cannot be removed from a model of `num_layers` blocks
    (with a `transform` folded into block start's MLP: start must be 1 or more)."""
    span = f"start {start}, length {length}"
    if length < 1:
        return f"{span}: length must be at least 1 (the number of blocks removed)"
    if length >= num_layers:
        return f"{span}: the model has {num_layers} blocks, so at most {num_layers - 1} can go"
    if start < 0:
        return f"{span}: start must be 0 or more (the last block kept before the span)"
    if start + length > num_layers:
        return (
            f"{span}: blocks {start + 1}..{start + length} run past the model's {num_layers} "
            f"blocks (start + length ≤ {num_layers})"
        )
    if transform and start < 1:
        return (
            f"{span}: ReplaceMe folds its transform into block {start}'s MLP, and block 0 is "
            "the embeddings: start must be 1 or more (or use --variant drop)"
        )
    return None


def exported_variant_problem(variant: str) -> str | None:
    """Why `variant` cannot be exported (unknown, or measured in memory only), else None."""
    if variant not in VARIANTS:
        return f"variant '{variant}' is not one of {', '.join(EXPORTED)}"
    record = VARIANTS[variant]
    if not record.exported:
        return (
            f"variant '{variant}' cannot be exported: {record.not_exported} (exported: "
            f"{', '.join(EXPORTED)})"
        )
    return None


def transform_problem(transform: np.ndarray, width: int, rotation: bool = False) -> str | None:
    """Why `transform` is not a (width, width) matrix of finite values (a `rotation`: a positive
    multiple of an orthogonal one), else None."""
    weight = np.asarray(transform)
    if weight.shape != (width, width):
        return (
            f"the transform has shape {weight.shape}; the model's width is {width}, so it must "
            f"be ({width}, {width})"
        )
    if not np.isfinite(weight).all():
        return "the transform has non-finite values (NaN or inf)"
    if rotation:
        try:
            rotate.split_rotation(weight)
        except ValueError as exc:
            return str(exc)
    return None


def variant_problem(model: nn.Module, adapter: Adapter, start: int, variant: str) -> str | None:
    """Why `variant`'s map cannot be folded into this model at `start` (drop: never): each fold
    site of its record (jtc.pruning.variants) checks the model."""
    record = variant_of(variant)
    problem = fold_problem(model, adapter, start) if record.folded_part("mlp") else None
    if problem is None and record.folded_part("stream"):
        problem = rotate.rotation_problem(model, adapter, start)
    return problem


def folded_problem(
    transform: np.ndarray | None, rotation: np.ndarray | None, width: int, variant: str
) -> str | None:
    """Why a variant's transform (its part folded into block i's MLP) and rotation (its part
    folded into the stream) are missing, unexpected or malformed, else None."""
    record = variant_of(variant)
    for name, value, site in (("transform", transform, "mlp"), ("rotation", rotation, "stream")):
        if (value is not None) != (record.folded_part(site) is not None):
            return f"variant '{variant}' and its {name} (or none) do not agree"
        if value is not None:
            problem = transform_problem(value, width, rotation=site == "stream")
            if problem:
                return f"its {name}: {problem}" if len(record.folds or {}) > 1 else problem
    return None


def prune_blocks(
    model: nn.Module,
    adapter: Adapter,
    start: int,
    length: int,
    transform: np.ndarray | None = None,
    rotation: np.ndarray | None = None,
) -> None:
    """Remove blocks start+1..start+length (1-based) of `model` in place, folding `transform`
    (weight (d, d), new MLP output X @ weight.T; None: none) into block `start`'s MLP final
    linear layer (fold site "mlp", jtc.pruning.variants), then `rotation` (s·Q)ᵀ into the
    embeddings and blocks 1..start (fold site "stream", jtc.pruning.rotate); neither: the
    blocks are dropped. The config follows (num_hidden_layers, per-layer lists such as
    layer_types) and the attention modules' layer_idx are renumbered for generate's KV cache.
    Everything is checked before anything changes."""
    blocks = adapter.blocks(model)
    num_layers = len(blocks)
    config = model.config.get_text_config()
    width = int(config.hidden_size)
    problem = span_problem(num_layers, start, length, transform is not None)
    for value, is_rotation in ((transform, False), (rotation, True)):
        if problem is None and value is not None:
            problem = transform_problem(value, width, rotation=is_rotation)
    if problem:
        raise ValueError(problem)
    if getattr(config, "scale_attn_by_inverse_layer_idx", False) and start + length < num_layers:
        raise ValueError(
            f"architecture '{adapter.name}': scale_attn_by_inverse_layer_idx scales each block's "
            "attention by its position, so the blocks after the span would change when "
            "renumbered: prune only the last blocks (start + length = num_layers)"
        )
    found = final_linear(model, adapter, start) if transform is not None else None
    if isinstance(found, str):
        raise UnsupportedArchitecture(found)
    problem = rotate.rotation_problem(model, adapter, start) if rotation is not None else None
    if problem:
        raise ValueError(problem)
    if found is not None:
        fold_transform(found[1], transform)
    if rotation is not None:
        rotate.fold_rotation(model, adapter, start, *rotate.split_rotation(rotation))
    kept = [b for b in range(num_layers) if not start <= b < start + length]
    del blocks[start : start + length]  # ModuleList renumbers the blocks that follow
    prune_config(config, kept, num_layers)
    for index, block in enumerate(blocks):
        for module in block.modules():
            if isinstance(getattr(module, "layer_idx", None), int):
                module.layer_idx = index


# --- writing a pruned checkpoint --------------------------------------------------------------


def export(
    model_dir: str | Path,
    out: str | Path,
    *,
    start: int,
    length: int,
    variant: str,
    maps: str | Path | None = None,
    force: bool = False,
    caveat: str | None = None,
    made_by: str | None = None,
) -> Path:
    """write_pruned, for an exported variant with a map, the span's map read from the maps file
    `maps` (which pruning.json names), each part folded where its record says
    (jtc.pruning.variants: folds); drop reads no maps. A model folder that is no jtc model
    cache, or a maps file that is no span maps file or was fitted on another model than
    `model_dir`'s, is refused as the wrong input (jtc.pruning.export_inputs)."""
    transform, rotation, source, calibration = None, None, None, None
    problem = exported_variant_problem(variant)
    if problem:
        raise ValueError(problem)
    record = VARIANTS[variant]
    uses = maps if record.has_map else None  # without: write_pruned says it needs one
    problem = export_problem(model_dir, uses)
    if problem:
        raise ValueError(problem)
    if uses is not None:
        span_map, after = load_stand_in(maps, variant, start, length)
        parts = {**span_map.tensors, **({ROTATION_PART: after} if after is not None else {})}
        transform, rotation = (parts.get(record.folded_part(s)) for s in ("mlp", "stream"))
        source = f"{maps}: {variant}, start {start}, length {length}"
        calibration = calibration_record(maps)
    return write_pruned(
        model_dir,
        out,
        start=start,
        length=length,
        variant=variant,
        transform=transform,
        rotation=rotation,
        force=force,
        transform_source=source,
        calibration=calibration,
        caveat=caveat,
        made_by=made_by,
    )


def write_pruned(
    model_dir: str | Path,
    out: str | Path,
    *,
    start: int,
    length: int,
    variant: str,
    transform: np.ndarray | None = None,
    force: bool = False,
    transform_source: str | None = None,
    caveat: str | None = None,
    rotation: np.ndarray | None = None,
    calibration: dict[str, object] | None = None,
    made_by: str | None = None,
) -> Path:
    """Write the cached model `model_dir` (jtc.model.cache) with blocks start+1..start+length
    removed to the folder `out` (new or empty unless `force`): safetensors weights, config,
    tokenizer and pruning.json. `variant` 'replaceme' folds `transform` (weight (d, d), new MLP
    output X @ weight.T) into block `start`'s MLP; 'rotation' folds `rotation` = (s·Q)ᵀ into the
    embeddings and blocks 1..start; 'rotation_replaceme' both; 'drop' takes neither. The folder
    is written beside `out` and renamed into place once it loads with plain transformers and
    reproduces the hooked pruned model's logits; `transform_source` says in pruning.json where
    the map came from and `calibration` what it was fitted on (the maps file's record,
    jtc.pruning.map_file.calibration_record), `caveat` what the span's choice is worth
    (jtc.pruning.spans.exported_caveat: an underdetermined map, a tie), null when nothing is to
    be said. `made_by` (`jtc prune`) records every file's size and sha256 in the folder's
    stamp.json, as a workflow job's folder output has (jtc.files.stamps.write_own_stamp; a job
    writes its own stamp over it). `force` never replaces a folder that is or holds a jtc output
    (jtc.pruning.out_folder.replace_problem)."""
    import transformers

    from jtc import __version__
    from jtc.files.io import atomic_dir
    from jtc.model.adapters import adapter_of
    from jtc.model.cache import load_model
    from jtc.model.manifest import cache_problem

    out = Path(out)
    problem = exported_variant_problem(variant)
    if problem:
        raise ValueError(problem)
    given = transform is not None or rotation is not None
    if VARIANTS[variant].has_map != given:
        with_map = ", ".join(n for n in EXPORTED if VARIANTS[n].has_map)
        raise ValueError(
            f"variant '{variant}' needs a transform (--maps FILE)"
            if not given
            else f"variant '{variant}' takes no transform (--maps is for the variants with a "
            f"map: {with_map})"
        )
    if out.exists() and not force and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(
            f"{out} exists and is not empty: write to a new folder, or replace it "
            f"(--force; force=True)"
        )
    problem = replace_problem(out, "the folder") if force else None
    if problem:
        raise FileExistsError(problem)
    problem = cache_problem(model_dir)
    if problem:
        raise ValueError(problem)
    model, tokenizer, info = load_model(model_dir, threads=torch.get_num_threads())
    adapter = adapter_of(info)
    name = f"model '{info.get('name', Path(model_dir).name)}'"
    if adapter.task != "causal":
        raise UnsupportedArchitecture(
            f"{name} (architecture '{adapter.name}') is a masked LM: pruning exports causal LMs "
            "only"
        )
    num_layers = len(adapter.blocks(model))
    width = int(model.config.get_text_config().hidden_size)
    problem = span_problem(num_layers, start, length, transform is not None)
    if problem is None and given:
        problem = folded_problem(transform, rotation, width, variant) or variant_problem(
            model, adapter, start, variant
        )
    if problem:
        raise ValueError(f"{name}: {problem}")
    batch = check_batch(model)
    reference = hooked_logits(model, adapter, start, length, transform, batch, rotation)
    before = sum(p.numel() for p in model.parameters())
    found = final_linear(model, adapter, start) if transform is not None else None
    folded = [f"block {start}: {found[0]}"] if isinstance(found, tuple) else []
    if rotation is not None:
        folded.append(rotate.FOLDED_INTO.format(start=start))
    prune_blocks(model, adapter, start, length, transform, rotation)
    after = sum(p.numel() for p in model.parameters())
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        pruned = model(**batch, use_cache=False).logits.float()
    check = {"tokens": int(batch["input_ids"].numel())}
    if rotation is not None:  # exact but for RMSNorm's epsilon (jtc.pruning.rotate)
        check.update(rotate.check_rotation_fold(model, adapter, start, rotation, batch, reference))
    else:
        check["fold_error_relative"] = check_fold(pruned, reference, dtype)
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        pickles = [p.name for p in tmp.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl")]
        if pickles:
            raise RuntimeError(f"transformers wrote pickled files {pickles}; nothing was written")
        del model  # the written one is loaded in its place
        check["reload_error_relative"] = check_export(tmp, pruned, batch, dtype)
        description = {
            "format": FORMAT,
            "model": info.get("name"),
            "model_source": shareable_source(info.get("source")),
            "architecture": adapter.name,
            "variant": variant,
            "start": start,
            "length": length,
            "blocks_removed": list(range(start + 1, start + length + 1)),
            "num_layers_before": num_layers,
            "num_layers_after": num_layers - length,
            "parameters_before": before,
            "parameters_after": after,
            "folded_into": "; ".join(folded) or None,
            "transform_source": transform_source,
            "calibration": calibration,
            "caveat": caveat,
            "convention": (
                "blocks 1..L, h_l after block l; replaceme: block start's MLP output X becomes "
                "X @ weight.T, folded into its final linear layer; rotation: h_start becomes "
                "h_start @ weight.T = s·h_start Q, folded into the embeddings and blocks "
                "1..start (prune_comp: Q = I); rotation_replaceme: both, h_start becomes "
                "s·(r + X @ T) Q; "
                "blocks_removed are gone"
            ),
            "check": check,
            "versions": {
                "jtc": __version__,
                "torch": torch.__version__,
                "transformers": transformers.__version__,
            },
        }
        (tmp / DESCRIPTION).write_text(json.dumps(description, indent=2, sort_keys=True) + "\n")
        if made_by is not None:
            write_own_stamp(tmp, made_by)
    return out
