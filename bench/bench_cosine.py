"""replaceme_cosine's cost and gain on the default experiment's calibration (jtc.pruning.cosine):
SmolLM2 (a cached model folder), every token of the first `--sentences` training sentences of a
corpus table, lengths 4 and 8 (every span, start >= 1): the seconds of the extra pass that
gathers the token rows and of the Adam fits, and per setting the mean over the spans of the
cosine distance and the calibration loss, against replaceme's least-squares T.

    .venv/bin/python bench/bench_cosine.py --model-dir results/models/smollm2
        --corpus results/corpora/news.parquet [--sentences 96] [--threads 2]
        [--setting EPOCHS,LR,BATCH ...] [--every K] [--json out.json]

Without --setting it measures the schema's defaults (pruning.cosine); --spans N fits only the
--every K fits every K-th span only (a quick comparison of settings; the time scales with it).
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
from jtc.pruning.calibrate import CALIBRATION_KEY
from jtc.pruning.cosine import VARIANT, cosine_rows, fit_cosine_span, span_losses
from jtc.pruning.inputs import every_token
from jtc.pruning.pruned import pruned_copy
from jtc.pruning.spans import StatisticsPlan, resolved_lengths, spans
from jtc.pruning.sums import span_statistics
from jtc.settings import CosineSettings
from jtc.shortcuts.maps import ShortcutMap


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


def pruned_scores(net, adapter, inputs, grams, rows, span, setting) -> dict:
    """The full model's and the span's pruned models' cross-entropy on `inputs`: least-squares
    T (replaceme) against the cosine fit's (replaceme_cosine)."""
    start, length = span
    fit, least = fit_cosine_span(grams, rows, start, length, setting)
    scores = {"start": start, "length": length, "sentences": len(inputs)}
    for name, found in (("replaceme", least), (VARIANT, fit)):
        pruned = pruned_copy(net, adapter, name, start, length, ShortcutMap(found.tensors))
        scores[name] = cross_entropy(pruned, inputs)
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    args = parser.parse_args()
    torch.manual_seed(0)
    net, tokenizer, info = load_model(args.model_dir, args.threads)
    adapter = adapter_of(info)
    num_layers = info["num_layers"]
    table = read_table(args.corpus)
    inputs, _ = every_token(
        tokenizer, info, table, "train", args.sentences, "bench", args.max_tokens, CALIBRATION_KEY
    )
    lengths = resolved_lengths([], num_layers)
    todo = spans(num_layers, lengths, VARIANT)
    if args.starts:
        first, last = (int(v) for v in args.starts.split("-"))
        todo = [(i, n) for i, n in todo if first <= i <= last]
    todo = todo[:: args.every]
    pad = pad_token_id(tokenizer)
    plan = StatisticsPlan.of(num_layers, lengths, [VARIANT])
    grams = span_statistics(net, adapter, inputs, plan, args.batch_size, pad)
    started, cpu = time.perf_counter(), time.process_time()
    rows = cosine_rows(net, adapter, inputs, todo, args.batch_size, pad)
    rows_seconds, rows_cpu = time.perf_counter() - started, time.process_time() - cpu
    held = None
    if args.holdout:
        held_inputs, _ = every_token(
            tokenizer, info, table, "validation", args.holdout, "bench", args.max_tokens
        )
        held = cosine_rows(net, adapter, held_inputs, todo, args.batch_size, pad)
    settings = [CosineSettings.defaults()] + [
        CosineSettings(int(e), float(lr), int(b))
        for e, lr, b in (s.split(",") for s in args.setting)
    ]
    if args.setting:
        settings = settings[1:]
    report = {
        "tokens": grams.tokens,
        "spans": len(todo),
        "rows_gb": rows.nbytes() / 1e9,
        "rows_seconds": rows_seconds,
        "rows_cpu_seconds": rows_cpu,
        "threads": args.threads,
        "settings": [],
    }
    for setting in settings:
        started, cpu = time.perf_counter(), time.process_time()
        fitted = [fit_cosine_span(grams, rows, i, n, setting) for i, n in todo]
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        cos = np.array([[f.cosine_distance, ls.cosine_distance] for f, ls in fitted])
        loss = np.array([[f.loss, ls.loss] for f, ls in fitted])
        best = int(np.argmin(loss[:, 1]))
        if held is not None:
            scored = [
                [
                    span_losses(
                        *held.span(f.start, f.length), torch.from_numpy(f.tensors["weight"].T)
                    )
                    for f in pair
                ]
                for pair in fitted
            ]
            held_out = np.array([[a[1], b[1], a[0], b[0]] for a, b in scored])
        row = {
            "setting": dataclasses.asdict(setting),
            "fit_seconds": seconds,
            "fit_cpu_seconds": cpu,
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
        first = settings[0]
        scored = held_inputs[: args.score_sentences]
        report["scores"] = [
            {"full": cross_entropy(net, scored)}
            | pruned_scores(net, adapter, scored, grams, rows, span, first)
            for span in (tuple(int(v) for v in s.split(",")) for s in args.score)
        ]
        for row in report["scores"]:
            print(json.dumps(row), flush=True)
    print(json.dumps({k: v for k, v in report.items() if k not in ("settings", "scores")}))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2, default=float)


if __name__ == "__main__":
    main()
