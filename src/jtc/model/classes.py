"""Which transformers class a model is loaded with: its task (causal or masked) from its config,
and the Auto class for it. Shared by caching and loading a model (jtc.model.cache) and by
building a decoder head from the cache without the rest of the model (jtc.model.head)."""

from __future__ import annotations

import transformers
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

from jtc.model.adapters import (
    ADAPTERS,
    MLM_HEAD_SUFFIXES,
    NOT_TRANSFORMERS,
    UnsupportedArchitecture,
    encoder_decoder_message,
    not_transformer_message,
    task_from_classes,
)


def task_of(config: transformers.PretrainedConfig) -> str:
    """ "causal" or "masked": from a declared adapter, the checkpoint's classes, or the
    language-model classes transformers has for the model type."""
    model_type = str(config.model_type)
    if model_type in ADAPTERS:
        return ADAPTERS[model_type].task
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedArchitecture(encoder_decoder_message(model_type))
    if model_type in NOT_TRANSFORMERS:
        raise UnsupportedArchitecture(not_transformer_message(model_type))
    task = task_from_classes(config.architectures or [])
    if task is not None:
        return task
    from transformers.models.auto import modeling_auto

    if model_type in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(
        config, "is_decoder", False
    ):
        return "masked"
    if model_type in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "causal"
    raise UnsupportedArchitecture(
        f"architecture '{model_type}': transformers has no causal or masked language-model "
        "class for it; jtc reads decoder-only causal LMs and encoders (masked LMs)"
    )


def auto_class(config: transformers.PretrainedConfig) -> type:
    """The transformers Auto class that loads a model of this config with its decoder head
    (a masked-LM checkpoint without one: the bare AutoModel)."""
    task = task_of(config)
    if task == "causal":
        return AutoModelForCausalLM
    if any(a.endswith(MLM_HEAD_SUFFIXES) for a in config.architectures or []):
        return AutoModelForMaskedLM
    return AutoModel
