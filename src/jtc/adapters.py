"""Architecture adapters: where a model keeps its blocks, its final norm and its task.

Everything else in jtc is architecture-free. Adding an architecture means adding one entry
to ADAPTERS (and a tiny random model to the tests).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn


class UnsupportedArchitecture(ValueError):
    """A model type with no adapter."""


@dataclass(frozen=True)
class Adapter:
    name: str
    task: str  # "causal" (next-token) or "masked" (masked-token)
    backbone_attr: str  # attribute of a *For... model that holds the bare backbone
    blocks_path: str  # dotted path from the backbone to the list of blocks
    final_norm_attr: str | None  # backbone attribute of the norm applied after the last block

    def backbone(self, model: nn.Module) -> nn.Module:
        return getattr(model, self.backbone_attr, model)

    def blocks(self, model: nn.Module) -> nn.ModuleList:
        module = self.backbone(model)
        for attr in self.blocks_path.split("."):
            module = getattr(module, attr)
        return module

    def final_norm(self, model: nn.Module) -> nn.Module | None:
        if self.final_norm_attr is None:
            return None
        return getattr(self.backbone(model), self.final_norm_attr)

    def non_embedding_parameters(self, model: nn.Module) -> int:
        modules = list(self.blocks(model))
        norm = self.final_norm(model)
        if norm is not None:
            modules.append(norm)
        return sum(p.numel() for m in modules for p in m.parameters())


_GPT2 = Adapter("gpt2", "causal", "transformer", "h", "ln_f")
_LLAMA = Adapter("llama", "causal", "model", "layers", "norm")
_BERT = Adapter("bert", "masked", "bert", "encoder.layer", None)

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
