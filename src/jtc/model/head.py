"""The decoder head of a model, D(h) = unembedding(transform(h)): the one type every job decodes
and trains through (`Head`), and the one way a job gets it from a cached model
(`load_decoder_head`).

A head is built from a loaded model (`Head.from_model`: the adapter says where its modules are),
or from a model's cache without loading the model: when a model is cached, `describe` writes the
head into its info.json as a few plain operations (layer norm, RMS norm, a linear map, an
activation) over named tensors of model.safetensors, and keeps the description only if the head
it builds gives the model's own logits on random states. Such a head needs torch and
safetensors but neither transformers nor the model's classes, whose import is most of a
decoding job's start-up (about 3 of 5 CPU-s on the 2-core development machine). A head it does
not recognise (or that fails that check) has no description: it is built through transformers
from an empty skeleton of the model given only the head's cached tensors (the same head, slower
to load).
"""

from __future__ import annotations

import copy
import math
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn

from jtc.devices import job_device
from jtc.files.io import CorruptFileError, read_json
from jtc.model.adapters import Adapter, adapter_of, missing_head_message
from jtc.model.manifest import Manifest

DECODE_BYTES = 64 << 20  # float32 logits held at once (Head.rows_per_chunk)
ACTIVATIONS = {
    "gelu": lambda x: nn.functional.gelu(x),
    "gelu_new": lambda x: nn.functional.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: nn.functional.gelu(x, approximate="tanh"),
    "relu": nn.functional.relu,
    "silu": nn.functional.silu,
    "tanh": torch.tanh,
}
CHECK_ROWS = 8  # random states the described head must decode as the model's own head does


class NoDecoderHead(ValueError):
    """A model that cannot turn states into token predictions."""


