"""Study behind docs/performance.md, "replaceme_cosine's cost and gain" (numbers of commits bd33a82
and 39a743e).

replaceme_cosine's cost and gain on the default experiment's calibration (jtc.pruning.cosine):
SmolLM2 (a cached model folder), every token of the first `--sentences` training sentences of a
corpus table, lengths 4 and 8 (every span, start >= 1). Per setting: the CPU-seconds that
replaceme_cosine adds to the calibration (jtc.pruning.calibrate.calibrate_spans with replaceme and
replaceme_cosine against replaceme alone), and the mean over the spans of the cosine distance and
the calibration loss against replaceme's least-squares T (its start), on the calibration tokens
and (`--holdout N`) on the first N validation sentences. Also the seconds of one pass that keeps
the token rows the fits need.

    .venv/bin/python studies/replaceme_cosine.py --model-dir results/models/smollm2
        --corpus results/corpora/news.parquet [--sentences 96] [--threads 2]
        [--setting EPOCHS,LR,BATCH ...] [--every K] [--starts 10-20] [--holdout N]
        [--score START,LENGTH ...] [--json out.json]

Without --setting it measures the schema's defaults (pruning.cosine); --every K fits every K-th
span only (a quick comparison of settings; the time scales with it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np
import torch

from jtc.data.extract import pad_token_id
from jtc.files.io import read_table
from jtc.model.adapters import adapter_of
from jtc.model.cache import load_model
from jtc.pruning.calibrate import calibrate_spans
from jtc.pruning.cosine import cosine_rows, span_losses
from jtc.pruning.inputs import every_token
from jtc.pruning.pruned import pruned_copy
from jtc.pruning.spans import resolved_lengths, spans
from jtc.settings import CalibrationSettings, CosineSettings
from jtc.shortcuts.maps import ShortcutMap

COSINE = "replaceme_cosine"


def cross_entropy(model, inputs: list[np.ndarray]) -> float:
    """Mean next-token cross-entropy (nats) over every position with a next token."""
    total, count = 0.0, 0
    with torch.inference_mode():
        for ids in inputs:
            logits = model(input_ids=torch.as_tensor(ids)[None]).logits[0, :-1].float()
            target = torch.as_tensor(ids[1:])
            total += float(torch.nn.functional.cross_entropy(logits, target, reduction="sum"))
            count += len(target)
    return total / count


def losses(rows, fit) -> tuple[float, float]:
    """(calibration loss, cosine distance) of a fit's T on the token rows of its span."""
    return span_losses(*rows.span(fit.start, fit.length), torch.from_numpy(fit.tensors["weight"].T))


