"""The architecture matrix: a tiny random model of every transformers model type jtc is tested
on, built offline from transformers' own config classes (tests/model/test_architectures.py).

`python tests/helpers/architectures.py` prints the README's table of tested architectures from the
matrix (test_architectures checks that the README holds exactly that table)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

# the settings every tiny model shares (each config class takes the names it knows)
COMMON = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "bos_token_id": 2,
    "eos_token_id": 3,
}
# model type -> the settings its config needs besides (or instead of) COMMON
ARCHITECTURES: dict[str, dict] = {
    "gpt2": {},
    "gpt_neo": {"attention_types": [[["global", "local"], 1]], "window_size": 8},
    "gptj": {"rotary_dim": 4},
    "gpt_neox": {},
    "opt": {},
    "bloom": {},
    "falcon": {"num_kv_heads": 4},
    "mpt": {"expansion_ratio": 2, "max_seq_len": 64},
    "llama": {},
    "mistral": {"sliding_window": 16},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2": {},
    "qwen2_moe": {
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
    },
    "qwen3": {"head_dim": 8},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
    "gemma": {"head_dim": 8},
    # a small cap, so that a head without it would not reproduce the logits
    "gemma2": {"head_dim": 8, "sliding_window": 16, "final_logit_softcapping": 0.5},
    "gemma3_text": {"head_dim": 8, "sliding_window": 16},
    "phi": {},
    "phi3": {},
    "olmo": {},
    "stablelm": {},
    "starcoder2": {},
    "cohere": {},
    "bert": {},
    "roberta": {},
    "distilbert": {"dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64},
    "electra": {"embedding_size": 32},
    "deberta-v2": {},
    "modernbert": {"global_attn_every_n_layers": 1, "local_attention": 16},
}


def build(model_type: str, vocab_size: int, seed: int = 0):
    """(model, task) of a tiny random model of `model_type`, in eval mode."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    from jtc.model.classes import task_of

    settings = {**COMMON, "vocab_size": vocab_size, **ARCHITECTURES[model_type]}
    config = AutoConfig.for_model(model_type, **settings)
    task = task_of(config)
    auto = AutoModelForCausalLM if task == "causal" else AutoModelForMaskedLM
    torch.manual_seed(seed)
    return auto.from_config(config).eval(), task


def readme_table(rows: list[tuple[str, str, str, str]]) -> str:
    """The README's list of tested model types: (model type, task, decoder head, sub-module
    shortcuts) per row, grouped by task and by whether block parts were found."""
    groups: dict[tuple[str, bool], list[str]] = {}
    for model_type, task, head, parts in rows:
        capped = " (soft-capped logits)" if "soft-capped" in head else ""
        groups.setdefault((task, parts == "yes"), []).append(f"`{model_type}`{capped}")
    names = {"causal": "Causal LMs", "masked": "Masked LMs"}
    lines = []
    for (task, separable), types in groups.items():
        shortcuts = "with sub-module shortcuts" if separable else "parts not separable"
        lines.append(f"- {names[task]}, {shortcuts}: {', '.join(types)}.")
    return "\n".join(lines) + "\n"


def matrix_rows() -> list[tuple[str, str, str, str]]:
    """What jtc finds for each model type of the matrix (loads every tiny model)."""
    from tiny import make_tokenizer

    from jtc.model.discover import find_adapter

    rows = []
    for model_type in ARCHITECTURES:
        model, task = build(model_type, len(make_tokenizer("bert")))
        adapter = find_adapter(model, task)
        head = "yes, soft-capped logits" if adapter.logit_softcap else "yes"
        parts = "yes" if adapter.parts else "no (not separable)"
        rows.append((model_type, task, head, parts))
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    print(readme_table(matrix_rows()), end="")
