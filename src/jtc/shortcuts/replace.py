"""Running a model with block parts replaced by linear maps (sub-module shortcuts), with forward
hooks only.

A "jump" at layer l runs blocks 1..l normally and every later block with the chosen parts
replaced by their maps at every position. The states h_l at every position (the prefix) are the
same for every variant, so one unmodified forward pass records them at every jump layer at once
(`prefix_states`) and each (jump layer, variant) runs only the blocks after l from them
(`replaced_final_states`). `replaced_scores` does both for every jump layer and variant and
scores each run's prediction against the unmodified model's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from jtc.data.extract import padded_batches, run_states
from jtc.logs import Progress
from jtc.model.adapters import Adapter
from jtc.model.head import Head
from jtc.model.hooks import StateRecorder, hidden_input, hidden_output, substitute_input
from jtc.model.kept_blocks import running_only
from jtc.model.scoring import final_reference, score, score_table
from jtc.shortcuts.maps import ShortcutMap

log = logging.getLogger(__name__)


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
    jumps: Sequence[int],
    batch_size: int,
    pad_id: int,
) -> dict[int, list[np.ndarray]]:
    """{jump layer l: h_l at every position of each sequence, (len, d) float32 each}, from one
    pass of the unmodified model over blocks 1..max(jumps) (l = 0: the embedding output; l = L:
    the last block's output, before any final norm)."""
    blocks = adapter.blocks(model)
    backbone = adapter.backbone(model)
    device = next(model.parameters()).device
    last = max(jumps)
    captured: dict[int, torch.Tensor] = {}

    def keep(jump: int, hidden: torch.Tensor) -> None:
        # a copy: a later block could modify its input in place
        captured[jump] = hidden.to("cpu", torch.float32, copy=True)

    def before(jump: int):
        def hook(module, args, kwargs):
            keep(jump, hidden_input(args, kwargs))
            if jump == last:  # nothing later is needed: skip the rest of the forward pass
                raise _Stop

        return hook

    def after(module, args, output):
        keep(len(blocks), hidden_output(output))

    handles = [
        blocks[jump].register_forward_pre_hook(before(jump), with_kwargs=True)
        for jump in set(jumps)
        if jump < len(blocks)
    ]
    if last == len(blocks):
        handles.append(blocks[-1].register_forward_hook(after))
    out = {jump: [np.empty(0)] * len(inputs) for jump in jumps}
    try:
        for rows, ids, mask in padded_batches(inputs, batch_size, pad_id):
            captured.clear()
            try:
                backbone(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False)
            except _Stop:
                pass
            for jump, states in out.items():
                hidden = captured[jump].numpy()
                for j, r in enumerate(rows):
                    states[r] = hidden[j, : len(inputs[r])]
    finally:
        for handle in handles:
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
    batch: dict[str, torch.Tensor] = {}

    def load_batch(rows: np.ndarray) -> None:
        length = max(len(prefix[r]) for r in rows)
        states = torch.zeros((len(rows), length, prefix[rows[0]].shape[1]))
        for j, r in enumerate(rows):
            # a copy: stored states may be read-only Arrow memory, which torch warns about
            states[j, : len(prefix[r])] = torch.tensor(np.asarray(prefix[r], np.float32))
        batch["states"] = states

    # only blocks jump+1..L run (the config's per-layer settings theirs); block jump+1's input
    # becomes the stored h_jump of the batch
    with running_only(model, adapter, range(jump, len(blocks))) as suffix:
        handle = suffix[0].register_forward_pre_hook(
            substitute_input(lambda: batch["states"]), with_kwargs=True
        )
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
    return states[-1]


def replaced_scores(
    model: nn.Module,
    adapter: Adapter,
    head: Head,
    inputs: list[np.ndarray],
    final_states: np.ndarray,
    sentence_ids: np.ndarray,
    positions: np.ndarray,
    gold_ids: np.ndarray,
    part_maps: Mapping[tuple[int, str], ShortcutMap],
    *,
    variants: Mapping[str, Sequence[str]],
    jumps: Sequence[int],
    top_k: int,
    batch_size: int,
    pad_id: int,
) -> pa.Table:
    """For every jump layer l in `jumps`: h_l at every position of the sentences `inputs` (their
    token ids), from one pass of the unmodified model (blocks 1..max(jumps)); then for each
    variant (`variants`: its part names), blocks l+1..L run from those states with the variant's
    parts replaced by their maps (`part_maps`), and the final states at `positions` decoded and
    scored against the unmodified model's prediction (from its stored `final_states`, the
    states h_L there). One table: jtc.model.scoring's score columns, method = variant,
    layer = l. A run that overflows (inf or NaN) counts as a miss, with a warning."""
    started = time.perf_counter()
    prefixes = prefix_states(model, adapter, inputs, jumps, batch_size, pad_id)
    log.info("blocks 1..%d: %.2f s", max(jumps), time.perf_counter() - started)
    reference = final_reference(head, final_states, top_k)
    tables = []
    progress = Progress(len(set(jumps)) * len(variants), "replace", "runs")
    for jump in sorted(set(jumps)):
        for variant, parts in variants.items():
            replaced = {k: m for k, m in part_maps.items() if k[1] in parts}
            started = time.perf_counter()
            states = replaced_final_states(
                model, adapter, prefixes[jump], positions, jump, replaced, batch_size
            )
            forward = time.perf_counter() - started
            scores = score(head, reference, states, gold_ids)
            log.info(
                "%s, jump %d: precision@1 %.3f; forward passes %.2f s",
                variant,
                jump,
                np.mean(scores["final_rank"] == 1),
                forward,
            )
            diverged = int((scores["top1_id"] < 0).sum())
            if diverged:
                log.warning(
                    "%s, jump %d: %d of %d runs overflowed (inf or NaN): counted as misses",
                    variant,
                    jump,
                    diverged,
                    len(sentence_ids),
                )
            tables.append(score_table(variant, jump, sentence_ids, scores))
            progress.update(1)
        del prefixes[jump]  # memory: this jump layer's states are done with
    return pa.concat_tables(tables)
