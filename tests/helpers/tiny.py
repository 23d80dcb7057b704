"""Tiny random models and tokenizers, built in-process for fast tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

WORDS = (
    "the a an of to in and is was for on that with as by at from it his her they this be are "
    "were city river king music war year people first new state school team game world house "
    "water time day life work book film song army church party group law team north south "
    "played wrote built won lost made found called became known used said took went saw"
).split()
# real English sentences, for the real packaged models
TEXTS = [
    "The committee approved the new budget on Tuesday morning.",
    "Rivers in the north freeze for several months each winter.",
    "She wrote three novels before she turned thirty years old.",
]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SENTENCES = [
    "the king of the city was known for his music .",
    "in the first year the team won the game .",
    "the river is the water of life for the people .",
    "they built a new school in the north of the state .",
    "her book was called the house of the world .",
    "the army lost the war and the king went north .",
    "this film is a song about work and life .",
    "the party made a new law for the people of the city .",
]


def make_tokenizer(kind: str) -> PreTrainedTokenizerFast:
    """A word-level tokenizer; 'bert' adds [CLS] ... [SEP] and has a mask token."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + sorted(set(WORDS)) + [".", ","])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if kind == "bert":
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
        )
        return PreTrainedTokenizerFast(
            tokenizer_object=tok,
            unk_token="[UNK]",
            pad_token="[PAD]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
        )
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


def make_model(kind: str, layers: int = 3, width: int = 32, seed: int = 0):
    """(model, tokenizer) for kind in gpt2, llama, bert-mlm, bert."""
    torch.manual_seed(seed)
    tokenizer = make_tokenizer("bert" if kind.startswith("bert") else "causal")
    vocab = len(tokenizer)
    if kind == "gpt2":
        config = GPT2Config(
            vocab_size=vocab,
            n_positions=64,
            n_embd=width,
            n_layer=layers,
            n_head=4,
            pad_token_id=0,
            bos_token_id=0,
            eos_token_id=0,
        )
        model = GPT2LMHeadModel(config)
    elif kind == "llama":
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=width,
            intermediate_size=2 * width,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            pad_token_id=0,
        )
        model = LlamaForCausalLM(config)
    elif kind in ("bert-mlm", "bert"):
        config = BertConfig(
            vocab_size=vocab,
            hidden_size=width,
            num_hidden_layers=layers,
            num_attention_heads=4,
            intermediate_size=2 * width,
            max_position_embeddings=64,
            pad_token_id=0,
        )
        model = BertForMaskedLM(config) if kind == "bert-mlm" else BertModel(config)
    else:
        raise ValueError(kind)
    return model.eval(), tokenizer


def save_model(kind: str, folder: Path, **kwargs) -> Path:
    model, tokenizer = make_model(kind, **kwargs)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_gguf(path: Path, width: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """A tiny random llama as a GGUF file of float32 tensors (no quantised blocks: transformers
    reads it as it reads any GGUF model, dequantising on load), with a small SentencePiece-style
    vocabulary."""
    import gguf

    heads, kv, ff = 4, 2, 2 * width
    tokens = ["<unk>", "<s>", "</s>"] + [f"\u2581{w}" for w in sorted(set(WORDS))] + ["."]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(layers)
    writer.add_context_length(64)
    writer.add_embedding_length(width)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(width // heads)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types([2, 3, 3] + [1] * (len(tokens) - 3))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    rng = np.random.default_rng(seed)

    def add(name: str, *shape: int, ones: bool = False) -> None:
        values = np.ones(shape) if ones else rng.standard_normal(shape) * 0.02
        writer.add_tensor(name, values.astype(np.float32))

    kv_width = kv * width // heads
    add("token_embd.weight", len(tokens), width)
    for i in range(layers):
        add(f"blk.{i}.attn_norm.weight", width, ones=True)
        add(f"blk.{i}.ffn_norm.weight", width, ones=True)
        add(f"blk.{i}.attn_q.weight", width, width)
        add(f"blk.{i}.attn_k.weight", kv_width, width)
        add(f"blk.{i}.attn_v.weight", kv_width, width)
        add(f"blk.{i}.attn_output.weight", width, width)
        add(f"blk.{i}.ffn_gate.weight", ff, width)
        add(f"blk.{i}.ffn_up.weight", ff, width)
        add(f"blk.{i}.ffn_down.weight", width, ff)
    add("output_norm.weight", width, ones=True)
    add("output.weight", len(tokens), width)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_sentences(path: Path, count: int, seed: int = 0) -> Path:
    """A small text corpus, one sentence of 5 to 13 words a line."""
    rng = np.random.default_rng(seed)
    words = [rng.choice(WORDS, size=rng.integers(5, 14)) for _ in range(count)]
    path.write_text("\n".join(" ".join(w).capitalize() + "." for w in words) + "\n")
    return path
