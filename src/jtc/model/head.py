"""A decoder head as a few plain operations on tensors of the cached weights, so that the jobs
which only decode (prediction, the tuned lens) need torch and safetensors but neither
transformers nor the model's classes: importing those is most of such a job's start-up (about
3 of 5 CPU-s on the 2-core development machine).

When a model is cached, `describe` writes the head into its info.json as operations (layer
norm, RMS norm, a linear map, an activation) over named tensors of model.safetensors, and keeps
the description only if the head it builds gives the model's own logits on random states. A
head it does not recognise (or that fails that check) has no description, and `load_decoder_head`
falls back to building the head through transformers (jtc.model.cache.load_head): the same head,
slower to load.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn

from jtc.evaluation.decode import Head
from jtc.files.io import CorruptFileError, read_json
from jtc.model.manifest import check_manifest

ACTIVATIONS = {
    "gelu": lambda x: nn.functional.gelu(x),
    "gelu_new": lambda x: nn.functional.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: nn.functional.gelu(x, approximate="tanh"),
    "relu": nn.functional.relu,
    "silu": nn.functional.silu,
    "tanh": torch.tanh,
}
CHECK_ROWS = 8  # random states the described head must decode as the model's own head does


class PlainTransform(nn.Module):
    """The head's transform (final norm, or BERT's dense + activation + norm) as operations."""

    def __init__(self, ops: list[dict[str, Any]], tensors: dict[str, torch.Tensor]):
        super().__init__()
        self.ops = ops
        for name, tensor in tensors.items():
            self.register_buffer(name.replace(".", "__"), tensor)

    def _get(self, op: int, part: str) -> torch.Tensor | None:
        return getattr(self, f"op{op}__{part}", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, op in enumerate(self.ops):
            kind = op["op"]
            if kind == "layer_norm":
                weight, bias = self._get(i, "weight"), self._get(i, "bias")
                x = nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, op["eps"])
            elif kind == "rms_norm":
                x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + op["eps"])
                x = self._get(i, "weight") * x
            elif kind == "linear":
                x = nn.functional.linear(x, self._get(i, "weight"), self._get(i, "bias"))
            elif kind == "activation":
                x = ACTIVATIONS[op["name"]](x)
            else:
                raise CorruptFileError(f"unknown head operation {kind!r}")
        return x


class Unembedding(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)


def _named_tensors(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Every parameter and buffer under every name it has (a tied weight has several)."""
    return [
        *model.named_parameters(remove_duplicate=False),
        *model.named_buffers(remove_duplicate=False),
    ]


def parameter_names(model: nn.Module) -> dict[int, list[str]]:
    """Every name of each parameter and buffer, by the tensor's id."""
    names: dict[int, list[str]] = {}
    for name, value in _named_tensors(model):
        names.setdefault(id(value), []).append(name)
    return names


def _tensors(module: nn.Module, names: dict[int, list[str]]) -> dict[str, list[str]]:
    """Each tensor of a module (by its local name) with every name it has in the model."""
    return {
        local: sorted(names[id(tensor)])
        for local, tensor in [*module.named_parameters(), *module.named_buffers()]
    }


def _norm_op(module: nn.Module, names: dict[int, list[str]]) -> dict[str, Any] | None:
    if isinstance(module, nn.LayerNorm):
        return {"op": "layer_norm", "eps": module.eps, "tensors": _tensors(module, names)}
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if type(module).__name__.endswith("RMSNorm") and eps is not None:
        return {"op": "rms_norm", "eps": float(eps), "tensors": _tensors(module, names)}
    return None


def _transform_ops(
    transform: nn.Module | None, names: dict[int, list[str]], activation: Any
) -> list[dict[str, Any]] | None:
    """The transform as operations, or None where it is not one this module knows."""
    if transform is None:
        return []
    norm = _norm_op(transform, names)
    if norm is not None:
        return [norm]
    # BERT-style: dense, activation, LayerNorm
    dense = getattr(transform, "dense", None)
    layer_norm = getattr(transform, "LayerNorm", None)
    if isinstance(dense, nn.Linear) and isinstance(layer_norm, nn.LayerNorm):
        if activation not in ACTIVATIONS or set(dict(transform.named_children())) != {
            "dense",
            "transform_act_fn",
            "LayerNorm",
        }:
            return None
        return [
            {"op": "linear", "tensors": _tensors(dense, names)},
            {"op": "activation", "name": activation},
            _norm_op(layer_norm, names),
        ]
    return None


def _build(description: dict[str, Any], tensor: Any, device: torch.device) -> Head:
    """The head of a description, `tensor(names)` giving a tensor under one of its names."""
    ops, buffers = [], {}
    for i, op in enumerate(description["transform"]):
        ops.append({k: v for k, v in op.items() if k != "tensors"})
        for local, names in op.get("tensors", {}).items():
            buffers[f"op{i}.{local}"] = tensor(names).to(device, torch.float32)
    unembedding = {
        local: tensor(names).to(device, torch.float32)
        for local, names in description["unembedding"].items()
    }
    transform = PlainTransform(ops, buffers) if ops else None
    scale, softcap = description.get("scale", 1.0), description.get("softcap")
    unembed = Unembedding(unembedding["weight"], unembedding.get("bias"))
    return Head(transform, unembed, scale, softcap)


def describe(
    model: nn.Module,
    transform: nn.Module | None,
    unembedding: nn.Module,
    scale: float = 1.0,
    softcap: float | None = None,
) -> dict | None:
    """The head of a loaded model as operations over its tensors' names (every name of each,
    for tied weights), or None where it is not recognised or does not reproduce the model's
    own logits on random states. `scale`: a constant the model multiplies its logits by;
    `softcap`: c of c·tanh(logits / c)."""
    names = parameter_names(model)
    ops = _transform_ops(transform, names, getattr(model.config, "hidden_act", None))
    if ops is None or not isinstance(getattr(unembedding, "weight", None), torch.Tensor):
        return None
    description = {"transform": ops, "unembedding": _tensors(unembedding, names)}
    if scale != 1.0:
        description["scale"] = scale
    if softcap:
        description["softcap"] = softcap
    by_name = dict(_named_tensors(model))
    plain = _build(description, lambda ns: by_name[ns[0]].detach(), torch.device("cpu"))
    own = Head(transform, unembedding, scale, softcap)
    width = own.weight.shape[1]
    generator = torch.Generator().manual_seed(0)
    states = torch.randn(CHECK_ROWS, width, generator=generator) * math.sqrt(width) / 8
    with torch.no_grad():
        want = own.logits(states.to(own.device)).cpu()
        got = plain.logits(states).cpu()
    scale = float(want.abs().max()) or 1.0
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5 * scale):
        return None
    return description


def load_decoder_head(model_dir: str | Path, name: str, threads: int) -> Head:
    """The decoder head of a cached model, in float32 on the job's device: from its
    description (torch and safetensors only) where the cache has one, else through
    transformers (jtc.model.cache.load_head)."""
    torch.set_num_threads(threads)
    model_dir = Path(model_dir)
    info = read_json(model_dir / "info.json")
    description = info.get("head")
    if description is None:
        from jtc.model.cache import load_head

        return load_head(model_dir, name, threads)[0]
    check_manifest(model_dir)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    path = model_dir / "model.safetensors"
    with safe_open(path, "pt") as weights:
        stored = set(weights.keys())

        def tensor(names: list[str]) -> torch.Tensor:
            present = [n for n in names if n in stored]
            if not present:
                raise CorruptFileError(f"{path} lacks the head tensor {names[0]}")
            return weights.get_tensor(present[0])

        return _build(description, tensor, device)
