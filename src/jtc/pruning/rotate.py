"""Depth pruning's rotation stand-in folded into a causal LM (torch): h_{i+n} := s·h_i Q, Q
orthogonal and s > 0 (jtc.pruning.fits's scaled orthogonal Procrustes fit), made part of the
weights of the embeddings and blocks 1..i, so that blocks i+n+1.. read s·h_i Q with no map
between them: the pruned model is the model's own architecture (SliceGPT's computational
invariance, arXiv 2401.15024).

Row vectors; torch.nn.Linear computes y = x Wᵀ + b with W (out, in). In a pre-norm RMSNorm
block (Llama, Mistral, Qwen2, Qwen3, SmolLM2) the stream h is read only through RMSNorm(h)·g
followed by linear layers (q, k, v; gate, up) and written only by linear layers (o_proj,
down_proj) whose output is added to it. With h' = s·h Q:

1. each gain g of blocks 1..i folds into the layers that read its norm, W ← W diag(g), and
   becomes 1: RMSNorm without a gain satisfies RMSNorm(s·x Q) = RMSNorm(x) Q (Q keeps ||x||,
   the scale s cancels; only the epsilon under the root makes it inexact, by eps/(s²·ms(x)));
2. every write into the stream is rotated: y' = s·y Q, so W ← s·Qᵀ W and b ← s·b Q, and the
   embeddings E ← s·E Q (rows);
3. every read sees RMSNorm(x) Q and must compute what it did: W ← W Q (then
   RMSNorm(x) Q (W Q)ᵀ = RMSNorm(x) Wᵀ).

So blocks 1..i compute s·h_l Q in place of h_l, and once blocks i+1..i+n are removed block i+n+1
(or the final norm) reads s·h_i Q ≈ h_{i+n}. A tied output embedding is untied first: the head
reads the final stream, which is not rotated, so it keeps the original matrix. Start 0 rotates
the embeddings only.

Refused, naming the model and the reason: LayerNorm models (GPT-2: a mean subtracted, so the
norm does not commute with Q), norms whose gain is not a plain multiplier (Gemma's 1 + w),
post-norms or norms after a sub-layer (Gemma 2/3's post-attention and post-feed-forward norms,
which write into the stream), fused or unnamed projections, position embeddings added to the
stream.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from jtc.model.adapters import Adapter, lookup
from jtc.pruning.export_check import check_fold

# pruning.json's folded_into of a rotation
FOLDED_INTO = (
    "embeddings and blocks 1..{start}: norm gains into q/k/v/gate/up_proj, those read the "
    "rotated stream, embeddings and o/down_proj write s·h Q; output embeddings untied"
)
# the linear layers that read a block's normalised stream and write into it, by part
READS = {"attn": ("q_proj", "k_proj", "v_proj"), "ffn": ("gate_proj", "up_proj")}
WRITES = {"attn": "o_proj", "ffn": "down_proj"}
NORM_OF = {"attn": "attn_norm", "ffn": "ffn_norm"}
# how far from orthogonal a stored rotation may be (max |QᵀQ - I|): float32 storage rounds it
ORTHOGONAL_TOLERANCE = 1e-4


def split_rotation(weight: np.ndarray) -> tuple[float, np.ndarray]:
    """(s, Q) of a rotation map stored as weight = (s·Q)ᵀ (torch.nn.Linear's convention,
    jtc.pruning.fits): s = ||weight||_F / √d, Q = weightᵀ / s. A ValueError when it is not a
    positive multiple of an orthogonal matrix."""
    w = np.asarray(weight, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] != w.shape[1]:
        raise ValueError(f"a rotation map must be square; this one has shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("the rotation map has non-finite values (NaN or inf)")
    scale = float(np.linalg.norm(w)) / np.sqrt(len(w))
    if scale <= 0:
        raise ValueError("the rotation map is zero (scale s = 0): it cannot stand in for a span")
    q = w.T / scale
    off = float(np.abs(q.T @ q - np.eye(len(q))).max())
    if off > ORTHOGONAL_TOLERANCE:
        raise ValueError(
            f"the rotation map is not a scaled orthogonal matrix (max |QᵀQ - I| = {off:.2g}, "
            f"tolerance {ORTHOGONAL_TOLERANCE}): is it a rotation variant's map?"
        )
    return scale, q


def _is_rms_norm(norm: nn.Module, width: int) -> bool:
    """Whether `norm` computes x / sqrt(mean(x²) + eps) · weight, run once on a random input."""
    weight = getattr(norm, "weight", None)
    if not isinstance(weight, nn.Parameter) or tuple(weight.shape) != (width,):
        return False
    if getattr(norm, "bias", None) is not None:
        return False
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    if not isinstance(eps, float):
        return False
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, width, generator=generator, dtype=torch.float64) * 3 + 1
    x = x.to(weight.device, weight.dtype)
    with torch.no_grad():
        try:
            got = norm(x).double()
        except Exception:  # noqa: BLE001 - a norm that does not run on a plain input does not fit
            return False
        xd = x.double()
        want = xd / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    tolerance = 1e-5 if weight.dtype in (torch.float32, torch.float64) else 2e-2
    return bool(torch.allclose(got, want, rtol=tolerance, atol=tolerance))


def _has_weights(module: nn.Module) -> bool:
    return next(module.parameters(), None) is not None


def _linear(parent: nn.Module, name: str, width: int, side: str) -> nn.Linear | None:
    layer = getattr(parent, name, None)
    if not isinstance(layer, nn.Linear):
        return None
    return layer if (layer.in_features if side == "in" else layer.out_features) == width else None


def rotation_problem(model: nn.Module, adapter: Adapter, start: int) -> str | None:
    """Why a rotation cannot be folded into the embeddings and blocks 1..`start` of this model
    (its architecture, checked on every block whatever `start`), else None."""
    name = f"architecture '{adapter.name}' ({type(model).__name__})"
    instead = "the rotation cannot be folded into its weights: use --variant drop or replaceme"
    if adapter.task != "causal":
        return f"{name} is a masked LM: pruning exports causal LMs only"
    roles = tuple(p.name for p in adapter.parts)
    if roles != ("attn_norm", "attn", "ffn_norm", "ffn"):
        why = "post-norm blocks" if roles and roles[0] == "attn" else f"block parts {roles}"
        return f"{name} has {why}, not pre-norm blocks (norm, sub-layer, residual add); {instead}"
    for part in adapter.parts:
        if part.output != part.input_path:
            return (
                f"{name} has a norm after a sub-layer ({part.output}) writing into the residual "
                f"stream, which a rotation of the stream does not commute with; {instead}"
            )
    width = int(model.config.get_text_config().hidden_size)
    # every block, not only 1..start: the architecture is refused whatever the span
    for index, block in enumerate(adapter.blocks(model)):
        problem = _block_problem(block, adapter, width)
        if problem:
            return f"{name}, block {index + 1}: {problem}; {instead}"
    embeddings = model.get_input_embeddings()
    if not isinstance(embeddings, nn.Embedding) or embeddings.embedding_dim != width:
        return f"{name}: its input embeddings are no nn.Embedding of width {width}; {instead}"
    backbone = adapter.backbone(model)
    own = {adapter.blocks_path.split(".")[0], (adapter.final_norm_attr or "").split(".")[0]}
    for child_name, child in backbone.named_children():
        if child is not embeddings and child_name not in own and _has_weights(child):
            return (
                f"{name}: its backbone's '{child_name}' has weights besides the token "
                f"embeddings, blocks and final norm (position embeddings added to the stream?); "
                f"{instead}"
            )
    return None


def _block_problem(block: nn.Module, adapter: Adapter, width: int) -> str | None:
    """Why one block is not a pre-norm RMSNorm block that reads and writes the stream only
    through the named linear layers, else None."""
    paths = {p.name: p.input_path for p in adapter.parts}
    for child_name, child in block.named_children():
        if child_name not in paths.values() and _has_weights(child):
            return f"'{child_name}' has weights outside its norms, attention and MLP"
    for role in ("attn", "ffn"):
        norm = lookup(block, paths[NORM_OF[role]])
        if not _is_rms_norm(norm, width):
            return (
                f"its norm '{paths[NORM_OF[role]]}' ({type(norm).__name__}) is not an RMSNorm "
                "x / rms(x) · g (a LayerNorm subtracts the mean; Gemma's gain is 1 + g), so it "
                "does not commute with a rotation"
            )
        sub = lookup(block, paths[role])
        named = {*READS[role], WRITES[role]}
        for layer_name, layer in sub.named_modules():
            if isinstance(layer, nn.Linear) and layer_name not in named:
                return f"'{paths[role]}.{layer_name}' is a linear layer jtc cannot place"
        missing = [r for r in READS[role] if _linear(sub, r, width, "in") is None]
        if _linear(sub, WRITES[role], width, "out") is None:
            missing.append(WRITES[role])
        if missing:
            return (
                f"'{paths[role]}' ({type(sub).__name__}) has no linear layers "
                f"{', '.join(missing)} reading or writing the stream (fused projections?)"
            )
    return None


def untie_output_embeddings(model: nn.Module) -> None:
    """Give the output embedding its own copy of the matrix it shares with the input one (and
    the config tie_word_embeddings false), so that rotating the input embeddings leaves it."""
    head = model.get_output_embeddings()
    embeddings = model.get_input_embeddings()
    if head is not None and head.weight is embeddings.weight:
        head.weight = nn.Parameter(embeddings.weight.detach().clone())
    for config in {id(c): c for c in (model.config, model.config.get_text_config())}.values():
        if getattr(config, "tie_word_embeddings", False):
            config.tie_word_embeddings = False


def _rows(weight: torch.Tensor, matrix: torch.Tensor) -> None:
    """weight ← weight @ matrix, computed in float64."""
    weight.copy_((weight.double() @ matrix).to(weight.dtype))


def fold_rotation(
    model: nn.Module, adapter: Adapter, start: int, scale: float, rotation: np.ndarray
) -> None:
    """Fold h ↦ s·h Q into the embeddings and blocks 1..`start` (1-based) of `model`, in place
    (module docstring): afterwards block l <= start outputs s·h_l Q where it output h_l. The
    blocks after `start` are not changed; remove the span with prune_blocks. Refuses (a
    ValueError naming the reason) what rotation_problem refuses, before changing anything."""
    problem = rotation_problem(model, adapter, start)
    if problem:
        raise ValueError(problem)
    width = int(model.config.get_text_config().hidden_size)
    q_np = np.asarray(rotation, dtype=np.float64)
    if q_np.shape != (width, width):
        raise ValueError(f"the rotation has shape {q_np.shape}; the model's width is {width}")
    untie_output_embeddings(model)
    paths = {p.name: p.input_path for p in adapter.parts}
    embeddings = model.get_input_embeddings()
    with torch.no_grad():
        q = torch.as_tensor(q_np, dtype=torch.float64, device=embeddings.weight.device)
        _rows(embeddings.weight, scale * q)  # E ← s·E Q
        for block in list(adapter.blocks(model))[:start]:
            for role in ("attn", "ffn"):
                norm = lookup(block, paths[NORM_OF[role]])
                sub = lookup(block, paths[role])
                gain = norm.weight.double()
                for name in READS[role]:  # W ← W diag(g) Q
                    layer = getattr(sub, name)
                    _rows(layer.weight, gain[:, None] * q.to(layer.weight.device))
                norm.weight.fill_(1.0)
                write = getattr(sub, WRITES[role])  # W ← s·Qᵀ W, b ← s·b Q
                qd = q.to(write.weight.device)
                write.weight.copy_((scale * qd.T @ write.weight.double()).to(write.weight.dtype))
                if write.bias is not None:
                    write.bias.copy_((scale * write.bias.double() @ qd).to(write.bias.dtype))


# the folded model's logits against the hooked stand-in's, the epsilon made exact: transformers
# computes RMSNorm in float32 whatever the weights' dtype, and the rotated stream rounds otherwise
# than the original; with ReplaceMe's transform on top that rounding grows (SmolLM2, blocks 13-20,
# rotation_replaceme: 2.6e-3 of the largest logit in float32, 5.4e-4 with float64 weights, 1.7e-5
# with the norms in float64 too; the folded model's perplexity on 64 sentences within 0.002% of
# the hooked one's). Rotation alone: 5.8e-5
ROTATED_FOLD_TOLERANCE = 1e-2
# the folded model's logits may differ from the hooked rotation's by RMSNorm's epsilon alone
# (eps against s²·eps in blocks 1..i): beyond this share of the largest logit it is refused
EPSILON_TOLERANCE = 0.05


@contextmanager
def _epsilon_times(model: nn.Module, adapter: Adapter, start: int, factor: float):
    """Blocks 1..start's norms with their epsilon multiplied by `factor`, then restored."""
    paths = [p.input_path for p in adapter.parts if p.name in NORM_OF.values()]
    norms = [lookup(b, p) for b in list(adapter.blocks(model))[:start] for p in paths]
    names = ["variance_epsilon" if hasattr(n, "variance_epsilon") else "eps" for n in norms]
    old = [getattr(n, name) for n, name in zip(norms, names, strict=True)]
    try:
        for norm, name, eps in zip(norms, names, old, strict=True):
            setattr(norm, name, eps * factor)
        yield
    finally:
        for norm, name, eps in zip(norms, names, old, strict=True):
            setattr(norm, name, eps)


