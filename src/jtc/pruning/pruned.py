"""A pruned model in memory for every stand-in (torch): what the literature's measures run on
(jtc.pruning's benchmarks, context perplexity and generation fidelity), an ordinary
transformers model with blocks start+1..start+length removed.

- drop and replaceme are exactly the checkpoint `snakemake pruned` writes
  (jtc.pruning.checkpoint.prune_blocks on a copy: replaceme's transform folded into block
  start's MLP); rotation_replaceme folds its transform the same way and applies its rotation
  like rotation's;
- mat, low_rank and rotation act on the residual stream, which no weight owns (rotation folds
  into the blocks before the span in the exported checkpoint, jtc.pruning.rotate; in memory it
  is applied like mat, which it equals up to RMSNorm's epsilon): the blocks are removed the
  same way and a forward pre-hook on what reads h_{i+n} (the first block after the span, or the
  final norm when the span ends the model) replaces its input by the stand-in computed from h_i.

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
from jtc.pruning.spans import MLP_FOLDED
from jtc.shortcuts.maps import ShortcutMap

# the stand-ins that act on the residual stream h_i itself (applied by a hook, not folded)
ON_THE_STREAM = ("mat", "low_rank", "rotation")


def stand_in_state(
    variant: str, linear: nn.Module | None, h: torch.Tensor, x: torch.Tensor | None = None
) -> torch.Tensor:
    """The state that stands in for h_{i+n}, from h_i (and for replaceme block i's MLP output
    X_i): drop h_i; mat A h_i (rotation s·h_i Q, the same with A = s·Q); low_rank
    h_i + low-rank(h_i); replaceme r_i + X_i T with
    r_i = h_i - X_i; rotation_replaceme s·(r_i + X_i T) Q. `linear` is the variant's map as a
    torch module (stand_in_module; None for drop)."""
    if linear is None:
        return h
    if variant in MLP_FOLDED:
        if x is None:
            raise ValueError(f"{variant}'s stand-in needs block i's MLP output X_i")
        if variant == "rotation_replaceme":
            return linear["rotation"](h - x + linear["transform"](x))
        return h - x + linear(x)
    if variant == "low_rank":
        return h + linear(h)
    return linear(h)


def stand_in_module(
    span_map: ShortcutMap | None, rotation: np.ndarray | None = None, device=None
) -> nn.Module | None:
    """A span's stand-in as a torch module on `device` (float32), what stand_in_state takes:
    its map (None for drop); with rotation_replaceme's `rotation` (s·Q)ᵀ, both as a ModuleDict
    ("transform": T, "rotation": s·Q)."""
    if span_map is None:
        return None
    linear = span_map.to_torch(device=device)
    if rotation is None:
        return linear
    turn = ShortcutMap({"weight": rotation}).to_torch(device=device)
    return nn.ModuleDict({"transform": linear, "rotation": turn})


def _replacing_input(variant: str, linear: nn.Module):
    """A forward pre-hook (with_kwargs=True) that replaces a module's hidden-states input h by
    the variant's stand-in computed from it, in float32."""

    def hook(module, args, kwargs):
        hidden = hidden_input(args, kwargs)
        new = stand_in_state(variant, linear, hidden.float()).to(hidden.dtype)
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
    `rotation`: rotation_replaceme's (s·Q)ᵀ, jtc.pruning.map_file.load_stand_in). `model`
    itself is not changed."""
    if variant != "drop" and span_map is None:
        raise ValueError(f"the {variant} stand-in needs the span's map")
    if (variant == "rotation_replaceme") != (rotation is not None):
        raise ValueError(f"the {variant} stand-in and its rotation (or none) do not agree")
    pruned = copy.deepcopy(model)
    if variant == "rotation_replaceme":  # T folded, then s·Q applied to what block i+n+1 reads
        prune_blocks(pruned, adapter, start, length, span_map.tensors["weight"])
        variant, span_map = "rotation", ShortcutMap({"weight": rotation})
    elif variant == "drop" or variant in MLP_FOLDED:
        transform = None if variant == "drop" else span_map.tensors["weight"]
        prune_blocks(pruned, adapter, start, length, transform, variant)
        return pruned
    elif variant in ON_THE_STREAM:
        prune_blocks(pruned, adapter, start, length, None)
    else:
        raise ValueError(f"unknown pruning stand-in '{variant}'")
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
    linear = span_map.to_torch(device=device)
    pruned.jtc_stand_in = linear  # kept with the model (moved by .to() along with it)
    reader.register_forward_pre_hook(_replacing_input(variant, linear), with_kwargs=True)
    return pruned
