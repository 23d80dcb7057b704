"""A random-weight Hugging Face model of a real model's shape, for benchmarking jtc at scale.

Writes a folder that `AutoModelForCausalLM.from_pretrained(folder)` loads and that jtc takes as a
local model source (`models.NAME.source: /abs/path/to/folder`): config.json, the weights as
safetensors and a tokenizer copied from --tokenizer (e.g. results/models/smollm2 of a finished
jtc run, which holds SmolLM2's tokenizer). The weights are drawn on the device in the dtype,
deterministically from --seed; only the shapes are real, so the run times are those of the real
model and the numbers (r², Precision@k) are meaningless.

Run: python bench/scale_model.py SHAPE OUT_DIR --tokenizer DIR [--dtype bfloat16]
         [--device cuda|cpu] [--seed 0] [--layers N]
     python bench/scale_model.py --list      (every shape and its parameter count; no weights)
A 1.7B model is made and saved on a GPU in seconds; on a CPU, use the tiny shape, or a real
shape cut to a few blocks with --layers (the width, MLP and vocabulary stay the shape's: e.g.
`llama-2-7b --layers 4`, 1.2e9 parameters with SmolLM2's tokenizer, made on 2 cores in about a
minute).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

# name -> (model type, transformers config kwargs). Vocabularies are the real models'; the model
# written gets max(this, the tokenizer's length) so that every token id of the tokenizer exists.
SHAPES: dict[str, tuple[str, dict]] = {
    # SmolLM2-1.7B (HuggingFaceTB/SmolLM2-1.7B)
    "smollm2-1.7b": (
        "llama",
        dict(
            num_hidden_layers=24,
            hidden_size=2048,
            intermediate_size=8192,
            num_attention_heads=32,
            num_key_value_heads=32,
            vocab_size=49152,
            tie_word_embeddings=True,
            rope_theta=130000.0,
            max_position_embeddings=8192,
            rms_norm_eps=1e-5,
        ),
    ),
    # Llama-2-7B (meta-llama/Llama-2-7b-hf)
    "llama-2-7b": (
        "llama",
        dict(
            num_hidden_layers=32,
            hidden_size=4096,
            intermediate_size=11008,
            num_attention_heads=32,
            num_key_value_heads=32,
            vocab_size=32000,
            tie_word_embeddings=False,
            rope_theta=10000.0,
            max_position_embeddings=4096,
            rms_norm_eps=1e-5,
        ),
    ),
    # Qwen2.5-1.5B (Qwen/Qwen2.5-Coder-1.5B-Instruct's dimensions): attention biases, 2 KV heads,
    # a vocabulary of 151,936, tied embeddings
    "qwen2.5-1.5b": (
        "qwen2",
        dict(
            num_hidden_layers=28,
            hidden_size=1536,
            intermediate_size=8960,
            num_attention_heads=12,
            num_key_value_heads=2,
            vocab_size=151936,
            tie_word_embeddings=True,
            rope_theta=1000000.0,
            max_position_embeddings=32768,
            rms_norm_eps=1e-6,
        ),
    ),
    # GPT-2 XL (gpt2-xl); any tokenizer fits (SmolLM2's is fine: its 49,152 ids < 50,257)
    "gpt2-xl": (
        "gpt2",
        dict(
            n_layer=48,
            n_embd=1600,
            n_head=25,
            n_inner=None,  # 4 x n_embd
            vocab_size=50257,
            n_positions=1024,
            tie_word_embeddings=True,
        ),
    ),
    # Phi-3-mini (microsoft/Phi-3-mini-4k-instruct) dimensions written as a *llama* config: jtc
    # does not support the phi3 model type yet. Phi-3 fuses q/k/v and gate/up into single
    # matrices; the llama layout has the same parameters in separate matrices, so the parameter
    # count and the FLOPs per token are the same.
    "phi-3-mini": (
        "llama",
        dict(
            num_hidden_layers=32,
            hidden_size=3072,
            intermediate_size=8192,
            num_attention_heads=32,
            num_key_value_heads=32,
            vocab_size=32064,
            tie_word_embeddings=False,
            rope_theta=10000.0,
            max_position_embeddings=4096,
            rms_norm_eps=1e-5,
        ),
    ),
    # for the tests: a tiny Llama, made on a CPU in a second
    "tiny": (
        "llama",
        dict(
            num_hidden_layers=2,
            hidden_size=64,
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=4,
            vocab_size=256,
            tie_word_embeddings=False,
            max_position_embeddings=512,
        ),
    ),
}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


LAYER_KEYS = {"llama": "num_hidden_layers", "qwen2": "num_hidden_layers", "gpt2": "n_layer"}


def shape_config(
    shape: str,
    vocab_size: int | None = None,
    token_ids: dict | None = None,
    layers: int | None = None,
):
    """The transformers config of a named shape; `vocab_size`, `token_ids` (pad_token_id,
    bos_token_id, eos_token_id) and `layers` (the number of blocks) replace the shape's own
    when given."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape '{shape}'; known: {', '.join(SHAPES)}")
    model_type, kwargs = SHAPES[shape]
    kwargs = dict(kwargs)
    if vocab_size is not None:
        kwargs["vocab_size"] = vocab_size
    if layers is not None:
        if layers < 1:
            raise ValueError(f"layers must be at least 1, not {layers}")
        kwargs[LAYER_KEYS[model_type]] = layers
    kwargs.update(token_ids or {})
    return AutoConfig.for_model(model_type, **kwargs)