class Head:
    """The decoder head of a model, split into a transform and a linear unembedding, in float32
    (jtc.model.scoring decodes and scores with it, a chunk of rows at a time)."""

    def __init__(
        self,
        transform: nn.Module | None,
        unembedding: nn.Module,
        scale: float = 1.0,
        softcap: float | None = None,
    ):
        # decoding runs in float32 whatever the model's dtype: a copy of a bfloat16/float16 head
        if transform is not None and any(p.dtype != torch.float32 for p in transform.parameters()):
            transform = copy.deepcopy(transform).float()
        self.transform = transform
        # (vocab, width); a constant the model multiplies its logits by is folded in
        self.weight: torch.Tensor = unembedding.weight.detach().float()
        bias = getattr(unembedding, "bias", None)
        self.bias: torch.Tensor | None = None if bias is None else bias.detach().float()
        if scale != 1.0:
            self.weight = self.weight * scale
            self.bias = None if self.bias is None else self.bias * scale
        # logits = c·tanh(W f / c) for a model that soft-caps them (Gemma 2), else W f
        self.softcap = softcap or None

    def cap(self, logits: torch.Tensor) -> torch.Tensor:
        if self.softcap is None:
            return logits
        return self.softcap * torch.tanh(logits / self.softcap)

    @classmethod
    def from_model(cls, model: nn.Module, adapter: Adapter, name: str = "model") -> Head:
        """The head of a loaded model, its own modules (NoDecoderHead, naming the model
        `name`, where it has none)."""
        try:
            transform, unembedding = adapter.head(model)
        except AttributeError:
            raise NoDecoderHead(
                missing_head_message(name, adapter.task, type(model).__name__)
            ) from None
        return cls(transform, unembedding, adapter.logit_scale, adapter.logit_softcap)

    @property
    def device(self) -> torch.device:
        return self.weight.device

    @property
    def vocab_size(self) -> int:
        return int(self.weight.shape[0])

    def rows_per_chunk(self) -> int:
        return max(1, DECODE_BYTES // (4 * self.vocab_size))

    def features(self, states: torch.Tensor) -> torch.Tensor:
        states = states.to(self.device, torch.float32)
        return states if self.transform is None else self.transform(states)

    def unembed(self, features: torch.Tensor) -> torch.Tensor:
        return self.cap(nn.functional.linear(features, self.weight, self.bias))

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        return self.unembed(self.features(states))

    def token_logit(self, features: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """The logits of given tokens, without the whole-vocabulary product: tokens (n,) or
        (n, c) for features (n, w) give logits of the same shape."""
        rows = features.reshape(len(features), *([1] * (tokens.dim() - 1)), -1)
        logit = (self.weight[tokens] * rows).sum(-1)
        return self.cap(logit if self.bias is None else logit + self.bias[tokens])


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


class CachedWeights:
    """The tensors of a cached model's weights files by name, opened lazily by safetensors:
    its own model.safetensors, or the source folder's files it references (cache:
    reference); each tensor checked against the manifest as it is read."""

    def __init__(self, manifest: Manifest):
        self.manifest = manifest
        self._stack = ExitStack()
        self._where: dict[str, tuple[str, Any]] = {}  # tensor name: (file's manifest name, file)
        for file, path in manifest.weights_files():
            handle = self._stack.enter_context(safe_open(path, "pt"))
            for name in handle.keys():
                self._where.setdefault(name, (file, handle))

    def __enter__(self) -> CachedWeights:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def keys(self) -> set[str]:
        return set(self._where)

    def get_tensor(self, name: str) -> torch.Tensor:
        """A tensor, its bytes checked against the manifest first."""
        file, handle = self._where[name]
        self.manifest.check_tensors(file, [name])
        return handle.get_tensor(name)


def load_decoder_head(
    model_dir: str | Path, name: str, threads: int, model: nn.Module | None = None
) -> Head:
    """The decoder head of the cached model in `model_dir` (`name`: the model's name in
    errors), in float32 on the job's device (jtc.devices.job_device), torch limited to the
    job's threads: `model`'s own head where the job has loaded the model already (on one
    device: jtc.model.cache.load_model), else from the head's description in info.json (torch
    and safetensors only) where it has one, else through transformers, reading only the head's
    tensors. NoDecoderHead, naming the model, where it has no head."""
    torch.set_num_threads(threads)
    model_dir = Path(model_dir)
    info = read_json(model_dir / "info.json")
    if model is not None:
        return Head.from_model(model, adapter_of(info), name)
    manifest = Manifest(model_dir)  # the head's tensors are checked as they are read
    manifest.check_but_tensors()
    description = info.get("head")
    if description is None:
        return _through_transformers(model_dir, info, name, manifest)
    with CachedWeights(manifest) as weights:
        stored = weights.keys()

        def tensor(names: list[str]) -> torch.Tensor:
            present = [n for n in names if n in stored]
            if not present:
                raise CorruptFileError(
                    f"the weights of {model_dir} lack the head tensor {names[0]}"
                )
            return weights.get_tensor(present[0])

        return _build(description, tensor, job_device())


def _through_transformers(
    model_dir: Path, info: dict[str, Any], name: str, manifest: Manifest
) -> Head:
    """The head built through transformers from an empty (meta-device) skeleton of the model,
    given only the head's tensors (its final norm or transform and its unembedding) from the
    cached safetensors: the rest of the model is never built. The same head as the whole
    loaded float32 model's."""
    from transformers import AutoConfig

    from jtc.model.classes import auto_class

    config = AutoConfig.from_pretrained(model_dir)
    adapter = adapter_of(info)
    with torch.device("meta"):
        skeleton = auto_class(config).from_config(config, dtype=torch.float32)
    try:
        modules = adapter.head_modules(skeleton)
    except AttributeError:
        Head.from_model(skeleton, adapter, name)  # raises NoDecoderHead, naming the model
        raise
    device = job_device()
    names = parameter_names(skeleton)
    with CachedWeights(manifest) as weights:
        done: list[str] = []
        for path, module in modules:
            if not any(path.startswith(f"{d}.") for d in done):  # (inside one done already)
                _materialise(module, path, names, weights, device)
                done.append(path)
    transform, unembedding = adapter.head(skeleton)
    return Head(transform, unembedding, adapter.logit_scale, adapter.logit_softcap)


def _materialise(
    module: nn.Module, path: str, names, weights: CachedWeights, device: torch.device
) -> None:
    """Give a module built on the meta device (at `path` in the model) its cached tensors
    (each checked against the manifest), in float32, on `device`: each tensor under its own
    name, or under a name it is tied to when the cache stores it once (a tied head and
    embedding)."""
    stored_names = set(weights.keys())
    wanted = {}
    # every name of every tensor: to_empty below unties tied tensors (RoBERTa's lm_head.bias
    # and lm_head.decoder.bias), so each name gets its own copy of the stored values
    for local, tensor in _named_tensors(module):
        own = f"{path}.{local}" if path else local
        stored = [own] if own in stored_names else sorted(set(names[id(tensor)]) & stored_names)
        if stored:
            wanted[local] = weights.get_tensor(stored[0]).to(device, torch.float32)
    module.to_empty(device=device)
    missing = module.load_state_dict(wanted, strict=False).missing_keys
    persistent = {n for n, _ in module.named_parameters()}
    if missing_params := sorted(set(missing) & persistent):
        raise CorruptFileError(f"the cached weights lack the head tensors {missing_params}")
