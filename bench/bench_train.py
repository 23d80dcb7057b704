"""Training time of the trained shortcut methods per layer pair (NJTC, N-NJTC, tuned lens), with
the default settings (the config schema's, through jtc.settings), and the time of rrr (their
closed-form counterpart).

Per pair it prints the seconds, the epochs run until early stopping and the best epoch (0: the
start was never beaten), the held-out loss at the start and at its best, and for NJTC and N-NJTC
the training MSE over all rows beside rrr's (the optimum of NJTC's objective, fitted on the same
rows). The methods start from their closed-form optimum (jtc.shortcuts.train); --cold starts them
as before (torch.nn.Linear's random maps, the identity for the tuned lens) for comparison, and --set
METHOD.KEY=VALUE overrides a default (e.g. --set tuned_lens.learning_rate=3e-5).

On the workflow's SmolLM2 training states (default), or with --synthetic on random states and a
random head of SmolLM2's shape (2,000 rows, width 576, vocabulary 49,152, or --rows, --width,
--vocab: the time per epoch depends only on the shapes), which needs no workflow results and so
runs on a bare GPU machine.
Also measures what one Snakemake job pays before it trains anything (a fresh Python that
imports torch and jtc.shortcuts.train and reads one layer's states): the reason the workflow trains
all of a source layer's pairs in one job rather than one job per pair. The tuned lens is compared
with the matrix-multiply roofline of its vocabulary products (4·n·d·V FLOP per epoch).

    .venv/bin/python bench/bench_train.py [--sources 5 15 25] [--synthetic] [--device cuda]
        [--cold] [--set njtc.patience=3 ...] [--methods njtc nnjtc rrr tuned_lens]
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))
from common import peak_matmul_gflops  # noqa: E402

from jtc.devices import job_device  # noqa: E402
from jtc.model.head import Head  # noqa: E402
from jtc.settings import TrainSettings  # noqa: E402
from jtc.shortcuts.closed_form import fit_source_reduced_rank  # noqa: E402
from jtc.shortcuts.lens import train_tuned_lens  # noqa: E402
from jtc.shortcuts.maps import ShortcutMap  # noqa: E402
from jtc.shortcuts.methods import METHODS, default_rank  # noqa: E402
from jtc.shortcuts.train import train_low_rank  # noqa: E402

TRAINED = ("njtc", "nnjtc", "tuned_lens")


def settings_of(method: str, args) -> TrainSettings:
    """The method's default settings (its settings object's, from the schema), with --set
    overrides and --cold."""
    kind = METHODS[method].settings
    block = dataclasses.asdict(kind.defaults(method))
    for item in args.set:
        key, _, value = item.partition("=")
        name, _, field = key.partition(".")
        if name == method:
            block[field] = type(block[field])(value) if block.get(field) is not None else value
    return dataclasses.replace(kind.of(block), warm_start=not args.cold)


def mse(parts: dict, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean((ShortcutMap(parts)(x) - y) ** 2))


def job_start_seconds(train_dir: str) -> float:
    code = (
        "import torch, jtc.shortcuts.fit, jtc.shortcuts.train, jtc.stages.fit; "
        "from jtc.data.states import read_states; "
        f"read_states({train_dir!r}, 0)"
    )
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def real_data(args, device):
    """{source: states}, final states and the cached SmolLM2 head."""
    from jtc.data.states import read_aligned, read_states
    from jtc.files.io import read_json
    from jtc.model.head import load_decoder_head

    last = read_json(Path(args.states) / "info.json")["num_layers"]
    ids, _ = read_states(args.states, 0)
    sources = {s: read_aligned(args.states, s, ids, np.float32) for s in args.sources}
    final = read_aligned(args.states, last, ids, np.float32)
    head = load_decoder_head(args.model, "smollm2", args.threads)
    head.weight = head.weight.to(device)
    head.bias = None if head.bias is None else head.bias.to(device)
    head.transform = None if head.transform is None else head.transform.to(device)
    start = job_start_seconds(args.states)
    print(f"job start (python + torch + jtc + one layer's states): {start:.2f} s")
    return sources, final, head, last


def synthetic_data(args, device):
    n, width, vocab = args.rows, args.width, args.vocab
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--states", default="results/hidden/smollm2/news/train")
    parser.add_argument("--model", default="results/models/smollm2")
    parser.add_argument("--sources", type=int, nargs="+", default=[5, 15, 25])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--synthetic", action="store_true")
    parser.add_argument("--rows", type=int, default=2000, help="with --synthetic")
    parser.add_argument("--width", type=int, default=576, help="with --synthetic")
    parser.add_argument("--vocab", type=int, default=49152, help="with --synthetic")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    parser.add_argument(
        "--cold", action="store_true", help="random / identity starts (before the closed form)"
    )
    parser.add_argument("--set", action="append", default=[], metavar="METHOD.KEY=VALUE")
    parser.add_argument(
        "--methods", nargs="+", default=["rrr", *TRAINED], choices=["rrr", *TRAINED]
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device) if args.device else job_device()
    load = synthetic_data if args.synthetic else real_data
    sources, final, head, last = load(args, device)
    n, width = final.shape
    where = torch.cuda.get_device_name() if device.type == "cuda" else f"{args.threads} CPU threads"
    data = "synthetic" if args.synthetic else args.states
    print(f"{data}: {n} training rows, width {width}, vocabulary {head.vocab_size}, {where}")

    rank = default_rank(width)
    start = "cold starts (random, identity)" if args.cold else "closed-form starts"
    print(f"rank {rank}, {start}; epochs: run until early stopping (best: 0 = the start)")
    best_mse = {}
    for source, x in sources.items():  # rrr, also the yardstick of NJTC's training MSE
        begin = time.perf_counter()
        with threadpool_limits(args.threads):  # the CPU path: numpy and scipy, as the stage's
            linalg = device if device.type == "cuda" else None
            maps, solver, _ = fit_source_reduced_rank(x, [(last, final)], rank, linalg)
        seconds = time.perf_counter() - begin
        best_mse[source] = mse(maps[last], x, final)
        if "rrr" in args.methods:
            print(
                f"rrr    {source:2d} -> {last}: {seconds:6.2f} s ({solver}), "
                f"training MSE {best_mse[source]:.4f}"
            )

    for method in ("njtc", "nnjtc"):
        if method not in args.methods:
            continue
        settings = settings_of(method, args)
        for source, x in sources.items():
            result = train_low_rank(
                x,
                final,
                rank=rank,
                normalise=method == "nnjtc",
                settings=settings,
                seed=0,
                device=device,
            )
            epochs = len(result.train_loss)
            trained = mse(result.tensors, x, final)
            per_epoch = (result.seconds - result.start_seconds) / max(epochs, 1)
            print(
                f"{method:6s} {source:2d} -> {last}: {result.seconds:6.2f} s (start "
                f"{result.start_seconds:.2f} s, {epochs} epochs of {1000 * per_epoch:.1f} ms), "
                f"best {result.best_epoch}"
                f", held-out MSE {result.holdout_loss[0]:.4f} -> {min(result.holdout_loss):.4f}"
                f", training MSE {trained:.4f} (rrr {best_mse[source]:.4f}, "
                f"{trained / best_mse[source] - 1:+.2%})"
            )

    if "tuned_lens" not in args.methods:
        return
    settings = settings_of("tuned_lens", args)
    peak = peak_matmul_gflops(args.threads) if device.type == "cpu" else None
    for source, x in sources.items():
        result = train_tuned_lens(x, head, final, settings=settings, seed=0)
        epochs = len(result.train_loss)
        flop = 4 * n * width * head.vocab_size * epochs  # forward + backward through W_U
        rate = flop / result.seconds / 1e9
        line = (
            f"tuned_lens {source:2d} -> {last}: {result.seconds:6.2f} s (start "
            f"{result.start_seconds:.2f} s, {epochs} epochs), best "
            f"{result.best_epoch}, held-out KL {result.holdout_loss[0]:.4f} -> "
            f"{min(result.holdout_loss):.4f}, {rate:.0f} GFLOP/s"
        )
        if peak:
            line += f" = {rate / peak:.0%} of the {peak:.0f} GFLOP/s fp32 peak"
        print(line)


if __name__ == "__main__":
    main()
