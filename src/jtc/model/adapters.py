"""Architecture adapters: where a model keeps its blocks, the parts of a block, its final norm,
its decoder head and its task.

Everything else in jtc is architecture-free. Adding an architecture means adding one entry
to ADAPTERS (and a tiny random model to the tests). This module imports no torch at run time,
so that the workflow can check architectures while it plans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

# transformers classes that carry a masked-LM head (a causal LM class always carries its head)
MLM_HEAD_SUFFIXES = ("ForMaskedLM", "ForPreTraining")
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
TASK_NAMES = {
    "causal": "next-token prediction",
    "masked": "masked-token prediction",
    None: "token prediction",
}


class UnsupportedArchitecture(ValueError):
    """A model type with no adapter."""


# transformers' model types that are language models but not stacks of attention blocks
NOT_TRANSFORMERS = frozenset(
    {
        "mamba",
        "mamba2",
        "falcon_mamba",
        "rwkv",
        "xlstm",
        "recurrent_gemma",
        "jamba",
        "zamba",
        "zamba2",
        "bamba",
        "falcon_h1",
        "granitemoehybrid",
        "lfm2",
        "nemotron_h",
    }
)


def encoder_decoder_message(model_type: str) -> str:
    return (
        f"architecture '{model_type}' is an encoder-decoder model: jtc reads one stack of "
        "transformer blocks (decoder-only causal LMs such as GPT-2 or Llama, encoders such as "
        "BERT)"
    )


def not_transformer_message(model_type: str) -> str:
    return (
        f"architecture '{model_type}' is a state-space or recurrent model, not a stack of "
        "attention blocks: jtc reads transformer blocks (decoder-only causal LMs, encoders)"
    )


def architecture_problem(model_type: str, config: dict[str, Any]) -> str | None:
    """What rules a model out from its config alone (no torch): an encoder-decoder, a
    state-space or recurrent model."""
    if config.get("is_encoder_decoder"):
        return encoder_decoder_message(model_type)
    if model_type in NOT_TRANSFORMERS:
        return not_transformer_message(model_type)
    return None


def task_from_classes(architectures: Sequence[str]) -> str | None:
    """The task of a checkpoint's transformers classes (None for a bare backbone or none)."""
    if any(a.endswith(CAUSAL_SUFFIXES) for a in architectures):
        return "causal"
    if any(a.endswith(MLM_HEAD_SUFFIXES) for a in architectures):
        return "masked"
    return None


# The parts of a block, by role, the same names for every architecture:
#   attn_norm  the norm of the attention sub-layer (GPT-2 ln_1, Llama input_layernorm, BERT the
#              attention output's LayerNorm)
#   attn       self-attention with its output projection, before the residual add
#   ffn_norm   the norm of the feed-forward sub-layer (GPT-2 ln_2, Llama post_attention_layernorm,
#              BERT the output LayerNorm)
#   ffn        the feed-forward network (MLP), before the residual add
PART_NAMES = ("attn_norm", "attn", "ffn_norm", "ffn")


@dataclass(frozen=True)
class Part:
    """One part of a block: a function from `input_path`'s input (its hidden_states argument)
    to `output_path`'s output, both modules named by dotted paths from the block. Most parts
    are one module (input_path == output_path); BERT's attention runs from its self-attention
    module's input to its output dense layer's output, the residual add and the norm excluded."""

    name: str
    input_path: str
    output_path: str | None = None  # None: the same module as input_path

    @property
    def output(self) -> str:
        return self.output_path or self.input_path

    def modules(self, block: nn.Module) -> tuple[nn.Module, nn.Module]:
        """(module whose input is the part's input, module whose output is the part's output)."""
        return lookup(block, self.input_path), lookup(block, self.output)


