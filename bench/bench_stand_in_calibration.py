"""How depth pruning's fitted stand-ins depend on their calibration: for one span of a finished
run's model, the next-token perplexity ratio on the run's first validation sentences (every token,
the same tokens as `pruning_selected`) of each variant fitted on more or fewer calibration
sentences, with or without a ridge and the first token. What the workflow would give with
`pruning.calibration_sentences`, `pruning.ridge` and `pruning.skip_first_token` set so, for this
span alone, without rerunning the experiment.

    .venv/bin/python bench/bench_stand_in_calibration.py RUN_FOLDER --corpus news --start 12 \
        --length 8 [--model smollm2] [--sizes 96 384] [--ridges 0 1e-3] [--skip-first 0 1] \
        [--variants mat replaceme rotation_replaceme] [--sentences 64] [--threads 2]

Prints a Markdown table (ratio [95% interval over sentences], calibration loss); writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import ratio_interval  # noqa: E402

from jtc.data.extract import pad_token_id  # noqa: E402
from jtc.files.io import read_table  # noqa: E402
from jtc.model.adapters import adapter_of  # noqa: E402
from jtc.model.cache import load_cached  # noqa: E402
from jtc.model.head import Head  # noqa: E402
from jtc.pruning.calibrate import fit_span  # noqa: E402
from jtc.pruning.inputs import every_token  # noqa: E402
from jtc.pruning.runs import SpanRun, span_scores  # noqa: E402
from jtc.pruning.spans import MLP_FOLDED, ROTATION_PART, StatisticsPlan  # noqa: E402
from jtc.pruning.sums import span_statistics  # noqa: E402
from jtc.shortcuts.maps import ShortcutMap  # noqa: E402


def one_span_plan(start: int, length: int, variants: list[str]) -> StatisticsPlan:
    """The sums of one span only (every variant's), not of every span of its length."""
    i, j = start, start + length
    ffn = any(v in MLP_FOLDED for v in variants)
    return StatisticsPlan(
        pairs=((i, j),),
        state_sources=(i,),
        state_pairs=((i, j),),
        ffn_blocks=(i,) if ffn else (),
        ffn_pairs=((i, j),) if ffn else (),
    )


def ratio(table) -> str:
    point, low, high = ratio_interval(
        *(
            np.asarray(table.column(c).to_numpy(), dtype=float)
            for c in ("cross_entropy", "cross_entropy_full", "tokens")
        )
    )
    return f"{point:.3f} [{low:.2f}, {high:.2f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--start", type=int, required=True)
    parser.add_argument("--length", type=int, required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[96, 384])
    parser.add_argument("--ridges", type=float, nargs="+", default=[0.0])
    parser.add_argument("--skip-first", type=int, nargs="+", default=[0])
    parser.add_argument("--variants", nargs="+", default=["mat", "replaceme", "rotation_replaceme"])
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = args.folder / "results"
    model, tokenizer, info = load_cached(results / "models" / args.model)
    adapter, pad = adapter_of(info), pad_token_id(tokenizer)
    sentences = read_table(results / "corpora" / f"{args.corpus}.parquet")
    head = Head.from_model(model, adapter)
    evaluation, ids = every_token(
        tokenizer, info, sentences, "validation", args.sentences, args.corpus, args.max_tokens
    )
    plan = one_span_plan(args.start, args.length, args.variants)
    print("| calibration sentences | tokens | skip first | ridge | variant | ratio | loss |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size in args.sizes:
        inputs, _ = every_token(
            tokenizer, info, sentences, "train", size, args.corpus, args.max_tokens
        )
        for skip in args.skip_first:
            started = time.perf_counter()
            grams = span_statistics(model, adapter, inputs, plan, 16, pad, bool(skip))
            summed = time.perf_counter() - started
            for ridge in args.ridges:
                fits = {
                    v: fit_span(grams, v, args.start, args.length, 1, ridge) for v in args.variants
                }

                def maps(run, fits=fits):
                    tensors = dict(fits[run.variant].tensors)
                    rotation = tensors.pop(ROTATION_PART, None)
                    return (ShortcutMap(tensors) if tensors else None), rotation

                runs = [SpanRun.span(v, args.start, args.length) for v in args.variants]
                table = span_scores(model, adapter, head, evaluation, ids, runs, maps, 16, pad)
                for v in args.variants:
                    rows = table.filter(table.column("variant").to_numpy(zero_copy_only=False) == v)
                    print(
                        f"| {size} | {grams.tokens} | {skip} | {ridge:g} | {v} | {ratio(rows)} | "
                        f"{fits[v].loss:.4f} |",
                        flush=True,
                    )
            print(f"<!-- sums of {size} sentences: {summed:.0f} s -->", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
