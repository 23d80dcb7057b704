"""The checks an exported pruned model passes before it is put in place (jtc.pruning.checkpoint
.write_pruned): the pruned model's logits on a random batch against the original model's with
the transform applied by a hook and the blocks skipped, and the written checkpoint, loaded with
plain transformers, against the pruned model (then a few tokens generated with its KV cache).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from jtc.model.adapters import Adapter, lookup
from jtc.model.hooks import hidden_input, hidden_output
from jtc.model.kept_blocks import running_only
from jtc.pruning.ffn_site import replaceme_ffn

CHECK_TOKENS = (2, 7)  # the random batch an export is checked on: sequences x tokens
CHECK_NEW_TOKENS = 2  # tokens an export generates when it is checked
# largest logit error, relative to the largest logit: of the pruned model against the hooked
# reference (float32 weights; 16-bit ones, where the folded matrix is rounded), and of the
# written checkpoint loaded with transformers against the pruned model in memory
FOLD_TOLERANCE, FOLD_TOLERANCE_16BIT, RELOAD_TOLERANCE = 1e-3, 0.2, 1e-3


def check_batch(model: nn.Module) -> dict[str, torch.Tensor]:
    vocab = model.get_input_embeddings().num_embeddings
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, max(4, vocab - 1), CHECK_TOKENS, generator=generator)
    device = next(model.parameters()).device
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}


def hooked_logits(
    model: nn.Module,
    adapter: Adapter,
    start: int,
    length: int,
    transform: np.ndarray | None,
    batch: dict[str, torch.Tensor],
    rotation: np.ndarray | None = None,
) -> torch.Tensor:
    """The logits of the pruned model computed on the unpruned one, with hooks: block `start`'s
    MLP output times the transform (weight, X @ transform.T), what reads h_{start+length} (the
    next block or the final norm) reads h @ rotation.T instead of h (rotation: (s·Q)ᵀ), blocks
    start+1..start+length skipped (and the config's per-layer settings those of the blocks
    kept)."""
    blocks = adapter.blocks(model)
    handles = []
    if rotation is not None:
        end = start + length
        reader = blocks[end] if end < len(blocks) else adapter.final_norm(model)
        turn = _float64(rotation, next(reader.parameters()).device)

        def rotated(_module, args, kwargs):
            h = hidden_input(args, kwargs)
            new = (h.double() @ turn.T).to(h.dtype)
            return ((new, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": new})

        handles.append(reader.register_forward_pre_hook(rotated, with_kwargs=True))
    if transform is not None:
        mlp = lookup(blocks[start - 1], replaceme_ffn(adapter))
        w = _float64(transform, next(mlp.parameters()).device)

        def transformed(_module, _args, out):  # an MoE block may return (X, router logits)
            x = hidden_output(out)
            new = (x.double() @ w.T).to(x.dtype)
            return (new, *out[1:]) if isinstance(out, tuple) else new

        handles.append(mlp.register_forward_hook(transformed))
    kept = [b for b in range(len(blocks)) if not start <= b < start + length]
    try:
        with torch.no_grad(), running_only(model, adapter, kept):
            return model(**batch, use_cache=False).logits.float()
    finally:
        for handle in handles:
            handle.remove()


def _float64(matrix: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(np.asarray(matrix), dtype=torch.float64, device=device)


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    if got.shape != want.shape:
        return float("inf")
    return float((got - want).abs().max()) / (float(want.abs().max()) or 1.0)


def check_fold(
    pruned: torch.Tensor,
    reference: torch.Tensor,
    dtype: torch.dtype,
    tolerance: float | None = None,
) -> float:
    """The pruned model's logits against the hooked reference's: equal up to rounding (in 16-bit
    weights the folded matrix is rounded once more, so only gross errors are refused; a caller
    whose fold rounds more in float32 passes its own `tolerance`)."""
    error = _relative_error(pruned, reference)
    if dtype != torch.float32:
        tolerance = FOLD_TOLERANCE_16BIT
    elif tolerance is None:
        tolerance = FOLD_TOLERANCE
    if not error <= tolerance:
        raise RuntimeError(
            f"the pruned model's logits differ from the hooked reference's (the original model "
            f"with the transform applied by a hook and the blocks skipped) by {error:.2g} of "
            f"their largest value (tolerance {tolerance}); nothing was written. Please report "
            f"this with the model's config.json"
        )
    return error


def check_export(
    folder: Path, pruned: torch.Tensor, batch: dict[str, torch.Tensor], dtype: torch.dtype
) -> float:
    """Load the written checkpoint with plain transformers (no remote code), compare its logits
    with the pruned model's in memory, and generate a few tokens with its KV cache."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, trust_remote_code=False)
    model = model.to(pruned.device).eval()
    with torch.no_grad():
        error = _relative_error(model(**batch, use_cache=False).logits.float(), pruned)
        if not error <= RELOAD_TOLERANCE:
            raise RuntimeError(
                f"the checkpoint written to {folder} does not reproduce the pruned model: loaded "
                f"with transformers, its logits differ from the pruned model's by {error:.2g} of "
                f"their largest value (tolerance {RELOAD_TOLERANCE}; a per-layer setting of the "
                f"config that pruning does not follow?); nothing was written. Please report this "
                f"with the model's config.json"
            )
        pad = getattr(model.generation_config, "pad_token_id", None)
        model.generate(
            **batch,
            max_new_tokens=CHECK_NEW_TOKENS,
            do_sample=False,
            pad_token_id=pad if pad is not None else 0,
        )
    return error