def parameter_count(shape: str, vocab_size: int | None = None, layers: int | None = None) -> int:
    """Parameters of a shape (tied embeddings counted once), built on the meta device: no memory,
    no weights."""
    config = shape_config(shape, vocab_size, layers=layers)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def token_ids(tokenizer) -> dict[str, int]:
    """pad/bos/eos ids valid for the tokenizer: its own where it has them, else a special token
    it does have (eos: sep, pad, unk, else 0)."""

    def first(*ids):
        return next((i for i in ids if i is not None), 0)

    eos = first(
        tokenizer.eos_token_id,
        tokenizer.sep_token_id,
        tokenizer.pad_token_id,
        tokenizer.unk_token_id,
    )
    bos = first(tokenizer.bos_token_id, tokenizer.cls_token_id, eos)
    pad = first(tokenizer.pad_token_id, eos)
    return {"pad_token_id": pad, "bos_token_id": bos, "eos_token_id": eos}


def make_model(
    shape: str,
    out_dir: str | Path,
    tokenizer_dir: str | Path,
    dtype="bfloat16",
    device=None,
    seed=0,
    layers: int | None = None,
) -> dict:
    """Write the model folder (with `layers` blocks, default the shape's); returns what was made
    (parameters, vocabulary, seconds)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    vocab = max(SHAPES[shape][1]["vocab_size"], len(tokenizer))
    config = shape_config(shape, vocab, token_ids(tokenizer), layers)
    start = time.perf_counter()
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=DTYPES[dtype])
    model.eval()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    built = time.perf_counter() - start
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    saved = time.perf_counter() - start
    return {
        "shape": shape,
        "layers": config.num_hidden_layers,
        "model_type": config.model_type,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": vocab,
        "tokenizer_length": len(tokenizer),
        "dtype": dtype,
        "device": device,
        "build_seconds": built,
        "save_seconds": saved,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shape", nargs="?", choices=list(SHAPES))
    parser.add_argument("out_dir", nargs="?")
    parser.add_argument("--tokenizer", help="a folder with a Hugging Face tokenizer")
    parser.add_argument("--dtype", choices=list(DTYPES), default="bfloat16")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if visible)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--layers",
        type=int,
        default=None,
        help="number of blocks (default: the shape's); width, MLP and vocabulary stay the shape's",
    )
    parser.add_argument(
        "--list", action="store_true", help="print every shape's parameter count and exit"
    )
    args = parser.parse_args(argv)
    if args.list:
        for name in SHAPES:
            print(f"{name}: {parameter_count(name, layers=args.layers):,} parameters")
        return
    if not (args.shape and args.out_dir and args.tokenizer):
        parser.error("SHAPE, OUT_DIR and --tokenizer are required (or --list)")
    made = make_model(
        args.shape, args.out_dir, args.tokenizer, args.dtype, args.device, args.seed, args.layers
    )
    print(
        f"{made['shape']} ({made['model_type']}, {made['layers']} layers): "
        f"{made['parameters']:,} parameters "
        f"({made['parameters'] / 1e9:.2f}e9), vocabulary {made['vocab_size']} (tokenizer "
        f"{made['tokenizer_length']}), {made['dtype']} on {made['device']}; built in "
        f"{made['build_seconds']:.1f} s, saved in {made['save_seconds']:.1f} s to "
        f"{Path(args.out_dir).resolve()}"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
