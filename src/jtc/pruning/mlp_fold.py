"""ReplaceMe's fold (torch): the final linear layer of a block's MLP, whose output is the MLP's
output X, found by name and checked by running the MLP once, and a d × d transform folded into it
so that the MLP outputs X @ weight.T (jtc.pruning.checkpoint removes the span around it).

The MLP is the block's feed-forward module (jtc.pruning.ffn_site): the `ffn` part of pre-norm
blocks, or the MLP of parallel blocks (GPT-NeoX, GPT-J, Falcon, Phi, Cohere), whose output the
block adds to its input as attention's is. A mixture-of-experts block (a module with `experts`:
Mixtral, Qwen2/3-MoE, OLMoE) outputs X = Σ_e g_e(x)·E_e(x) [+ σ(s(x))·S(x), a shared expert],
so X·T = Σ_e g_e(x)·(E_e(x)·T) [+ σ(s(x))·(S(x)·T)]: T folds into every expert's down
projection (transformers' fused (E, d, d_ff) tensor `experts.down_proj`, or (E, d_ff, d) where
`is_transposed`, its `down_proj_bias` likewise; or a list of expert MLPs) and the shared
expert's final linear layer. Which tensors and which of their axes is checked by rolling their
output channels by one and running the block once: its output must roll by one (exact both
ways: undone after)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from jtc.model.adapters import Adapter, UnsupportedArchitecture, lookup
from jtc.pruning.ffn_site import replaceme_ffn

# names of an MLP's final linear layer, tried in this order (then its last linear child)
FINAL_LINEARS = (
    "down_proj",  # Llama, Mistral, Qwen, Gemma, Phi-3, OLMo
    "c_proj",  # GPT-2, GPT-BigCode, StarCoder2
    "fc2",  # Phi, CLIP-style MLPs
    "dense_4h_to_h",  # BLOOM, Falcon, GPT-NeoX
    "fc_out",  # GPT-J
    "w2",  # Mixtral-style experts, InternLM
    "dense_2",
    "out_proj",
    "wo",
)
SHARED_EXPERTS = ("shared_expert", "shared_experts", "shared_mlp")  # an MoE block's shared MLP


def _linear_width(layer: nn.Module) -> int | None:
    """The output width of a linear layer (nn.Linear or GPT-2's Conv1D), else None."""
    if isinstance(layer, nn.Linear):
        return layer.out_features
    if isinstance(layer, Conv1D):
        return layer.nf
    return None


def _candidates(mlp: nn.Module) -> list[str]:
    """The MLP's children that may be its final linear layer: the usual names, then the last
    linear child in registration order."""
    children = dict(mlp.named_children())
    found = [name for name in FINAL_LINEARS if _linear_width(children.get(name)) is not None]
    linears = [name for name, child in children.items() if _linear_width(child) is not None]
    if linears and linears[-1] not in found:
        found.append(linears[-1])
    return found


def _is_output_of(mlp: nn.Module, layer: nn.Module, width: int) -> bool:
    """Whether the MLP's output is `layer`'s output, run once on a small random input."""
    param = next(mlp.parameters())
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3, width, generator=generator).to(param.device, param.dtype)
    captured: list[torch.Tensor] = []
    handle = layer.register_forward_hook(lambda _m, _a, out: captured.append(out))
    training = mlp.training
    mlp.eval()
    try:
        with torch.no_grad():
            out = mlp(x)
    except Exception:  # noqa: BLE001 - an MLP that does not run on a plain input does not fit
        return False
    finally:
        handle.remove()
        mlp.train(training)
    out = out[0] if isinstance(out, tuple) else out
    if len(captured) != 1 or not isinstance(out, torch.Tensor):
        return False
    got = captured[0]
    if got.shape != out.shape:
        return False
    scale = float(out.abs().max()) or 1.0
    return torch.equal(got, out) or torch.allclose(got, out, rtol=1e-5, atol=1e-6 * scale)


def _dense_final(mlp: nn.Module, width: int) -> tuple[str | None, list[str]]:
    """(name of the MLP's child whose output is the MLP's output, or None; the names tried)."""
    tried = []
    for child in _candidates(mlp):
        layer = getattr(mlp, child)
        tried.append(child)
        if _linear_width(layer) == width and _is_output_of(mlp, layer, width):
            return child, tried
    return None, tried


