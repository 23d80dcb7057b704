"""A pruned model in memory for every stand-in (torch): what the literature's measures run on
(jtc.pruning's benchmarks, context perplexity and generation fidelity), an ordinary
transformers model with blocks start+1..start+length removed.

What a variant folds into block i's feed-forward layer when exported (jtc.pruning.variants:
fold site "mlp"; replaceme's T) is folded the same way here (jtc.pruning.checkpoint
.prune_blocks on a copy), so drop and replaceme are exactly the checkpoint `snakemake pruned`
writes. The rest of a stand-in acts on the residual stream, which no weight of a pre-norm block
owns (rotation and prune_comp fold into the blocks before the span in the exported checkpoint,
jtc.pruning.rotate; in memory they are applied like mat, which they equal up to RMSNorm's
epsilon):
a forward pre-hook on what reads h_{i+n} (the first block after the span, or the final norm when
the span ends the model) replaces its input by the stand-in computed from it.

The copy's config and its attention modules' layer_idx follow the removed blocks, so that
`generate` and its KV cache work on every variant.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from jtc.model.adapters import Adapter, lookup
from jtc.model.hooks import hidden_input
from jtc.pruning.checkpoint import prune_blocks
from jtc.pruning.variants import ROTATION_PART, variant_of
from jtc.shortcuts.maps import ShortcutMap


def _apply(stand_in: str, linear: nn.Module, h: torch.Tensor, x: torch.Tensor | None = None):
    """The state a stand-in (jtc.pruning.variants.STAND_INS) computes from h_i (and X_i) with
    the map `linear`, before any rotation."""
    if stand_in == "map":
        return linear(h)
    if stand_in == "difference":
        return h + linear(h)
    if stand_in == "ffn":
        if x is None:
            raise ValueError("this stand-in needs block i's MLP output X_i")
        return h - x + linear(x)
    return h


def stand_in_state(
    variant: str, linear: nn.Module | None, h: torch.Tensor, x: torch.Tensor | None = None
) -> torch.Tensor:
    """The state that stands in for h_{i+n}, from h_i (and, for a variant that reads it, block
    i's MLP output X_i), as the variant's record says (jtc.pruning.variants: stand_in, then its
    rotation where it has one): drop h_i; mat A h_i (rotation s·h_i Q, the same with A = s·Q);
    low_rank h_i + low-rank(h_i); replaceme r_i + X_i T with r_i = h_i - X_i;
    rotation_replaceme s·(r_i + X_i T) Q. `linear` is the variant's map as a torch module
    (stand_in_module; None for drop)."""
    if linear is None:
        return h
    record = variant_of(variant)
    if record.rotated:
        return linear[ROTATION_PART](_apply(record.stand_in, linear["transform"], h, x))
    return _apply(record.stand_in, linear, h, x)


def stand_in_module(
    span_map: ShortcutMap | None, rotation: np.ndarray | None = None, device=None
) -> nn.Module | None:
    """A span's stand-in as a torch module on `device` (float32), what stand_in_state takes:
    its map (None for drop); with a rotated variant's `rotation` (s·Q)ᵀ, both as a ModuleDict
    ("transform": the map, ROTATION_PART: s·Q)."""
    if span_map is None:
        return None
    linear = span_map.to_torch(device=device)
    if rotation is None:
        return linear
    turn = ShortcutMap({"weight": rotation}).to_torch(device=device)
    return nn.ModuleDict({"transform": linear, ROTATION_PART: turn})


def _replacing_input(stand_in: str, linear: nn.Module):
    """A forward pre-hook (with_kwargs=True) that replaces a module's hidden-states input h by
    what the stand-in `stand_in` computes from it with the map `linear`, in float32."""

    def hook(module, args, kwargs):
        hidden = hidden_input(args, kwargs)
        new = _apply(stand_in, linear, hidden.float()).to(hidden.dtype)
        if args:
            return (new, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": new}

    return hook


def pruned_copy(
    model: nn.Module,
    adapter: Adapter,
    variant: str,
    start: int,
    length: int,
    span_map: ShortcutMap | None,
    rotation: np.ndarray | None = None,
) -> nn.Module:
    """A copy of `model` with blocks start+1..start+length (1-based) removed and `variant`
    standing in for them (`span_map`: the span's map from the span map file, None for drop;
    `rotation`: a rotated variant's (s·Q)ᵀ, jtc.pruning.map_file.load_stand_in). `model`
    itself is not changed."""
    record = variant_of(variant)
    if record.has_map and span_map is None:
        raise ValueError(f"the {variant} stand-in needs the span's map")
    if record.rotated != (rotation is not None):
        raise ValueError(f"the {variant} stand-in and its rotation (or none) do not agree")
    pruned = copy.deepcopy(model)
    folded = record.folded_part("mlp")  # folded as exported: X_i T in block i's MLP
    prune_blocks(pruned, adapter, start, length, span_map.tensors[folded] if folded else None)
    if record.rotated:  # what remains acts on the stream: s·Q, on what block i+n+1 reads
        on_stream, stand_in = ShortcutMap({"weight": rotation}), "map"
    elif record.has_map and not folded:
        on_stream, stand_in = span_map, record.stand_in
    else:
        return pruned
    blocks = adapter.blocks(pruned)
    if start < len(blocks):
        reader = blocks[start]  # the first block after the span reads h_{i+n}
    elif adapter.final_norm_attr:
        reader = lookup(adapter.backbone(pruned), adapter.final_norm_attr)
    else:
        raise ValueError(
            f"architecture '{adapter.name}' has no final norm to read the stand-in for the last "
            f"blocks: the {variant} stand-in cannot end the model (shorten the span)"
        )
    device = next(reader.parameters(), next(pruned.parameters())).device
    linear = on_stream.to_torch(device=device)
    pruned.jtc_stand_in = linear  # kept with the model (moved by .to() along with it)
    reader.register_forward_pre_hook(_replacing_input(stand_in, linear), with_kwargs=True)
    return pruned


def dropped_copy(model: nn.Module, adapter: Adapter, blocks: tuple[int, ...]) -> nn.Module:
    """A copy of `model` with `blocks` (1-based, not necessarily consecutive: ShortGPT's n
    blocks of lowest Block Influence) removed and nothing in their place, each run of
    consecutive blocks removed as a span (jtc.pruning.checkpoint.prune_blocks), the last first
    so that the numbers of the others hold. `model` itself is not changed."""
    pruned = copy.deepcopy(model)
    runs: list[list[int]] = []
    for block in sorted(set(blocks)):
        if runs and block == runs[-1][-1] + 1:
            runs[-1].append(block)
        else:
            runs.append([block])
    for run in reversed(runs):
        prune_blocks(pruned, adapter, run[0] - 1, len(run))
    return pruned
