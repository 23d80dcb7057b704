"""Sub-module shortcuts: time of one (variant, jump layer) job and the share of it spent in
forward passes, and what computing the blocks below each jump once (not once per variant) saves.

A replace_parts job loads the model, reads the stored states below its jump layer, runs blocks
l+1..L with the variant's parts replaced, and scores the final states against the unmodified
model's prediction. This benchmark times those steps in-process on SmolLM2 with sentences of
realistic length (token ids drawn at random: the cost depends on lengths only) and random maps.
Run: .venv/bin/python bench/bench_submodules.py [--sentences 200] [--jumps 0 15 29] [--threads 2]
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
from common import load_smollm2  # noqa: E402

from jtc.adapters import part_adapter  # noqa: E402
from jtc.decode import Head, final_reference, score  # noqa: E402
from jtc.extract import run_states  # noqa: E402
from jtc.maps import ShortcutMap  # noqa: E402
from jtc.parts import VARIANTS  # noqa: E402
from jtc.replace import prefix_states, replaced_final_states  # noqa: E402


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--jumps", type=int, nargs="+", default=[0, 15, 29])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--model-dir", default="results/models/smollm2")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    (model, _, info), load_seconds = timed(load_smollm2, args.model_dir)
    adapter = part_adapter(info["architecture"])
    head = Head.from_model(model, adapter)
    width, layers = info["hidden_size"], info["num_layers"]
    rng = np.random.default_rng(0)
    # causal inputs are cut after the drawn position: 2 to 40 tokens, ~21 on average
    inputs = [rng.integers(100, 40000, size=rng.integers(2, 41)) for _ in range(args.sentences)]
    positions = np.array([len(x) - 1 for x in inputs])
    gold = rng.integers(0, head.vocab_size, size=args.sentences)
    final = run_states(model, adapter, inputs, positions, args.batch_size, 0)[-1]
    maps = {
        (b, p): ShortcutMap({"weight": rng.normal(size=(width, width)) / np.sqrt(width)})
        for b in range(1, layers + 1)
        for p in ("attn_norm", "attn", "ffn_norm", "ffn")
    }
    print(
        f"model: {info['name']} ({layers} layers x {width}), {args.sentences} sentences, "
        f"{sum(map(len, inputs))} tokens, {args.threads} threads; model load {load_seconds:.1f} s"
    )
    print("variant   jump  forward s  scoring s  job s*  forward share")
    saved = 0.0
    for jump in args.jumps:
        prefix, prefix_seconds = timed(
            prefix_states, model, adapter, inputs, jump, args.batch_size, 0
        )
        saved += prefix_seconds * (len(VARIANTS) - 1)
        print(f"prefix    {jump:4d}  {prefix_seconds:9.2f}   (once per jump layer)")
        for variant, parts in VARIANTS.items():
            chosen = {k: m for k, m in maps.items() if k[1] in parts}
            states, forward = timed(
                replaced_final_states,
                model,
                adapter,
                prefix,
                positions,
                jump,
                chosen,
                args.batch_size,
            )
            start = time.perf_counter()
            score(head, final_reference(head, final, 10), states, gold)
            scoring = time.perf_counter() - start
            job = load_seconds + forward + scoring
            print(
                f"{variant:8s}  {jump:4d}  {forward:9.2f}  {scoring:9.2f}  {job:6.2f}"
                f"  {forward / job:12.0%}"
            )
    print(
        "* job s: model load + forward + scoring (a job's Python start-up is not included)\n"
        f"blocks below the jump computed once per jump, not per variant: "
        f"{saved:.1f} s of forward passes saved over {len(args.jumps)} jump layers"
    )


if __name__ == "__main__":
    main()
