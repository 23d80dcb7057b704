"""ReplaceMe's fold (torch): the final linear layer of a block's MLP, whose output is the MLP's
output X, found by name and checked by running the MLP once, and a d × d transform folded into it
so that the MLP outputs X @ weight.T (jtc.pruning.checkpoint removes the span around it)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from jtc.model.adapters import Adapter, UnsupportedArchitecture, lookup, part_adapter

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


def _mlp(adapter: Adapter, block: nn.Module) -> tuple[str, nn.Module]:
    part = adapter.part("ffn")
    return part.input_path, lookup(block, part.input_path)


def final_linear(model: nn.Module, adapter: Adapter, block: int) -> tuple[str, nn.Module] | str:
    """(path from block `block` (1-based), layer) of the MLP's final linear layer, or why there
    is none that ReplaceMe can fold a transform into."""
    name = f"architecture '{adapter.name}' ({type(model).__name__})"
    if adapter.task != "causal":
        return f"{name} is a masked LM: pruning exports causal LMs only"
    try:
        part_adapter(adapter)
        part = adapter.part("ffn")
    except UnsupportedArchitecture as exc:
        return f"{exc}; ReplaceMe folds its transform into the MLP: use --variant drop"
    if adapter.parts[0].name == "attn":
        return (
            f"{name} has post-norm blocks (a norm after each residual add), so a block's output "
            "is not r + X with X its MLP output: ReplaceMe's transform cannot be folded into the "
            "MLP; use --variant drop"
        )
    if part.output != part.input_path:
        return (
            f"{name} has a norm after its MLP ({part.output}, before the residual add), so the "
            f"transform cannot be folded into the MLP's final linear layer: use --variant drop"
        )
    blocks = adapter.blocks(model)
    path, mlp = _mlp(adapter, blocks[block - 1])
    width = int(model.config.get_text_config().hidden_size)
    tried = []
    for child in _candidates(mlp):
        layer = getattr(mlp, child)
        tried.append(child)
        if _linear_width(layer) == width and _is_output_of(mlp, layer, width):
            return f"{path}.{child}", layer
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
    """Make a linear layer output y @ weight.T where it output y (float64, then its dtype)."""
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
