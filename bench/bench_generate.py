"""Greedy generation with early exit on SmolLM2, as it would be deployed (jtc.evaluation.generate):
tokens per second for the whole model, and for exiting with id and with mat at the λ the default run
chose (in sample, checking every layer) for 95% and 90% agreement, beside that λ's held-out
agreement and the multiply-adds the early-exit stage predicts.

Run after the default workflow (it reads results/: the cached model, mat's maps, the early-exit
table, the validation positions and the news sentences):
    .venv/bin/python bench/bench_generate.py [--results results] [--tokens 32] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import load_smollm2  # noqa: E402

from jtc import paths  # noqa: E402
from jtc.api import Shortcuts  # noqa: E402
from jtc.data.states import read_positions  # noqa: E402
from jtc.evaluation.early_exit import ExitRule, mean_prefix_length  # noqa: E402
from jtc.evaluation.generate import generate  # noqa: E402
from jtc.evaluation.shortlist import Shortlist, load_factors  # noqa: E402
from jtc.files.io import read_table  # noqa: E402
from jtc.model.adapters import adapter_of  # noqa: E402
from jtc.model.head import Head  # noqa: E402
from jtc.settings import EarlyExitSettings  # noqa: E402

MODEL, CORPUS, TARGETS = "smollm2", "news", (0.95, 0.9)
# (check, interval): the paper's full check at every layer; the shortlist check at every layer
# and at every 4th
VARIANTS = (("full", 1), ("shortlist", 1), ("shortlist", 4))


def chosen(results: Path, method: str, target: float, check: str, every: int) -> dict:
    """The early-exit table's rows for a method, target, check and check interval, by
    selection."""
    table = read_table(results / f"metrics/{MODEL}/{CORPUS}/early_exit_savings.parquet")
    key = (method, target, check, every)
    rows = [
        r
        for r in table.to_pylist()
        if (r["method"], r["target"], r["check"], r["check_every"]) == key
    ]
    return {r["selection"]: r for r in rows}


def agreement(tokens: list[list[int]], full: list[list[int]]) -> dict:
    """How far each prompt's output follows the whole model's greedy output: the new tokens
    before the first difference (mean over prompts), and the share of prompts with no
    difference. (After a difference the contexts differ, so later tokens are not compared.)"""
    leading = []
    for got, want in zip(tokens, full, strict=True):
        differ = [i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b]
        leading.append(differ[0] if differ else len(want))
    same = [a == b for a, b in zip(tokens, full, strict=True)]
    return {
        "tokens_before_divergence": float(np.mean(leading)),
        "same_sequences_as_full": float(np.mean(same)),
    }


def prompts(results: Path, tokenizer, count: int) -> list[list[int]]:
    """The first 8 tokens of the first `count` validation sentences of news."""
    sentences = read_table(results / f"corpora/{CORPUS}.parquet").to_pylist()
    texts = [s["text"] for s in sentences if s["split"] == "validation"][:count]
    return [tokenizer(text)["input_ids"][:8] for text in texts]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per prompt")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--candidates", type=int, default=64, help="the run's early_exit.shortlist_candidates"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = args.results
    model, tokenizer, info = load_smollm2(results / f"models/{MODEL}")
    adapter = adapter_of(info)
    head = Head.from_model(model, adapter)
    positions, _ = read_positions(results / f"hidden/{MODEL}/{CORPUS}/validation")
    length = mean_prefix_length(positions.column("position").to_numpy())
    rule = ExitRule.of(EarlyExitSettings.defaults())  # the default experiment's rule
    mat = Shortcuts.from_results(results, MODEL, CORPUS, "mat")
    shortcuts = {"id": lambda _layer, h: h, "mat": lambda layer, h: mat.apply(h, source=layer)}
    inputs = prompts(results, tokenizer, args.prompts)
    factors = load_factors(paths.under(results, paths.SHORTLIST, model=MODEL, corpus=CORPUS))
    checks = {"full": None, "shortlist": Shortlist(head, factors, args.candidates)}

    def run(method: str | None, lam: float | None, check: str = "full", every: int = 1) -> dict:
        def threshold(t: int) -> float:
            return rule.lambda_weight * lam + rule.decay_weight * np.exp(-rule.tau * t / length)

        runs = [
            generate(
                model,
                adapter,
                head,
                shortcuts.get(method, shortcuts["id"]),
                prompt,
                args.tokens,
                threshold if lam is not None else None,
                every=every,
                shortlist=checks[check],
            )
            for prompt in inputs
        ]
        seconds = sum(r.seconds for r in runs)
        exits = [layer for r in runs for layer in r.exit_layers[1:]]
        return {
            "tokens_per_second": sum(len(r.tokens) - 1 for r in runs) / seconds,
            "mean_exit_layer": float(np.mean(exits)),
            "tokens": [r.tokens for r in runs],
        }

    full = run(None, None)
    rows = [{"run": "full model", **full}]
    for target, (check, every), method in itertools.product(TARGETS, VARIANTS, ("id", "mat")):
        rows_for = chosen(results, method, target, check, every)
        if "in_sample" not in rows_for:  # no λ reaches the target
            continue
        lam = rows_for["in_sample"]["lambda"]
        out = run(method, lam, check, every)
        rows.append(
            {
                "run": f"{method}, {check}/{every}, {target:.0%}",
                "lambda": lam,
                "held_out_accuracy": rows_for["held_out"]["accuracy"],
                "predicted_macs_percent": rows_for["in_sample"]["macs_percent"],
                **agreement(out["tokens"], full["tokens"]),
                **out,
            }
        )
    print(f"SmolLM2 ({info['num_layers']} layers), {args.prompts} prompts x {args.tokens} "
          f"new tokens, {args.threads} threads")  # fmt: skip
    print(f"{'run':26s} {'tok/s':>7s} {'vs full':>8s} {'exit layer':>10s} {'MACs %':>7s} "
          f"{'held-out acc':>12s} {'same as full':>12s}")  # fmt: skip
    for row in rows:
        print(
            f"{row['run']:26s} {row['tokens_per_second']:7.1f} "
            f"{row['tokens_per_second'] / full['tokens_per_second']:8.2f} "
            f"{row['mean_exit_layer']:10.1f} {row.get('predicted_macs_percent', 100.0):7.0f} "
            f"{row.get('held_out_accuracy', 1.0):12.3f} "
            f"{row.get('tokens_before_divergence', args.tokens):9.1f}/{args.tokens}"
        )
    print(
        "MACs % and held-out acc: the early-exit table's (teacher-forced validation positions); "
        "same as full: new tokens equal to the whole model's greedy output before the first "
        "difference, mean over prompts"
    )
    if args.json:
        for row in rows:
            row.pop("tokens")
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
