"""Running a model with block parts replaced by linear maps (sub-module shortcuts), with forward
hooks only.

A "jump" at layer l runs blocks 1..l normally and every later block with the chosen parts
replaced by their maps at every position. The states h_l at every position (the prefix) are the
same for every variant, so they are computed once per jump layer (`prefix_states`) and each
variant runs only the blocks after l from them (`replaced_final_states`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from .adapters import Adapter
from .extract import StateRecorder, hidden_input, hidden_output, padded_batches, run_states
from .maps import ShortcutMap


class PartReplacer:
    """Forward hooks that replace parts of blocks by affine maps, applied at every position:
    the output of a part becomes map(input of the part); the module still runs, its output is
    discarded. `maps` is keyed by (block 1..L, part name); `blocks` is the model's full list."""

    def __init__(
        self,
        adapter: Adapter,
        blocks: Sequence[nn.Module],
        maps: Mapping[tuple[int, str], ShortcutMap],
    ):
        self.inputs: dict[tuple[int, str], torch.Tensor] = {}
        self.handles: list = []
        for key, shortcut in maps.items():
            block, name = key
            first, last = adapter.part(name).modules(blocks[block - 1])
            device = next(blocks[block - 1].parameters()).device
            weight, bias = shortcut.affine()
            weight_t = torch.tensor(weight, dtype=torch.float32, device=device)
            bias_t = (
                None if bias is None else torch.tensor(bias, dtype=torch.float32, device=device)
            )
            self.handles.append(
                first.register_forward_pre_hook(self._keep_input(key), with_kwargs=True)
            )
            self.handles.append(last.register_forward_hook(self._replace(key, weight_t, bias_t)))

    def _keep_input(self, key):
        def hook(module, args, kwargs):
            self.inputs[key] = hidden_input(args, kwargs)

        return hook

    def _replace(self, key, weight: torch.Tensor, bias: torch.Tensor | None):
        def hook(module, args, output):
            x = self.inputs.pop(key)
            out = hidden_output(output)
            w, b = weight.to(x.device), None if bias is None else bias.to(x.device)
            new = nn.functional.linear(x.float(), w, b).to(out.dtype)
            return (new, *output[1:]) if isinstance(output, tuple) else new

        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


class _Stop(Exception):
    """Raised by a hook once the states it needs exist: the rest of the forward pass is skipped."""


@torch.inference_mode()
def prefix_states(
    model: nn.Module,
    adapter: Adapter,
    inputs: list[np.ndarray],
    jump: int,
    batch_size: int,
    pad_id: int,
) -> list[np.ndarray]:
    """h_jump at every position of each sequence, (len, d) float32 each, from the unmodified
    model; only blocks 1..jump run."""
    blocks = adapter.blocks(model)
    backbone = adapter.backbone(model)
    device = next(model.parameters()).device
    captured: list[torch.Tensor] = []

    def before(module, args, kwargs):
        captured.append(hidden_input(args, kwargs))
        raise _Stop

    def after(module, args, output):
        captured.append(hidden_output(output))

    if jump < len(blocks):
        handle = blocks[jump].register_forward_pre_hook(before, with_kwargs=True)
    else:
        handle = blocks[-1].register_forward_hook(after)
    out: list[np.ndarray] = [np.empty(0)] * len(inputs)
    try:
        for rows, ids, mask in padded_batches(inputs, batch_size, pad_id):
            captured.clear()
            try:
                backbone(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False)
            except _Stop:
                pass
            hidden = captured[0].float().cpu().numpy()
            for j, r in enumerate(rows):
                out[r] = hidden[j, : len(inputs[r])]
    finally:
        handle.remove()
    return out


@torch.inference_mode()
def replaced_final_states(
    model: nn.Module,
    adapter: Adapter,
    prefix: list[np.ndarray],
    positions: np.ndarray,
    jump: int,
    maps: Mapping[tuple[int, str], ShortcutMap],
    batch_size: int,
) -> np.ndarray:
    """h_L (n, d) at `positions` when blocks jump+1..L run from the states `prefix` (h_jump at
    every position, as prefix_states gives) with the parts in `maps` replaced; blocks 1..jump
    do not run at all."""
    blocks = adapter.blocks(model)
    if jump == len(blocks):  # nothing runs after the last layer, nothing is replaced
        return np.stack([p[t] for p, t in zip(prefix, positions, strict=True)]).astype(np.float32)
    later = {key: m for key, m in maps.items() if key[0] > jump}
    suffix = list(blocks)[jump:]
    batch: dict[str, torch.Tensor] = {}

    def substitute(module, args, kwargs):
        """Block jump+1's input becomes the stored h_jump of the batch."""
        hidden = hidden_input(args, kwargs)
        new = batch["states"].to(hidden.device, hidden.dtype)
        if args:
            return (new, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": new}

    def load_batch(rows: np.ndarray) -> None:
        length = max(len(prefix[r]) for r in rows)
        states = torch.zeros((len(rows), length, prefix[rows[0]].shape[1]))
        for j, r in enumerate(rows):
            # a copy: stored states may be read-only Arrow memory, which torch warns about
            states[j, : len(prefix[r])] = torch.tensor(np.asarray(prefix[r], np.float32))
        batch["states"] = states

    original = adapter.swap_blocks(model, suffix)
    handle = suffix[0].register_forward_pre_hook(substitute, with_kwargs=True)
    replacer = PartReplacer(adapter, blocks, later)
    try:
        # the token ids only give the batch its shape: block jump+1's input is replaced
        dummies = [np.zeros(len(p), dtype=np.int64) for p in prefix]
        states = run_states(
            model,
            adapter,
            dummies,
            positions,
            batch_size,
            0,
            recorder=StateRecorder(suffix),
            before_batch=load_batch,
        )
    finally:
        replacer.remove()
        handle.remove()
        adapter.swap_blocks(model, original)
    return states[-1]
