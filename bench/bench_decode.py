"""Prediction decoding (one method, every layer) against this machine's fp32 matmul roofline.

Decoding is dominated by products against the vocabulary: per position, one (V x d) product for
the final prediction plus one for its expected unembedding row, and one per layer scored.
Roofline time = those FLOPs / the measured peak. The rest (log-sum-exp, top-k, the final norm)
is overhead this benchmark shows separately.
Run: .venv/bin/python bench/bench_decode.py [--positions 500] [--threads 2]
Uses results/models/smollm2 when the workflow has cached it, else resolves it (~20 s).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import load_smollm2, peak_matmul_gflops  # noqa: E402

from jtc.model.adapters import adapter_of  # noqa: E402
from jtc.model.head import Head  # noqa: E402
from jtc.model.scoring import final_reference, score  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--positions", type=int, default=500)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model-dir", default="results/models/smollm2")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, _, info = load_smollm2(args.model_dir)
    head = Head.from_model(model, adapter_of(info))
    vocab, width = head.weight.shape
    layers = info["num_layers"] + 1
    n = args.positions
    rng = np.random.default_rng(0)
    final = rng.normal(size=(n, width)).astype(np.float32)
    states = [rng.normal(size=(n, width)).astype(np.float32) for _ in range(layers)]
    gold = rng.integers(0, vocab, size=n)
    peak = peak_matmul_gflops(args.threads)
    flops = 2 * n * vocab * width * (2 + layers)
    print(
        f"model: {info['name']}, vocabulary {vocab}, width {width}, {layers} layers scored, "
        f"{n} positions, {args.threads} threads; {flops / 1e9:.0f} GFLOP in vocabulary products"
    )
    print(f"peak fp32 matmul: {peak:.1f} GFLOP/s -> roofline {flops / peak / 1e9:.2f} s")
    score(head, final_reference(head, final[:64], 10), states[0][:64], gold[:64])  # warm-up
    start = time.perf_counter()
    reference = final_reference(head, final, 10)
    for layer_states in states:
        score(head, reference, layer_states, gold)
    elapsed = time.perf_counter() - start
    with torch.inference_mode():
        start = time.perf_counter()
        for _ in range(2 + layers):
            for rows in range(0, n, head.rows_per_chunk()):
                chunk = torch.from_numpy(final[rows : rows + head.rows_per_chunk()])
                torch.nn.functional.linear(chunk, head.weight)
        products = time.perf_counter() - start
    print(
        f"decode: {elapsed:.2f} s = {flops / peak / 1e9 / elapsed:.0%} of roofline "
        f"({n * layers / elapsed:.0f} position-layers/s); the bare products alone take "
        f"{products:.2f} s ({products / elapsed:.0%} of it)"
    )


if __name__ == "__main__":
    main()
