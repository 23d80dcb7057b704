"""Training time of the trained shortcut methods per layer pair (NJTC, N-NJTC, tuned lens), with
the default settings of jtc/methods.py.

On the workflow's SmolLM2 training states (default), or with --synthetic on random states and a
random head of SmolLM2's shape (2,000 rows, width 576, vocabulary 49,152: the time per epoch
depends only on the shapes), which needs no workflow results and so runs on a bare GPU machine.
Also measures what one Snakemake job pays before it trains anything (a fresh Python that
imports torch and jtc.train and reads one layer's states): the reason the workflow trains all
of a source layer's pairs in one job rather than one job per pair. The tuned lens is compared
with the matrix-multiply roofline of its vocabulary products (4·n·d·V FLOP per epoch).

    .venv/bin/python bench/bench_train.py [--sources 5 15 25] [--synthetic] [--device cuda]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import peak_matmul_gflops  # noqa: E402

from jtc.decode import Head  # noqa: E402
from jtc.methods import METHODS  # noqa: E402
from jtc.train import TrainSettings, default_rank, train_low_rank, train_tuned_lens  # noqa: E402


def job_start_seconds(train_dir: str) -> float:
    code = (
        "import torch, jtc.train, jtc.stages.fit; from jtc.io import read_states; "
        f"read_states({train_dir!r}, 0)"
    )
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def real_data(args, device):
    """{source: states}, final states and the cached SmolLM2 head."""
    from jtc.io import read_aligned, read_json, read_states
    from jtc.models import load_head

    last = read_json(Path(args.states) / "info.json")["num_layers"]
    ids, _ = read_states(args.states, 0)
    sources = {s: read_aligned(args.states, s, ids, np.float32) for s in args.sources}
    final = read_aligned(args.states, last, ids, np.float32)
    head, _, _ = load_head(args.model, "smollm2", args.threads)
    head.weight = head.weight.to(device)
    head.bias = None if head.bias is None else head.bias.to(device)
    head.transform = None if head.transform is None else head.transform.to(device)
    start = job_start_seconds(args.states)
    print(f"job start (python + torch + jtc + one layer's states): {start:.2f} s")
    return sources, final, head, last


def synthetic_data(args, device, n=2000, width=576, vocab=49152):
    rng = np.random.default_rng(0)
    base = rng.normal(size=(n, width)).astype(np.float32)
    sources = {
        s: (base @ rng.normal(size=(width, width)) / width**0.5).astype(np.float32)
        for s in args.sources
    }
    final = (base * 3 + rng.normal(size=(n, width))).astype(np.float32)
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(width).to(device)
    unembedding = torch.nn.Linear(width, vocab, bias=False).to(device)
    return sources, final, Head(norm, unembedding), 30


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--states", default="results/hidden/smollm2/news/train")
    parser.add_argument("--model", default="results/models/smollm2")
    parser.add_argument("--sources", type=int, nargs="+", default=[5, 15, 25])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--synthetic", action="store_true")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    load = synthetic_data if args.synthetic else real_data
    sources, final, head, last = load(args, device)
    n, width = final.shape
    where = torch.cuda.get_device_name() if device.type == "cuda" else f"{args.threads} CPU threads"
    data = "synthetic" if args.synthetic else args.states
    print(f"{data}: {n} training rows, width {width}, vocabulary {head.vocab_size}, {where}")

    for method in ("njtc", "nnjtc"):
        settings = TrainSettings.from_config(METHODS[method].defaults)
        for source, x in sources.items():
            result = train_low_rank(
                x,
                final,
                rank=default_rank(width),
                normalise=method == "nnjtc",
                settings=settings,
                seed=0,
                device=device,
            )
            epochs = len(result.train_loss)
            print(
                f"{method:6s} {source:2d} -> {last}: {result.seconds:6.2f} s, {epochs} epochs "
                f"({1000 * result.seconds / epochs:.1f} ms each), held-out MSE "
                f"{min(result.holdout_loss):.1f}"
            )

    settings = TrainSettings.from_config(METHODS["tuned_lens"].defaults)
    peak = peak_matmul_gflops(args.threads) if device.type == "cpu" else None
    for source, x in sources.items():
        result = train_tuned_lens(x, head, final, settings=settings, seed=0)
        epochs = len(result.train_loss)
        flop = 4 * n * width * head.vocab_size * epochs  # forward + backward through W_U
        rate = flop / result.seconds / 1e9
        line = (
            f"tuned_lens {source:2d} -> {last}: {result.seconds:6.2f} s, {epochs} epochs, "
            f"KL {result.holdout_loss[0]:.2f} -> {min(result.holdout_loss):.2f}, "
            f"{rate:.0f} GFLOP/s"
        )
        if peak:
            line += f" = {rate / peak:.0%} of the {peak:.0f} GFLOP/s fp32 peak"
        print(line)


if __name__ == "__main__":
    main()
