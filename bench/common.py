"""Shared helpers for the benchmarks."""

from __future__ import annotations

import time

import torch


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