def final_linear(model: nn.Module, adapter: Adapter, block: int) -> tuple[str, nn.Module] | str:
    """(path from block `block` (1-based), layer) of the MLP's final linear layer (of a
    mixture-of-experts block: its paths, and the block itself), or why there is none that
    ReplaceMe can fold a transform into."""
    name = f"architecture '{adapter.name}' ({type(model).__name__})"
    if adapter.task != "causal":
        return f"{name} is a masked LM: pruning exports causal LMs only"
    try:
        path = replaceme_ffn(adapter)
    except UnsupportedArchitecture as exc:
        return f"{exc}; ReplaceMe folds its transform into the MLP: use --variant drop"
    mlp = lookup(adapter.blocks(model)[block - 1], path)
    width = int(model.config.get_text_config().hidden_size)
    if isinstance(getattr(mlp, "experts", None), nn.Module):
        found = _moe_targets(mlp, width, path)
        if isinstance(found, str):
            return f"{name}: {found}; the transform cannot be folded: use --variant drop"
        return ", ".join(dict.fromkeys(p for p, _, _ in found)), mlp
    child, tried = _dense_final(mlp, width)
    if child is not None:
        return f"{path}.{child}", getattr(mlp, child)
    found = f"tried {', '.join(tried)}" if tried else "it has no nn.Linear or Conv1D child"
    return (
        f"{name}: no final linear layer of the MLP ({path}, {type(mlp).__name__}) whose output is "
        f"the MLP's output ({found}); the transform cannot be folded: use --variant drop"
    )


def fold_problem(model: nn.Module, adapter: Adapter, block: int = 1) -> str | None:
    """Why a ReplaceMe transform cannot be folded into block `block`'s (1-based) MLP of this
    model, else None. The final linear layer is found by name and checked by running the MLP once
    on a random input: its output must be the MLP's output."""
    found = final_linear(model, adapter, block)
    return found if isinstance(found, str) else None


def fold_transform(layer: nn.Module, weight: np.ndarray) -> None:
    """Make a linear layer (or a mixture-of-experts block found by final_linear) output
    y @ weight.T where it output y (float64, then its dtype)."""
    if _linear_width(layer) is None and isinstance(getattr(layer, "experts", None), nn.Module):
        found = _moe_targets(layer, int(np.asarray(weight).shape[0]), "mlp")
        if isinstance(found, str):
            raise UnsupportedArchitecture(found)
        _fold_axes(found, weight)
        return
    with torch.no_grad():
        w = torch.as_tensor(np.asarray(weight), dtype=torch.float64, device=layer.weight.device)
        old = layer.weight.to(torch.float64)
        if isinstance(layer, Conv1D):  # y = a @ W + b, W (d_ff, d)
            new_weight, new_bias = old @ w.T, None
            if layer.bias is not None:
                new_bias = layer.bias.to(torch.float64) @ w.T
        else:  # nn.Linear: y = a @ W.T + b, W (d, d_ff)
            new_weight, new_bias = w @ old, None
            if layer.bias is not None:
                new_bias = w @ layer.bias.to(torch.float64)
        layer.weight.copy_(new_weight.to(layer.weight.dtype))
        if new_bias is not None:
            layer.bias.copy_(new_bias.to(layer.bias.dtype))


# --- mixture-of-experts blocks ------------------------------------------------------------------

# (path from the block, tensor, the axis of the d output channels)
Target = tuple[str, torch.Tensor, int]


def _linear_targets(path: str, layer: nn.Module) -> list[Target]:
    axis = 1 if isinstance(layer, Conv1D) else 0  # Conv1D: W (d_ff, d); nn.Linear: W (d, d_ff)
    found = [(path, layer.weight, axis)]
    if layer.bias is not None:
        found.append((path, layer.bias, 0))
    return found


def _fused_targets(experts: nn.Module, width: int, path: str) -> list[Target] | str:
    """transformers' fused experts: down_proj (E, d, d_ff), or (E, d_ff, d) where the class says
    `is_transposed` (or only that axis has the width); down_proj_bias (E, d)."""
    down = getattr(experts, "down_proj", None)
    if not isinstance(down, torch.Tensor) or down.dim() != 3:
        return (
            f"its experts ({path}, {type(experts).__name__}) are neither a list of MLPs nor "
            "transformers' fused experts with a 3-D down_proj"
        )
    transposed = getattr(experts, "is_transposed", None)
    if not isinstance(transposed, bool):
        transposed = down.shape[2] == width and down.shape[1] != width
    axis = 2 if transposed else 1
    if down.shape[axis] != width:
        return (
            f"its experts' down_proj ({path}.down_proj) has shape {tuple(down.shape)}: no axis "
            f"of the width {width} where its layout has one"
        )
    found = [(f"{path}.down_proj", down, axis)]
    bias = getattr(experts, "down_proj_bias", None)
    if isinstance(bias, torch.Tensor):
        found.append((f"{path}.down_proj_bias", bias, bias.dim() - 1))
    return found


