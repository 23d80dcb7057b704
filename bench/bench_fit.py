"""Fitting mat for every layer pair: jtc (one Cholesky per source layer) against one
scikit-learn LinearRegression(fit_intercept=False) per pair (the reference code's way).

Run: .venv/bin/python bench/bench_fit.py [--states results/hidden/smollm2/news/train]
Without real states it uses random ones of SmolLM2's shape (31 sites x 576, 2000 rows), or of
--sites/--width/--rows. The scikit-learn time is measured on --baseline-pairs pairs and scaled
to all pairs.

On a GPU: --device cuda fits every pair through torch in float64 on the GPU (what a workflow
job with a GPU does) and compares the maps of source layer 0 into --check-targets targets with
the CPU path's (largest relative difference). The issue's target: a 32 x 4096 model (33 sites)
from 9,000 rows in <= 60 s:
  python bench/bench_fit.py --states none --sites 33 --width 4096 --rows 9000 --device cuda \
      --baseline-pairs 0 --threads 16
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from sklearn.linear_model import LinearRegression
from threadpoolctl import threadpool_limits

from jtc.data.states import read_states
from jtc.files.io import read_json
from jtc.shortcuts.closed_form import fit_source


def load(states: str | None, n: int, width: int, sites: int, device: str) -> list[np.ndarray]:
    if states and Path(states, "info.json").exists():
        info = read_json(Path(states, "info.json"))
        return [read_states(states, layer)[1] for layer in range(info["num_layers"] + 1)]
    if device != "cpu":  # made on the GPU: a CPU would take minutes at 4096 wide
        import torch

        gen = torch.Generator(device).manual_seed(0)
        base = torch.randn(n, width, generator=gen, device=device)
        return [
            (
                base @ torch.randn(width, width, generator=gen, device=device) / width**0.5
                + torch.randn(n, width, generator=gen, device=device)
            )
            .cpu()
            .numpy()
            for _ in range(sites)
        ]
    rng = np.random.default_rng(0)
    base = rng.normal(size=(n, width))
    return [
        base @ rng.normal(size=(width, width)) / width**0.5 + rng.normal(size=(n, width))
        for _ in range(sites)
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--states", default="results/hidden/smollm2/news/train")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--baseline-pairs", type=int, default=12)
    parser.add_argument("--sites", type=int, default=31)
    parser.add_argument("--width", type=int, default=576)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: jtc's GPU path")
    parser.add_argument("--check-targets", type=int, default=2)
    args = parser.parse_args(argv)
    layers = load(args.states, args.rows, args.width, args.sites, args.device)
    device = None
    if args.device != "cpu":
        import torch

        device = torch.device(args.device)
    sites = len(layers)
    n, width = layers[0].shape
    pairs = [(s, t) for s in range(sites) for t in range(s + 1, sites)]
    print(
        f"{sites} sites x {width} wide, {n} training rows, {len(pairs)} pairs, "
        f"{args.threads} threads, on {args.device}"
    )
    with threadpool_limits(args.threads):
        start = time.perf_counter()
        for source in range(sites - 1):
            fitted, _, _ = fit_source(
                layers[source], ((t, layers[t]) for t in range(source + 1, sites)), device
            )
            if source == 0:
                first = fitted
        ours = time.perf_counter() - start
        print(f"jtc: {ours:.1f} s for all pairs ({ours / len(pairs) * 1e3:.1f} ms a pair)")
        if device is not None:
            checked = range(1, 1 + min(args.check_targets, sites - 1))
            on_cpu, _, _ = fit_source(layers[0], ((t, layers[t]) for t in checked))
            worst = max(
                float(np.abs(first[t] - on_cpu[t]).max() / np.abs(on_cpu[t]).max()) for t in checked
            )
            print(f"largest difference from the CPU path (source 0): {worst:.2e} relative")
        if not args.baseline_pairs:
            return
        rng = np.random.default_rng(0)
        sample = [pairs[i] for i in rng.choice(len(pairs), args.baseline_pairs, replace=False)]
        start = time.perf_counter()
        for s, t in sample:
            LinearRegression(fit_intercept=False).fit(layers[s], layers[t])
        per_pair = (time.perf_counter() - start) / len(sample)
    baseline = per_pair * len(pairs)
    print(f"scikit-learn: {per_pair * 1e3:.0f} ms a pair -> {baseline:.0f} s for all pairs")
    print(f"speed-up: {baseline / ours:.1f}x")


if __name__ == "__main__":
    main()
