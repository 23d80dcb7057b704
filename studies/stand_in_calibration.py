"""Study behind docs/findings.md, "An exportable stand-in: ReplaceMe's map in a rotated stream"
(the ridge against more calibration text; numbers of commit c31ee51).

How depth pruning's fitted stand-ins depend on their calibration: for one span of a finished
run's model, the next-token perplexity ratio on the run's first validation sentences (every token,
the same tokens as `pruning_selected`) of each variant fitted on more or fewer calibration
sentences, with or without a ridge and the first token. What the workflow would give with
`pruning.calibration_sentences`, `pruning.ridge` and `pruning.skip_first_token` set so, for this
span alone (jtc.pruning.calibrate.calibrate_spans), without rerunning the experiment.

    .venv/bin/python studies/stand_in_calibration.py RUN_FOLDER --corpus news --start 12 \
        --length 8 [--model smollm2] [--sizes 96 384] [--ridges 0 1e-3] [--skip-first 0 1] \
        [--variants mat replaceme rotation_replaceme] [--sentences 64] [--threads 2]

Prints a Markdown table (ratio [95% interval over sentences], calibration loss); writes nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pyarrow.compute as pc
import torch
from ratios import perplexity_ratio

from jtc.data.extract import pad_token_id
from jtc.files.io import read_table
from jtc.model.adapters import adapter_of
from jtc.model.cache import load_cached
from jtc.model.head import Head
from jtc.pruning.calibrate import calibrate_spans
from jtc.pruning.inputs import every_token
from jtc.pruning.map_file import load_stand_in, save_span_maps
from jtc.pruning.runs import SpanRun, span_scores
from jtc.settings import CalibrationSettings


def ratio(table) -> str:
    point, low, high = perplexity_ratio(
        *(table.column(c).to_numpy() for c in ("cross_entropy", "cross_entropy_full", "tokens"))
    )
    return f"{point:.3f} [{low:.2f}, {high:.2f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
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
    runs = [SpanRun.span(v, args.start, args.length) for v in args.variants]
    print("| calibration sentences | tokens | skip first | ridge | variant | ratio | loss |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size in args.sizes:
        for skip in args.skip_first:
            for ridge in args.ridges:
                settings = CalibrationSettings.defaults(
                    variants=args.variants,
                    calibration={"text": "sentences"},
                    calibration_sentences=size,
                    ridge=ridge,
                    skip_first_token=bool(skip),
                )
                started = time.perf_counter()
                fits, tokens = calibrate_spans(
                    model, tokenizer, info, sentences, settings, [(args.start, args.length)],
                    corpus=args.corpus, batch_size=16, max_tokens=args.max_tokens,
                )  # fmt: skip
                seconds = time.perf_counter() - started
                with tempfile.TemporaryDirectory() as scratch:
                    maps = Path(scratch) / "maps.safetensors"
                    save_span_maps(maps, fits, {"model": args.model, "corpus": args.corpus})
                    table = span_scores(
                        model, adapter, head, evaluation, ids, runs,
                        lambda run, maps=maps: load_stand_in(maps, run.variant, run.start,
                                                             run.length),
                        16, pad,
                    )  # fmt: skip
                for fit in fits:
                    rows = table.filter(pc.equal(table.column("variant"), fit.variant))
                    print(
                        f"| {size} | {tokens} | {skip} | {ridge:g} | {fit.variant} | "
                        f"{ratio(rows)} | {fit.loss:.4f} |",
                        flush=True,
                    )
                print(f"<!-- calibrated on {size} sentences in {seconds:.0f} s -->", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
