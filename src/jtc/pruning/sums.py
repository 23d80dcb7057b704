"""The calibration sums of depth pruning (torch): in one streaming pass over every token of the
calibration text (windows or sentences), everything every span's fit and statistics need
(jtc.pruning.fits fits the maps from them); and the hooks that keep every block's states, which
the evaluation runs (jtc.pruning.runs) use too.

A batch runs once unmodified, with forward hooks that give h_0..h_L and every block's
feed-forward output X_l at every position. Memory: the sums hold StatisticsPlan.matrices()
d × d float64 matrices on the model's device; a batch holds (2L + 1) × its tokens × d states.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from jtc.data.extract import padded_batches
from jtc.logs import Progress
from jtc.model.adapters import Adapter, lookup
from jtc.model.hooks import hidden_input, hidden_output
from jtc.pruning.ffn_site import feed_forward_output
from jtc.pruning.fits import SpanGrams
from jtc.pruning.hadamard import hadamard
from jtc.pruning.spans import StatisticsPlan, sums_batch


@contextmanager
def every_state(model: nn.Module, adapter: Adapter, ffn: bool) -> Iterator[dict]:
    """Hooks that keep, for each forward pass, h_0..h_L (`"states"`, float32, at every position)
    and, with `ffn`, each block's feed-forward output X_1..X_L (`"ffn"`, index l - 1)."""
    blocks = adapter.blocks(model)
    kept: dict[str, list] = {"states": [None] * (len(blocks) + 1), "ffn": [None] * len(blocks)}

    def keep(kind: str, index: int, value: torch.Tensor) -> None:
        kept[kind][index] = value.detach().float()

    handles = [
        blocks[0].register_forward_pre_hook(
            lambda m, args, kwargs: keep("states", 0, hidden_input(args, kwargs)),
            with_kwargs=True,
        )
    ]
    for layer, block in enumerate(blocks, 1):
        handles.append(
            block.register_forward_hook(
                lambda m, a, out, layer=layer: keep("states", layer, hidden_output(out))
            )
        )
        if ffn:  # cloned: Falcon's parallel blocks add attention's output to it in place
            last = lookup(block, feed_forward_output(adapter))
            handles.append(
                last.register_forward_hook(
                    lambda m, a, out, layer=layer: keep(
                        "ffn", layer - 1, hidden_output(out).detach().clone()
                    )
                )
            )
    try:
        yield kept
    finally:
        for handle in handles:
            handle.remove()


def counted(mask: torch.Tensor, skip_first_token: bool) -> torch.Tensor:
    """The positions calibration counts of a batch padded on the right (its attention mask):
    every real token, or with `skip_first_token` every one but each sequence's first (position
    0; it still runs as context for the others)."""
    if not skip_first_token:
        return mask
    mask = mask.clone()
    mask[:, 0] = 0
    return mask


def _tokens(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The rows of the real tokens of a batch (B, T, d) -> (N, d), float64."""
    return states[mask.bool()].double()


@torch.inference_mode()
def span_statistics(
    model: nn.Module,
    adapter: Adapter,
    inputs: list[np.ndarray],
    plan: StatisticsPlan,
    batch_size: int,
    pad_id: int,
    skip_first_token: bool = False,
) -> SpanGrams:
    """The sums of `plan` over every token of the sequences `inputs` (token ids: windows or
    sentences), float64, accumulated batch by batch on the model's device; with
    `skip_first_token`, every token but each sequence's first (whose states are many times
    larger than the others' and weigh most in least squares; it still runs, as context for the
    others). A batch takes fewer than `batch_size` sequences where their states would pass
    jtc.pruning.spans.SUMS_BATCH_BYTES (long windows)."""
    blocks = adapter.blocks(model)
    backbone = adapter.backbone(model)
    device = next(model.parameters()).device
    width = model.config.hidden_size
    num_layers = len(blocks)
    longest = max((len(x) for x in inputs), default=1)
    batch_size = sums_batch(batch_size, longest, num_layers, width)

    def zeros(*shape: int) -> torch.Tensor:
        return torch.zeros(shape or (width, width), dtype=torch.float64, device=device)

    squares = torch.zeros(num_layers + 1, dtype=torch.float64, device=device)
    scalars = {key: torch.zeros(3, dtype=torch.float64, device=device) for key in plan.pairs}
    state_grams = {i: zeros() for i in plan.state_sources}
    state_cross = {key: zeros() for key in plan.state_pairs}
    ffn_grams = {i: zeros() for i in plan.ffn_blocks}
    ffn_own = {i: zeros() for i in plan.ffn_blocks}
    ffn_cross = {key: zeros() for key in plan.ffn_pairs}
    # per channel Σ|h_l| and Σ|h_l H|, H the Hadamard matrix (jtc.pruning.compensation)
    magnitudes = {layer: zeros(width) for layer in plan.magnitude_states}
    rotated = {layer: zeros(width) for layer in plan.hadamard_states}
    turn = torch.tensor(hadamard(width), device=device) if rotated else None
    tokens = 0
    progress = Progress(len(inputs), "calibrate", "sequences")
    with every_state(model, adapter, ffn=bool(plan.ffn_blocks)) as kept:
        for rows, ids, mask in padded_batches(inputs, batch_size, pad_id):
            mask = mask.to(device)
            backbone(input_ids=ids.to(device), attention_mask=mask, use_cache=False)
            mask = counted(mask, skip_first_token)
            h = [_tokens(s, mask) for s in kept["states"]]
            tokens += len(h[0])
            squares += torch.stack([(x * x).sum() for x in h])
            norms = [x.norm(dim=1).clamp(min=torch.finfo(torch.float64).tiny) for x in h]
            for (i, j), sums in scalars.items():
                dots = (h[i] * h[j]).sum(1)
                cos = (dots / (norms[i] * norms[j])).clamp(-1.0, 1.0)
                sums += torch.stack([dots.sum(), cos.sum(), torch.arccos(cos).sum() / np.pi])
            for i, gram in state_grams.items():
                gram += h[i].T @ h[i]
            for (i, j), cross in state_cross.items():
                cross += h[i].T @ h[j]
            for i in plan.ffn_blocks:
                x = _tokens(kept["ffn"][i - 1], mask)
                ffn_grams[i] += x.T @ x
                ffn_own[i] += x.T @ h[i]
                for j in (j for k, j in plan.ffn_pairs if k == i):
                    ffn_cross[i, j] += x.T @ h[j]
            for layer, total in magnitudes.items():
                total += h[layer].abs().sum(0)
            for layer, total in rotated.items():
                total += (h[layer] @ turn).abs().sum(0)
            del h, norms  # not held through the next batch's forward (2 GiB at 2,048 tokens)
            progress.update(len(rows))

    def host(values: Mapping) -> dict:
        return {key: value.cpu().numpy() for key, value in values.items()}

    sums = host(scalars)
    return SpanGrams(
        num_layers=num_layers,
        tokens=tokens,
        squares=squares.cpu().numpy(),
        dots={key: float(v[0]) for key, v in sums.items()},
        cosines={key: float(v[1]) for key, v in sums.items()},
        angles={key: float(v[2]) for key, v in sums.items()},
        state_grams=host(state_grams),
        state_cross=host(state_cross),
        ffn_grams=host(ffn_grams),
        ffn_cross=host(ffn_cross),
        ffn_own=host(ffn_own),
        magnitudes=host(magnitudes),
        hadamard_magnitudes=host(rotated),
    )
