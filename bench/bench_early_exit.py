"""Early exit: the cost of a λ sweep against the number of λ values, and against re-running the
model per λ (the reference implementation's approach).

1. The sweep alone (jtc.evaluation.early_exit.sweep) with 1 and 100 λ values, on the default
   run's real per-position tables when they exist (SmolLM2, 500 positions, 31 layers) and on a
   synthetic table of the paper's largest size (GPT2-XL: 3,000 positions, 49 layers).
2. The whole early_exit stage (reading the tables, both sweeps, writing) with 1 and 100 λ.
3. Running SmolLM2 block by block and stopping (jtc.evaluation.early_exit.run_with_early_exit)
   for a sample of tokens at one λ, extrapolated to 100 λ × all validation tokens.
Run: .venv/bin/python bench/bench_early_exit.py [--threads 2]  (after the default workflow)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import load_smollm2  # noqa: E402

from jtc.data.extract import prepare_inputs  # noqa: E402
from jtc.evaluation.early_exit import ExitRule, layer_arrays, run_with_early_exit, sweep  # noqa: E402
from jtc.files.io import read_json, read_table  # noqa: E402
from jtc.model.adapters import adapter_of  # noqa: E402
from jtc.model.head import Head  # noqa: E402
from jtc.settings import EarlyExitSettings  # noqa: E402
from jtc.shortcuts.maps import load_map  # noqa: E402
from jtc.stages.early_exit import early_exit  # noqa: E402

RESULTS = Path("results")
LAMBDAS_100 = np.linspace(-0.12, 1.12, 100)


def best_time(fn, repeats: int = 7) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def ratio_line(name: str, one: float, hundred: float) -> None:
    print(
        f"{name}: 1 λ {one * 1e3:.2f} ms, 100 λ {hundred * 1e3:.2f} ms -> ratio {hundred / one:.2f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sample", type=int, default=40, help="tokens run through the model")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rule = ExitRule.of(EarlyExitSettings.defaults())
    rng = np.random.default_rng(0)
    conf, correct = rng.uniform(0, 1, (3000, 49)), rng.uniform(size=(3000, 49)) < 0.5
    pos = rng.integers(0, 60, 3000)
    ratio_line(
        "sweep, synthetic 3,000 × 49",
        best_time(lambda: sweep(conf, correct, pos, LAMBDAS_100[:1], rule)),
        best_time(lambda: sweep(conf, correct, pos, LAMBDAS_100, rule)),
    )
    scores = RESULTS / "predictions/smollm2/news/mat.parquet"
    val = RESULTS / "hidden/smollm2/news/validation"
    if not scores.exists():
        print(f"{scores} is missing: run the default workflow for the real-table measurements")
        return
    _, real_conf, real_correct = layer_arrays(read_table(scores))
    real_pos = read_table(val / "positions.parquet").column("position").to_numpy()
    ratio_line(
        "sweep, SmolLM2 news mat 500 × 31",
        best_time(lambda: sweep(real_conf, real_correct, real_pos, LAMBDAS_100[:1], rule)),
        best_time(lambda: sweep(real_conf, real_correct, real_pos, LAMBDAS_100, rule)),
    )
    files = {m: str(RESULTS / f"predictions/smollm2/news/{m}.parquet") for m in ("id", "mat")}
    out = Path(tempfile.mkdtemp())

    def stage(lambdas):
        return lambda: early_exit(
            files,
            str(val),
            str(RESULTS / "models/smollm2"),
            str(RESULTS / "metrics/smollm2/news/parameters.parquet"),
            str(out / "s.parquet"),
            str(out / "v.parquet"),
            model="smollm2",
            corpus="news",
            # the default experiment's rule, every layer checked, no shortlist check
            settings=dataclasses.asdict(
                EarlyExitSettings.defaults(lambdas=list(lambdas), check_every=[1], shortlist_rank=0)
            ),
            seed=0,
        )

    one, hundred = best_time(stage(LAMBDAS_100[:1]), 3), best_time(stage(LAMBDAS_100), 3)
    ratio_line("whole early_exit stage (2 methods, read + sweep + write)", one, hundred)

    # re-running the model per λ: the plain implementation on a sample of tokens
    model, tokenizer, info = load_smollm2(str(RESULTS / "models/smollm2"))
    adapter = adapter_of(info)
    head = Head.from_model(model, adapter)
    maps = str(RESULTS / "maps/smollm2/news/mat.safetensors")
    vinfo = read_json(val / "info.json")
    corpus = read_table(RESULTS / "corpora/news.parquet")
    ids = read_table(val / "positions.parquet").column("sentence_id").to_numpy()[: args.sample]
    text = dict(
        zip(
            corpus.column("sentence_id").to_pylist(),
            corpus.column("text").to_pylist(),
            strict=True,
        )
    )
    prepared = prepare_inputs(
        tokenizer,
        [text[int(i)] for i in ids],
        ids,
        "causal",
        vinfo["seed"],
        vinfo["max_tokens"],
        None,
    )
    threshold = rule.thresholds(np.array([0.5]), real_pos, float(np.mean(real_pos + 1)))[0]

    weights = {s: load_map(maps, s, 30).affine()[0] for s in range(30)}  # in memory

    def to_last(layer, state):
        return (state @ weights[layer].T).astype(np.float32)

    start = time.perf_counter()
    for i, (inp, p) in enumerate(zip(prepared.inputs, prepared.positions, strict=True)):
        run_with_early_exit(model, adapter, head, to_last, inp, int(p), float(threshold[i]))
    per_token = (time.perf_counter() - start) / len(prepared.inputs)
    rerun = per_token * len(real_pos) * 100
    print(
        f"re-running the model per λ (λ = 0.5, mat, maps in memory): {per_token * 1e3:.1f} ms a "
        f"token -> {rerun:.0f} s for 100 λ × {len(real_pos)} tokens"
    )
    decode_log = Path("benchmarks/decode_predictions/smollm2/news/mat.tsv")
    if decode_log.exists():
        decode_s = float(decode_log.read_text().splitlines()[-1].split("\t")[0])
        total = decode_s + hundred
        print(
            f"jtc: confidences once (decode_predictions job, {decode_s:.1f} s) + 100-λ sweep "
            f"({hundred:.3f} s) = {total:.1f} s -> {rerun / total:.0f}× faster"
        )


if __name__ == "__main__":
    main()