def cosine_only(fits):
    return [f for f in fits if f.variant == COSINE]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--corpus", required=True, help="a corpus table (corpora/NAME.parquet)")
    parser.add_argument("--sentences", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--setting", action="append", default=[], help="EPOCHS,LR,BATCH")
    parser.add_argument("--every", type=int, default=1, help="every K-th span only")
    parser.add_argument("--starts", help="only these starts, e.g. 10-20")
    parser.add_argument(
        "--holdout", type=int, default=0, help="also score on the first N validation sentences"
    )
    parser.add_argument(
        "--score",
        action="append",
        default=[],
        help="START,LENGTH: also the pruned model's next-token cross-entropy on the --holdout "
        "sentences with the least-squares and the cosine T (the first setting's)",
    )
    parser.add_argument(
        "--score-sentences", type=int, default=32, help="of the --holdout sentences, scored"
    )
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    net, tokenizer, info = load_model(args.model_dir, args.threads)
    adapter, pad = adapter_of(info), pad_token_id(tokenizer)
    num_layers = info["num_layers"]
    table = read_table(args.corpus)
    todo = spans(num_layers, resolved_lengths([], num_layers), COSINE)
    if args.starts:
        first, last = (int(v) for v in args.starts.split("-"))
        todo = [(i, n) for i, n in todo if first <= i <= last]
    todo = todo[:: args.every]
    run = {"corpus": "study", "batch_size": args.batch_size, "max_tokens": args.max_tokens}
    base = CalibrationSettings.defaults(
        variants=["replaceme"],
        calibration={"text": "sentences"},
        calibration_sentences=args.sentences,
    )
    cpu = time.process_time()
    least, tokens = calibrate_spans(net, tokenizer, info, table, base, todo, **run)
    least_cpu = time.process_time() - cpu

    def rows_of(split: str, count: int):
        inputs, _ = every_token(tokenizer, info, table, split, count, "study", args.max_tokens)
        return inputs, cosine_rows(net, adapter, inputs, todo, args.batch_size, pad)

    started, cpu = time.perf_counter(), time.process_time()
    _, rows = rows_of("train", args.sentences)  # what the fits see
    rows_seconds, rows_cpu = time.perf_counter() - started, time.process_time() - cpu
    held_inputs, held = rows_of("validation", args.holdout) if args.holdout else ([], None)
    settings = [
        CosineSettings(int(e), float(lr), int(b))
        for e, lr, b in (s.split(",") for s in args.setting)
    ] or [CosineSettings.defaults()]
    report = {
        "tokens": tokens,
        "spans": len(todo),
        "rows_gb": rows.nbytes() / 1e9,
        "rows_seconds": rows_seconds,
        "rows_cpu_seconds": rows_cpu,
        "least_squares_calibration_cpu_seconds": least_cpu,
        "threads": args.threads,
        "settings": [],
    }

    def with_cosine(setting: CosineSettings) -> CalibrationSettings:
        return dataclasses.replace(base, variants=("replaceme", COSINE), cosine=setting)

    for setting in settings:
        started, cpu = time.perf_counter(), time.process_time()
        fits, _ = calibrate_spans(net, tokenizer, info, table, with_cosine(setting), todo, **run)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        fitted = [(f, losses(rows, ls)) for f, ls in zip(cosine_only(fits), least, strict=True)]
        cos = np.array([[f.cosine_distance, ls[1]] for f, ls in fitted])
        loss = np.array([[f.loss, ls[0]] for f, ls in fitted])
        best = int(np.argmin(loss[:, 1]))
        row = {
            "setting": dataclasses.asdict(setting),
            "calibration_seconds": seconds,
            "added_cpu_seconds": cpu - least_cpu,
            "cosine_distance": cos[:, 0].mean(),
            "cosine_distance_least_squares": cos[:, 1].mean(),
            "calibration_loss": loss[:, 0].mean(),
            "calibration_loss_least_squares": loss[:, 1].mean(),
            "spans_with_lower_cosine": int((cos[:, 0] < cos[:, 1]).sum()),
            "best_least_squares_span": {
                "start": todo[best][0],
                "length": todo[best][1],
                "cosine_distance": cos[best].tolist(),
                "calibration_loss": loss[best].tolist(),
            },
        }
        if held is not None:
            scored = [
                [losses(held, f), losses(held, ls)]
                for f, ls in zip(cosine_only(fits), least, strict=True)
            ]
            held_out = np.array([[a[1], b[1], a[0], b[0]] for a, b in scored])
            row["holdout"] = {
                "tokens": held.tokens,
                "cosine_distance": held_out[:, 0].mean(),
                "cosine_distance_least_squares": held_out[:, 1].mean(),
                "calibration_loss": held_out[:, 2].mean(),
                "calibration_loss_least_squares": held_out[:, 3].mean(),
                "spans_with_lower_cosine": int((held_out[:, 0] < held_out[:, 1]).sum()),
                "best_least_squares_span": held_out[best].tolist(),
            }
        report["settings"].append(row)
        print(json.dumps(row, default=float), flush=True)
    if args.score and held is not None:
        chosen = [tuple(int(v) for v in s.split(",")) for s in args.score]
        fits, _ = calibrate_spans(
            net, tokenizer, info, table, with_cosine(settings[0]), chosen, **run
        )
        scored_inputs = held_inputs[: args.score_sentences]
        full = cross_entropy(net, scored_inputs)
        report["scores"] = [
            {"full": full, "start": i, "length": n, "sentences": len(scored_inputs)}
            | {
                f.variant: cross_entropy(
                    pruned_copy(net, adapter, f.variant, i, n, ShortcutMap(f.tensors)),
                    scored_inputs,
                )
                for f in fits
                if (f.start, f.length) == (i, n)
            }
            for i, n in chosen
        ]
        for row in report["scores"]:
            print(json.dumps(row), flush=True)
    print(json.dumps({k: v for k, v in report.items() if k not in ("settings", "scores")}))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2, default=float)


if __name__ == "__main__":
    main()