def check_rotation_fold(
    model: nn.Module,
    adapter: Adapter,
    start: int,
    weight: np.ndarray,
    batch: dict[str, torch.Tensor],
    reference: torch.Tensor,
) -> dict[str, float]:
    """The checks of a rotation folded into `model` (the span removed) against the hooked
    `reference` (h_{i+n} := s·h_i Q): with blocks 1..start's epsilon made s²·eps the fold is
    exact (fold_error_relative, export_check.check_fold's tolerance); as written it differs by
    the epsilon's share alone (epsilon_error_relative, refused above EPSILON_TOLERANCE)."""
    scale, _ = split_rotation(weight)
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        with _epsilon_times(model, adapter, start, scale * scale):
            exact = model(**batch, use_cache=False).logits.float()
        written = model(**batch, use_cache=False).logits.float()
    check = {"fold_error_relative": check_fold(exact, reference, dtype, ROTATED_FOLD_TOLERANCE)}
    error = float((written - reference).abs().max()) / (float(reference.abs().max()) or 1.0)
    if not error <= EPSILON_TOLERANCE:
        raise RuntimeError(
            f"the rotation (scale s = {scale:.3g}) folds exactly but for RMSNorm's epsilon, and "
            f"that changes the logits by {error:.2g} of their largest value (tolerance "
            f"{EPSILON_TOLERANCE}): the states of blocks 1..{start} are too small against the "
            "epsilon; nothing was written. Export another span, or --variant replaceme or drop"
        )
    check["epsilon_error_relative"] = error
    return check
