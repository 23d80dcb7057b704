"""Training time of the trained shortcut methods per layer pair (NJTC, N-NJTC, tuned lens), on
the workflow's SmolLM2 training states, with the default settings of jtc/methods.py.

Also measures what one Snakemake job pays before it trains anything (a fresh Python that
imports torch and jtc.train and reads one layer's states): the reason the workflow trains all
of a source layer's pairs in one job rather than one job per pair. The tuned lens is compared
with the matrix-multiply roofline of its vocabulary products (4·n·d·V FLOP per epoch).

Run after the default workflow (needs results/hidden/smollm2/news and results/models/smollm2):
    .venv/bin/python bench/bench_train.py [--sources 5 15 25] [--device cuda]
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

from jtc.io import read_aligned, read_json, read_states  # noqa: E402
from jtc.methods import METHODS  # noqa: E402
from jtc.pipeline import _load_head  # noqa: E402
from jtc.train import TrainSettings, default_rank, train_low_rank, train_tuned_lens  # noqa: E402


def job_start_seconds(train_dir: str) -> float:
    code = (
        "import torch, jtc.train, jtc.pipeline; from jtc.io import read_states; "
        f"read_states({train_dir!r}, 0)"
    )
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--states", default="results/hidden/smollm2/news/train")
    parser.add_argument("--model", default="results/models/smollm2")
    parser.add_argument("--sources", type=int, nargs="+", default=[5, 15, 25])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    info = read_json(Path(args.states) / "info.json")
    last = info["num_layers"]
    ids, _ = read_states(args.states, 0)
    final = read_aligned(args.states, last, ids, np.float32)
    n, width = final.shape
    print(f"{n} training rows, width {width}, device {device}, {args.threads} CPU threads")
    start = job_start_seconds(args.states)
    print(f"job start (python + torch + jtc + one layer's states): {start:.2f} s")

    for method in ("njtc", "nnjtc"):
        settings = TrainSettings.from_config(METHODS[method].defaults)
        for source in args.sources:
            x = read_aligned(args.states, source, ids, np.float32)
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

    head, _, _ = _load_head(args.model, "smollm2", args.threads)
    if head.device != device:
        head.weight = head.weight.to(device)
        head.bias = None if head.bias is None else head.bias.to(device)
        head.transform = None if head.transform is None else head.transform.to(device)
    settings = TrainSettings.from_config(METHODS["tuned_lens"].defaults)
    peak = peak_matmul_gflops(args.threads) if device.type == "cpu" else None
    for source in args.sources:
        x = read_aligned(args.states, source, ids, np.float32)
        result = train_tuned_lens(x, head, final, settings=settings, seed=0)
        epochs = len(result.train_loss)
        flop = 4 * n * width * head.vocab_size * epochs  # forward + backward through W_U
        line = (
            f"tuned_lens {source:2d} -> {last}: {result.seconds:6.2f} s, {epochs} epochs, "
            f"KL {result.holdout_loss[0]:.2f} -> {min(result.holdout_loss):.2f}"
        )
        if peak:
            rate = flop / result.seconds / 1e9
            line += f", {rate:.0f} GFLOP/s = {rate / peak:.0%} of the {peak:.0f} GFLOP/s peak"
        print(line)


if __name__ == "__main__":
    main()
