"""Fitting mat for every layer pair: jtc (one Cholesky per source layer) against one
scikit-learn LinearRegression(fit_intercept=False) per pair (the reference code's way).

Run: .venv/bin/python bench/bench_fit.py [--states results/hidden/smollm2/news/train]
Without real states it uses random ones of SmolLM2's shape (31 sites x 576, 2000 rows).
The scikit-learn time is measured on --baseline-pairs pairs and scaled to all pairs.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from sklearn.linear_model import LinearRegression
from threadpoolctl import threadpool_limits

from jtc.fit import fit_source
from jtc.io import read_json, read_states


def load(states: str | None, n: int, width: int, sites: int) -> list[np.ndarray]:
    if states and Path(states, "info.json").exists():
        info = read_json(Path(states, "info.json"))
        return [read_states(states, layer)[1] for layer in range(info["num_layers"] + 1)]
    rng = np.random.default_rng(0)
    base = rng.normal(size=(n, width))
    return [
        base @ rng.normal(size=(width, width)) / width**0.5 + rng.normal(size=(n, width))
        for _ in range(sites)
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--states", default="results/hidden/smollm2/news/train")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--baseline-pairs", type=int, default=12)
    args = parser.parse_args()
    layers = load(args.states, 2000, 576, 31)
    sites = len(layers)
    n, width = layers[0].shape
    pairs = [(s, t) for s in range(sites) for t in range(s + 1, sites)]
    print(
        f"{sites} sites x {width} wide, {n} training rows, {len(pairs)} pairs, "
        f"{args.threads} threads"
    )
    with threadpool_limits(args.threads):
        start = time.perf_counter()
        for source in range(sites - 1):
            fit_source(layers[source], ((t, layers[t]) for t in range(source + 1, sites)))
        ours = time.perf_counter() - start
        rng = np.random.default_rng(0)
        sample = [pairs[i] for i in rng.choice(len(pairs), args.baseline_pairs, replace=False)]
        start = time.perf_counter()
        for s, t in sample:
            LinearRegression(fit_intercept=False).fit(layers[s], layers[t])
        per_pair = (time.perf_counter() - start) / len(sample)
    baseline = per_pair * len(pairs)
    print(f"jtc: {ours:.1f} s for all pairs ({ours / len(pairs) * 1e3:.1f} ms a pair)")
    print(f"scikit-learn: {per_pair * 1e3:.0f} ms a pair -> {baseline:.0f} s for all pairs")
    print(f"speed-up: {baseline / ours:.1f}x")


if __name__ == "__main__":
    main()