def _moe_targets(moe: nn.Module, width: int, path: str) -> list[Target] | str:
    """Every tensor the mixture-of-experts block `moe`'s output is linear in (the experts' and
    the shared expert's down projections), with its output axis; or why they are not found. Checked
    by rolling their output channels (_permutes)."""
    experts = moe.experts
    if isinstance(experts, nn.ModuleList):
        child, tried = _dense_final(experts[0], width)
        if child is None:
            tried_names = ", ".join(tried) or "none"
            return f"no final linear layer of its experts ({path}.experts; tried {tried_names})"
        found = [
            t
            for e in experts
            for t in _linear_targets(f"{path}.experts.*.{child}", getattr(e, child))
        ]
    else:
        found = _fused_targets(experts, width, f"{path}.experts")
        if isinstance(found, str):
            return found
    for name in SHARED_EXPERTS:
        shared = getattr(moe, name, None)
        if not isinstance(shared, nn.Module):
            continue
        child, tried = _dense_final(shared, width)
        if child is None:
            tried_names = ", ".join(tried) or "none"
            return (
                f"no final linear layer of its shared expert ({path}.{name}; tried {tried_names})"
            )
        found += _linear_targets(f"{path}.{name}.{child}", getattr(shared, child))
    if not _permutes(moe, found, width):
        return (
            f"folding into {', '.join(dict.fromkeys(p for p, _, _ in found))} does not transform "
            f"the output of its mixture-of-experts block ({path}, {type(moe).__name__}) as a "
            "whole (checked by rolling their output channels by one)"
        )
    return found


def _fold_axis(tensor: torch.Tensor, w: torch.Tensor, axis: int) -> None:
    """tensor's axis `axis` (length d, the output channels) times w.T, in float64."""
    moved = tensor.to(torch.float64).movedim(axis, -1) @ w.T
    tensor.copy_(moved.movedim(-1, axis).to(tensor.dtype))


def _fold_axes(targets: list[Target], weight: np.ndarray) -> None:
    """Each tensor's output axis times weight.T; a fused (E, ., .) tensor one expert at a time."""
    with torch.no_grad():
        for _, tensor, axis in targets:
            w = torch.as_tensor(np.asarray(weight), dtype=torch.float64, device=tensor.device)
            if tensor.dim() == 3:
                for expert in tensor:
                    _fold_axis(expert, w, axis - 1)
            else:
                _fold_axis(tensor, w, axis)


def _roll_axes(targets: list[Target], shift: int) -> None:
    """Roll each tensor's output axis by `shift` channels (exact; a fused tensor one expert at
    a time)."""
    with torch.no_grad():
        for _, tensor, axis in targets:
            if tensor.dim() == 3:
                for expert in tensor:
                    expert.copy_(torch.roll(expert, shift, dims=axis - 1))
            else:
                tensor.copy_(torch.roll(tensor, shift, dims=axis))


def _permutes(moe: nn.Module, targets: list[Target], width: int) -> bool:
    """Whether rolling the output channels of `targets` by one (folding a cyclic shift P, then
    P.T after: both exact) rolls the block's output by one on a random input."""
    param = targets[0][1]
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, 8, width, generator=generator).to(param.device, param.dtype)
    training = moe.training
    moe.eval()
    try:
        with torch.no_grad():
            before = moe(x)
            _roll_axes(targets, 1)
            try:
                after = moe(x)
            finally:
                _roll_axes(targets, -1)
    except Exception:  # noqa: BLE001 - a block that does not run on a plain input does not fit
        return False
    finally:
        moe.train(training)
    before = before[0] if isinstance(before, tuple) else before
    after = after[0] if isinstance(after, tuple) else after
    want = torch.roll(before, 1, dims=-1)
    scale = float(want.abs().max()) or 1.0
    return bool(torch.allclose(after, want, rtol=1e-4, atol=1e-5 * scale))