@dataclass(frozen=True)
class Adapter:
    name: str
    task: str  # "causal" (next-token) or "masked" (masked-token)
    backbone_attr: str  # attribute of a *For... model that holds the bare backbone ("": itself)
    blocks_path: str  # dotted path from the backbone to the list of blocks
    final_norm_attr: str | None  # dotted path from the backbone: the norm after the last block
    # decoder head D(h) = unembedding(transform(h)), transform = the final norm, then the
    # modules of head_transform in order (dotted paths from the *For... model: BERT's
    # cls.predictions.transform), then, with head_capture, that module run whole and the input
    # its unembedding receives taken (RoBERTa's lm_head: its activation is a function call)
    head_transform: tuple[str, ...]
    unembedding_path: str  # an nn.Linear: weight (vocab, width), optional bias ("": none)
    parts: tuple[Part, ...] = ()  # the block parts (PART_NAMES) for sub-module shortcuts
    head_capture: str | None = None
    logit_scale: float = 1.0  # a constant the model multiplies its logits by (Cohere)
    # c in c·tanh(logits / c): Gemma 2's final_logit_softcapping (None: logits as they are)
    logit_softcap: float | None = None
    # blocks without `parts` whose attention and feed-forward read the same input in parallel,
    # h_b = h_{b-1} + attn + ffn (GPT-NeoX, GPT-J, Falcon, Phi, Cohere): the dotted path from a
    # block to its feed-forward module, checked on the model (jtc.model.discover). For depth
    # pruning's ReplaceMe alone (its transform folds into that module); no sub-module shortcuts
    parallel_ffn: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["head_transform"] = list(self.head_transform)
        data["parts"] = [asdict(p) for p in self.parts]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Adapter:
        data = dict(data)
        data["head_transform"] = tuple(data.get("head_transform", ()))
        data["parts"] = tuple(Part(**p) for p in data.get("parts", ()))
        return cls(**data)

    def backbone(self, model: nn.Module) -> nn.Module:
        return getattr(model, self.backbone_attr, model) if self.backbone_attr else model

    def blocks(self, model: nn.Module) -> nn.ModuleList:
        return lookup(self.backbone(model), self.blocks_path)

    def swap_blocks(self, model: nn.Module, blocks: Sequence[nn.Module]) -> nn.ModuleList:
        """Put `blocks` (e.g. a suffix of the blocks) in place of the model's block list and
        return the list it replaced. The backbone then runs only those blocks."""
        parent_path, _, attr = self.blocks_path.rpartition(".")
        parent = lookup(self.backbone(model), parent_path)
        old = getattr(parent, attr)
        setattr(parent, attr, blocks if isinstance(blocks, type(old)) else type(old)(blocks))
        return old

    def part(self, name: str) -> Part:
        for part in self.parts:
            if part.name == name:
                return part
        raise UnsupportedArchitecture(
            f"architecture '{self.name}' has no block part '{name}'; it has "
            f"{', '.join(p.name for p in self.parts) or 'none'}"
        )

    def final_norm(self, model: nn.Module) -> nn.Module | None:
        if self.final_norm_attr is None:
            return None
        return lookup(self.backbone(model), self.final_norm_attr)

    def head(self, model: nn.Module) -> tuple[nn.Module | None, nn.Module]:
        """(transform, unembedding) of the decoder head; AttributeError when the model has none.
        The transform is the model's own module where it is one (a final norm, BERT's
        transform), else a jtc.model.headchain.HeadChain of the model's modules."""
        if not self.unembedding_path:
            raise AttributeError(f"architecture '{self.name}' as loaded has no decoder head")
        unembedding = lookup(model, self.unembedding_path)
        norm = self.final_norm(model)
        steps = [norm] if norm is not None else []
        steps += [lookup(model, path) for path in self.head_transform]
        capture = None if self.head_capture is None else lookup(model, self.head_capture)
        if capture is None and len(steps) <= 1:
            return (steps[0] if steps else None), unembedding
        from jtc.model.headchain import HeadChain

        return HeadChain(steps, capture, unembedding), unembedding

    def head_modules(self, model: nn.Module) -> list[tuple[str, nn.Module]]:
        """(path from the model, module) of every module the head reads weights from."""
        paths = []
        if self.final_norm_attr is not None:
            prefix = f"{self.backbone_attr}." if self.backbone_attr else ""
            paths.append(prefix + self.final_norm_attr)
        paths += list(self.head_transform)
        if self.head_capture is not None:
            paths.append(self.head_capture)
        paths.append(self.unembedding_path)
        return [(path, lookup(model, path)) for path in paths]

    def describe_head(self) -> str:
        steps = [f"norm {self.final_norm_attr}" if self.final_norm_attr else "no final norm"]
        steps += list(self.head_transform)
        if self.head_capture:
            steps.append(f"{self.head_capture} (its {self.unembedding_path} input)")
        return " -> ".join([*steps, self.unembedding_path])

    def has_head(self, architectures: Sequence[str]) -> bool:
        """Whether a checkpoint of these transformers classes loads with a decoder head."""
        if self.task == "causal":
            return True  # jtc loads causal models with AutoModelForCausalLM, which adds one
        return any(a.endswith(MLM_HEAD_SUFFIXES) for a in architectures)

    def non_embedding_parameters(self, model: nn.Module) -> int:
        modules = list(self.blocks(model))
        norm = self.final_norm(model)
        if norm is not None:
            modules.append(norm)
        return sum(p.numel() for m in modules for p in m.parameters())


