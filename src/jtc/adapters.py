"""Architecture adapters: where a model keeps its blocks, the parts of a block, its final norm,
its decoder head and its task.

Everything else in jtc is architecture-free. Adding an architecture means adding one entry
to ADAPTERS (and a tiny random model to the tests). This module imports no torch at run time,
so that the workflow can check architectures while it plans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

# transformers classes that carry a masked-LM head (a causal LM class always carries its head)
MLM_HEAD_SUFFIXES = ("ForMaskedLM", "ForPreTraining")
TASK_NAMES = {"causal": "next-token prediction", "masked": "masked-token prediction"}


class UnsupportedArchitecture(ValueError):
    """A model type with no adapter."""


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
        return _lookup(block, self.input_path), _lookup(block, self.output)


@dataclass(frozen=True)
class Adapter:
    name: str
    task: str  # "causal" (next-token) or "masked" (masked-token)
    backbone_attr: str  # attribute of a *For... model that holds the bare backbone
    blocks_path: str  # dotted path from the backbone to the list of blocks
    final_norm_attr: str | None  # backbone attribute of the norm applied after the last block
    # decoder head D(h) = unembedding(transform(h)); paths are dotted, from the *For... model.
    # head_transform None means the final norm (GPT-2 ln_f, Llama norm).
    head_transform_path: str | None
    unembedding_path: str  # an nn.Linear: weight (vocab, width), optional bias
    parts: tuple[Part, ...] = ()  # the block parts (PART_NAMES) for sub-module shortcuts

    def backbone(self, model: nn.Module) -> nn.Module:
        return getattr(model, self.backbone_attr, model)

    def blocks(self, model: nn.Module) -> nn.ModuleList:
        return _lookup(self.backbone(model), self.blocks_path)

    def swap_blocks(self, model: nn.Module, blocks: Sequence[nn.Module]) -> nn.ModuleList:
        """Put `blocks` (e.g. a suffix of the blocks) in place of the model's block list and
        return the list it replaced. The backbone then runs only those blocks."""
        parent_path, _, attr = self.blocks_path.rpartition(".")
        parent = _lookup(self.backbone(model), parent_path)
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
        return getattr(self.backbone(model), self.final_norm_attr)

    def head(self, model: nn.Module) -> tuple[nn.Module | None, nn.Module]:
        """(transform, unembedding) of the decoder head; AttributeError when the model has none."""
        if self.head_transform_path is None:
            transform = self.final_norm(model)
        else:
            transform = _lookup(model, self.head_transform_path)
        return transform, _lookup(model, self.unembedding_path)

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


def _lookup(module, path: str):
    for attr in path.split(".") if path else ():
        module = getattr(module, attr)
    return module


_GPT2 = Adapter(
    "gpt2",
    "causal",
    "transformer",
    "h",
    "ln_f",
    None,
    "lm_head",
    (Part("attn_norm", "ln_1"), Part("attn", "attn"), Part("ffn_norm", "ln_2"), Part("ffn", "mlp")),
)
_LLAMA = Adapter(
    "llama",
    "causal",
    "model",
    "layers",
    "norm",
    None,
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
    "cls.predictions.transform",
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


def part_adapter(model_type: str) -> Adapter:
    """The adapter of an architecture whose block parts are known (sub-module shortcuts)."""
    adapter = get_adapter(model_type)
    if not adapter.parts:
        supported = sorted(name for name, a in ADAPTERS.items() if a.parts)
        raise UnsupportedArchitecture(
            f"architecture '{model_type}' has no block-part adapter for sub-module shortcuts; "
            f"supported: {', '.join(supported)}"
        )
    return adapter


def missing_head_message(model: str, task: str, model_class: str) -> str:
    """The error for a model asked to predict tokens without a decoder head."""
    return (
        f"model '{model}' ({model_class}) has no decoder head, so it cannot be evaluated on "
        f"{TASK_NAMES[task]}: use a checkpoint with its language-model head (a ...ForMaskedLM "
        f"or ...ForCausalLM class) or set 'models.{model}.predict: false' to compute r² only"
    )
