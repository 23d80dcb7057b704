"""What a head-only job (decode_predictions, fit_shortlist, train_map, prediction_examples)
pays to check a cached model before reading its head: the whole weights file checked against
the manifest (before: jtc.model.manifest.check_manifest) against the other files, the weights
file's header and the head's tensors only (now: Manifest.check_but_tensors + check_tensors).

The cache is synthetic, of Llama-2-7B's proportions scaled down by --scale: 32 blocks of
4,096-wide float16 weights (202 M parameters each) and a 32,000 × 4,096 unembedding plus the
final norm (the head: 262 MB at any scale, as in the real model; --vocab gives it fewer rows).
The check reads files from the page cache after the first pass, so each time is the best of three.

Run: .venv/bin/python bench/bench_head_check.py [--scale 0.15]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from jtc.model.manifest import Manifest, check_manifest, write_manifest  # noqa: E402

WIDTH, VOCAB, LAYERS, BLOCK_PARAMETERS = 4096, 32000, 32, 202_375_168
HEAD = ["lm_head.weight", "model.norm.weight"]


def best(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.15, help="share of the blocks' weights")
    parser.add_argument("--vocab", type=int, default=VOCAB, help="the head's rows (tests: fewer)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = max(1, int(BLOCK_PARAMETERS * args.scale) // WIDTH)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tensors = {
            f"model.layers.{i}.weight": rng.standard_normal((rows, WIDTH), np.float32).astype(
                np.float16
            )
            for i in range(LAYERS)
        }
        tensors["lm_head.weight"] = rng.standard_normal((args.vocab, WIDTH), np.float32).astype(
            np.float16
        )
        tensors["model.norm.weight"] = np.ones(WIDTH, np.float16)
        save_file(tensors, str(folder / "model.safetensors"))
        del tensors
        (folder / "config.json").write_text("{}")
        write_manifest(folder)
        size = (folder / "model.safetensors").stat().st_size

        def head_only() -> None:
            manifest = Manifest(folder)
            manifest.check_but_tensors()
            manifest.check_tensors("model.safetensors", HEAD)

        whole, head = best(lambda: check_manifest(folder)), best(head_only)
        per_gb_whole = whole / (size / 1e9)
        print(f"weights file: {size / 1e9:.2f} GB ({LAYERS} blocks at scale {args.scale})")
        print(f"whole file checked (before):          {whole:.3f} s ({per_gb_whole:.2f} s/GB)")
        print(f"header + head tensors checked (now):  {head:.3f} s -> {whole / head:.1f}× less")
        full_7b = 13.5  # GB: Llama-2-7B in float16
        print(
            f"at 7B ({full_7b} GB): about {per_gb_whole * full_7b:.1f} s before, {head:.2f} s "
            f"now (the head's 262 MB do not shrink with --scale)"
        )


if __name__ == "__main__":
    main()