def lookup(module, path: str):
    """The module at a dotted path below `module` ("" : itself)."""
    for attr in path.split(".") if path else ():
        module = getattr(module, attr)
    return module


_GPT2 = Adapter(
    "gpt2",
    "causal",
    "transformer",
    "h",
    "ln_f",
    (),
    "lm_head",
    (Part("attn_norm", "ln_1"), Part("attn", "attn"), Part("ffn_norm", "ln_2"), Part("ffn", "mlp")),
)
_LLAMA = Adapter(
    "llama",
    "causal",
    "model",
    "layers",
    "norm",
    (),
    "lm_head",
    (
        Part("attn_norm", "input_layernorm"),
        Part("attn", "self_attn"),
        Part("ffn_norm", "post_attention_layernorm"),
        Part("ffn", "mlp"),
    ),
)
_BERT = Adapter(
    "bert",
    "masked",
    "bert",
    "encoder.layer",
    None,
    ("cls.predictions.transform",),
    "cls.predictions.decoder",
    (
        Part("attn", "attention.self", "attention.output.dense"),
        Part("attn_norm", "attention.output.LayerNorm"),
        Part("ffn", "intermediate", "output.dense"),
        Part("ffn_norm", "output.LayerNorm"),
    ),
)

# keyed by transformers' config.model_type
ADAPTERS: dict[str, Adapter] = {
    "gpt2": _GPT2,
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "qwen2": _LLAMA,
    "bert": _BERT,
}


def get_adapter(model_type: str) -> Adapter:
    try:
        return ADAPTERS[model_type]
    except KeyError:
        raise UnsupportedArchitecture(
            f"no adapter for architecture '{model_type}'; supported: {', '.join(sorted(ADAPTERS))}"
        ) from None


def adapter_of(info: dict[str, Any]) -> Adapter:
    """The adapter of a cached model: the one found when it was cached (info.json's
    "adapter"), or for a cache written before adapters were stored, the declared one."""
    if "adapter" in info:
        return Adapter.from_json(info["adapter"])
    return get_adapter(info["architecture"])


def part_adapter(adapter: Adapter) -> Adapter:
    """The adapter itself if its block parts are known (sub-module shortcuts)."""
    if not adapter.parts:
        raise UnsupportedArchitecture(
            f"architecture '{adapter.name}' has no separable block parts for sub-module "
            "shortcuts: its blocks are not pre-norm attention then feed-forward sub-layers, "
            "each with its own residual add (e.g. attention and MLP read the same input in "
            "parallel, as in GPT-J, GPT-NeoX, Falcon, Phi or Cohere)"
        )
    return adapter


def missing_head_message(model: str, task: str | None, model_class: str) -> str:
    """The error for a model asked to predict tokens without a decoder head."""
    return (
        f"model '{model}' ({model_class}) has no decoder head, so it cannot be evaluated on "
        f"{TASK_NAMES[task]}: use a checkpoint with its language-model head (a ...ForMaskedLM "
        f"or ...ForCausalLM class) or set 'models.{model}.predict: false' to compute r² only"
    )
