"""Sub-module shortcuts: the parts of a replace_parts job (one per model and corpus): the one
unmodified pass that records the states below every jump layer, against one pass per jump layer
(what a job per jump layer paid), and per (jump layer, variant) run the forward passes and the
scoring.

A replace_parts job loads the model, records the states below every jump layer in one pass,
then for every jump layer and variant runs blocks l+1..L with the variant's parts replaced and
scores the final states against the unmodified model's prediction. This benchmark times those
steps in-process on SmolLM2 with sentences of realistic length (token ids drawn at random: the
cost depends on lengths only) and random maps.
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

from jtc.data.extract import run_states  # noqa: E402
from jtc.model.adapters import adapter_of, part_adapter  # noqa: E402
from jtc.model.head import Head  # noqa: E402
from jtc.model.scoring import final_reference, score  # noqa: E402
from jtc.shortcuts.maps import ShortcutMap  # noqa: E402
from jtc.shortcuts.parts import VARIANTS  # noqa: E402
from jtc.shortcuts.replace import prefix_states, replaced_final_states  # noqa: E402


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--jumps", type=int, nargs="+", default=[0, 15, 29])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--model-dir", default="results/models/smollm2")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    (model, _, info), load_seconds = timed(load_smollm2, args.model_dir)
    adapter = part_adapter(adapter_of(info))
    head = Head.from_model(model, adapter)
    width, layers = info["hidden_size"], info["num_layers"]
    rng = np.random.default_rng(0)
    # causal inputs are cut after the drawn position: 2 to 40 tokens, ~21 on average
    vocab = head.vocab_size
    inputs = [rng.integers(0, vocab, size=rng.integers(2, 41)) for _ in range(args.sentences)]
    positions = np.array([len(x) - 1 for x in inputs])
    gold = rng.integers(0, vocab, size=args.sentences)
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
    prefixes, together = timed(
        prefix_states, model, adapter, inputs, args.jumps, args.batch_size, 0
    )
    apart = sum(
        timed(prefix_states, model, adapter, inputs, [jump], args.batch_size, 0)[1]
        for jump in args.jumps
    )
    print(
        f"states below jump layers {args.jumps}: one pass {together:.2f} s, "
        f"one pass per jump layer {apart:.2f} s"
    )
    print("variant   jump  forward s  scoring s")
    reference = final_reference(head, final, 10)
    total = load_seconds + together
    for jump in args.jumps:
        for variant, parts in VARIANTS.items():
            chosen = {k: m for k, m in maps.items() if k[1] in parts}
            states, forward = timed(
                replaced_final_states,
                model,
                adapter,
                prefixes[jump],
                positions,
                jump,
                chosen,
                args.batch_size,
            )
            _, scoring = timed(score, head, reference, states, gold)
            total += forward + scoring
            print(f"{variant:8s}  {jump:4d}  {forward:9.2f}  {scoring:9.2f}")
    print(f"job: {total:.1f} s (model load, the one pass, every run; Python start-up not included)")


if __name__ == "__main__":
    main()
