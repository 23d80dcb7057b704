"""Study behind docs/findings.md, "Depth pruning" (the smaller model, deployed; numbers of commit
22a500f).

The pruned SmolLM2 as it would be deployed: parameters and greedy-generation tokens per second of
the checkpoints `snakemake pruned` writes (jtc.pruning.checkpoint.export), against the
whole model, with the share of each prompt's greedy output that follows the whole model's.

It prunes the span the default run chose (results/: the cached model, the pruning maps and
selection of one corpus) at the length closest to a quarter of the depth: replaceme and drop, each
with the span its own `measured` rule chose (replaceme's, also drop with replaceme's span), writes
each as a Hugging Face folder in a temporary directory, loads it back with plain transformers and
times `generate` (greedy, KV cache, one prompt at a time, rounds alternating between the models;
the median round counts).

    .venv/bin/python studies/pruned_checkpoints.py [--results results] [--corpus news] [--tokens 32]
        [--prompts 8] [--rounds 3] [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from common import peak_matmul_gflops  # noqa: E402  (bench/common.py)

from jtc import paths  # noqa: E402
from jtc.files.io import read_json, read_table  # noqa: E402
from jtc.pruning.checkpoint import export  # noqa: E402
from jtc.pruning.spans import chosen_start, export_length  # noqa: E402

MODEL = "smollm2"


def prompts(results: Path, corpus: str, tokenizer, count: int) -> list[list[int]]:
    """The first 8 tokens of the first `count` validation sentences."""
    sentences = read_table(paths.under(results, paths.CORPUS, corpus=corpus)).to_pylist()
    texts = [s["text"] for s in sentences if s["split"] == "validation"][:count]
    return [tokenizer(text)["input_ids"][:8] for text in texts]


def generation(model, inputs: list[list[int]], tokens: int) -> tuple[float, list[list[int]]]:
    """(seconds, new tokens of each prompt) of greedy generation, one prompt at a time."""
    outputs, seconds = [], 0.0
    with torch.inference_mode():
        for prompt in inputs:
            ids = torch.tensor([prompt])
            started = time.perf_counter()
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=False,
                pad_token_id=0,
            )
            seconds += time.perf_counter() - started
            outputs.append(out[0, len(prompt) :].tolist())
    return seconds, outputs


def followed(tokens: list[list[int]], full: list[list[int]]) -> float:
    """Mean share of a prompt's new tokens before its output first differs from the whole
    model's (later tokens are generated from another context, so they are not compared)."""
    shares = []
    for got, want in zip(tokens, full, strict=True):
        differ = [i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b]
        shares.append((differ[0] if differ else len(want)) / len(want))
    return float(np.mean(shares))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--corpus", default="news")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per prompt")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model_dir = paths.under(args.results, paths.MODEL, model=MODEL)
    folder = paths.under(args.results, paths.PRUNING, model=MODEL, corpus=args.corpus)
    num_layers = read_json(model_dir / "info.json")["num_layers"]
    selection = read_table(folder / "selection.parquet").to_pylist()
    n = export_length({r["length"] for r in selection}, num_layers)
    start = chosen_start(selection, n, "replaceme", "measured")
    drop_start = chosen_start(selection, n, "drop", "measured")
    if start is None or drop_start is None:
        raise SystemExit(f"the run chose no replaceme or drop span of {n} blocks by measured")
    candidates = {
        "replaceme": ("replaceme", start),
        "drop, replaceme's span": ("drop", start),
        "drop": ("drop", drop_start),
    }
    models = {"full model": AutoModelForCausalLM.from_pretrained(model_dir).eval()}
    spans = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, (variant, first) in candidates.items():
            out = export(
                model_dir,
                Path(scratch) / name.replace(",", "").replace(" ", "-"),
                start=first,
                length=n,
                variant=variant,
                maps=folder / "maps.safetensors",
            )
            models[name] = AutoModelForCausalLM.from_pretrained(out).eval()
            spans[name] = f"blocks {first + 1}-{first + n}"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    inputs = prompts(args.results, args.corpus, tokenizer, args.prompts)
    peak_before = peak_matmul_gflops(args.threads)
    times: dict[str, list[float]] = {name: [] for name in models}
    outputs: dict[str, list[list[int]]] = {}
    for _ in range(args.rounds):
        for name, model in models.items():
            seconds, outputs[name] = generation(model, inputs, args.tokens)
            times[name].append(seconds)
    peak_after = peak_matmul_gflops(args.threads)
    new_tokens = args.tokens * len(inputs)
    full_speed = new_tokens / float(np.median(times["full model"]))
    full_parameters = sum(p.numel() for p in models["full model"].parameters())
    rows = []
    for name, model in models.items():
        speed = new_tokens / float(np.median(times[name]))
        parameters = sum(p.numel() for p in model.parameters())
        rows.append(
            {
                "model": name,
                "removed": spans.get(name, "none"),
                "blocks": model.config.num_hidden_layers,
                "parameters": parameters,
                "parameters_share": parameters / full_parameters,
                "tokens_per_second": speed,
                "speedup": speed / full_speed,
                "followed_full_output": followed(outputs[name], outputs["full model"]),
            }
        )
    print(
        f"SmolLM2 ({num_layers} blocks), corpus {args.corpus}: {n} blocks removed; "
        f"{len(inputs)} prompts x {args.tokens} new tokens, {args.threads} thread(s), "
        f"median of {args.rounds} rounds; fp32 matmul peak {peak_before:.0f} / {peak_after:.0f} "
        "GFLOP/s before / after"
    )
    print(
        f"{'model':<24} {'removed':<14} {'blocks':>6} {'parameters':>12} {'share':>6} "
        f"{'tokens/s':>9} {'speedup':>8} {'followed':>9}"
    )
    for r in rows:
        print(
            f"{r['model']:<24} {r['removed']:<14} {r['blocks']:>6} {r['parameters']:>12,} "
            f"{r['parameters_share']:>6.3f} {r['tokens_per_second']:>9.1f} {r['speedup']:>8.2f} "
            f"{r['followed_full_output']:>9.2f}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"length": n, "peak_gflops": [peak_before, peak_after], "rows": rows}, indent=1
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
