"""Tiny random causal models that depth pruning can run and export (Llama, Qwen2 with a
sliding-window block, GPT-2), with biases made random so that folding them shows."""

import torch
from architectures import ARCHITECTURES, COMMON
from tiny import make_tokenizer
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

from jtc.model.classes import task_of
from jtc.model.discover import find_adapter

LAYERS = 5
TOKENIZER = make_tokenizer("causal")
# Qwen2 with sliding-window attention in its last block only (window 4 < the sentences'
# lengths): its layer_types must lose the removed blocks' entries, not the last ones
SETTINGS = {"qwen2": {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 4}}


def make(kind: str, layers: int = LAYERS, seed: int = 0, **overrides):
    """(model, adapter) of a tiny random model of a transformers model type, in eval mode
    (`overrides`: config settings besides the matrix's, e.g. for a model type not in it)."""
    settings = {
        **COMMON,
        "vocab_size": len(TOKENIZER),
        **ARCHITECTURES.get(kind, {}),
        **SETTINGS.get(kind, {}),
        **overrides,
        "num_hidden_layers": layers,
    }
    config = AutoConfig.for_model(kind, **settings)
    task = task_of(config)
    auto = AutoModelForCausalLM if task == "causal" else AutoModelForMaskedLM
    torch.manual_seed(seed)
    model = auto.from_config(config).eval()
    with torch.no_grad():  # biases start at zero: random ones, so that folding them shows
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0, 0.1)
    return model, find_adapter(model, task)


def make_rotatable(kind: str, tied: bool, eps: float, dtype=torch.float32):
    """(model, adapter): make(kind) with random norm gains (so that folding them shows), RMSNorm's
    epsilon `eps` (the tiny models' states are small, mean(h²) about 4e-4: a rotation's fold is
    exact but for the epsilon, so tests make it tiny) and the output embeddings tied to the input
    ones or not."""
    model, adapter = make(kind)
    model.config.rms_norm_eps = eps
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    for module in model.modules():
        if hasattr(module, "variance_epsilon"):
            module.variance_epsilon = eps
    if tied:
        model.config.tie_word_embeddings = True
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.to(dtype), adapter
