"""Fits on 1, k or all token positions per training sentence (config positions_per_sentence):
held-out quality and cost, on a finished run of the default experiment.

For each count of positions it extracts the training states of the run's training sentences
again with that count (jtc.data.extract.extract, into --workdir; kept and reused by a later
call), then fits

- mat (jtc.shortcuts.closed_form.fit_source) from each --mat-layers layer into the last, and
- the tuned lens (jtc.shortcuts.lens.train_tuned_lens, with the settings and seed recorded in
  the run's own tuned_lens map file) from each --lens-layers layer,

and scores both on the run's validation states (one position per sentence, as the workflow
scores them) with the workflow's own code: r² into the last layer (jtc.shortcuts.quality),
Precision@1 against the final model's top token, and KL(final || shortcut) in nats
(jtc.model.scoring.score). It prints a table per method and the cost of each count:
training rows, extraction seconds and stored bytes, seconds per fit. With --maps DIR the tuned
lenses are also written as map files (DIR/tuned_lens-<count>.safetensors, the workflow's
format) for other scorers (bench/bench_lens_baseline.py --jtc-maps).

Run: python bench/bench_positions.py --run DIR [--model smollm2 --corpus news]
         [--positions 1,8,all] [--mat-layers 5,15,25] [--lens-layers 5,10,15,20,25]
         [--workdir DIR] [--maps DIR] [--lens-epochs N] [--threads 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import peak_matmul_gflops  # noqa: E402

from jtc import paths  # noqa: E402
from jtc.data.corpus import select_split  # noqa: E402
from jtc.data.extract import extract  # noqa: E402
from jtc.data.states import read_aligned, read_positions, read_states  # noqa: E402
from jtc.files.io import read_json, read_table  # noqa: E402
from jtc.model.cache import load_cached  # noqa: E402
from jtc.model.head import load_decoder_head  # noqa: E402
from jtc.model.scoring import final_reference, score  # noqa: E402
from jtc.settings import TrainSettings  # noqa: E402
from jtc.shortcuts.closed_form import fit_source  # noqa: E402
from jtc.shortcuts.lens import lens_reference, train_tuned_lens  # noqa: E402
from jtc.shortcuts.maps import MapWriter, read_metadata  # noqa: E402
from jtc.shortcuts.quality import r2_score  # noqa: E402
from jtc.shortcuts.train import pair_seed  # noqa: E402


def count_of(text: str) -> int | str:
    return text if text == "all" else int(text)


def training_states(run: Path, model, tokenizer, info, args, count) -> tuple[Path, dict]:
    """The training states with `count` positions per sentence (extracted once, then reused)
    and what the extraction cost."""
    workflow_train = Path(paths.fill(paths.HIDDEN, split="train", model=args.model,
                                     corpus=args.corpus))  # fmt: skip
    split = read_json(run / workflow_train / "info.json")
    out = args.workdir / f"positions-{count}"
    if (out / "info.json").exists():
        return out, read_json(out / "cost.json")
    table = read_table(run / paths.CORPUS.format(corpus=args.corpus))
    sentences = select_split(table, "train", split["sentences"], args.corpus)
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    summary = extract(
        model, tokenizer, info, sentences, tmp, seed=split["seed"], batch_size=32,
        max_tokens=split["max_tokens"], dtype="float32", positions=count,
    )  # fmt: skip
    cost = {
        "rows": summary["rows"],
        "sentences": summary["sentences"],
        "tokens_run": summary["tokens_run"],
        "extract_s": round(time.perf_counter() - start, 1),
        "stored_mb": round(sum(f.stat().st_size for f in tmp.glob("*.parquet")) / 1e6, 1),
    }
    (tmp / "cost.json").write_text(json.dumps(cost))
    tmp.rename(out)
    return out, cost


def scores(head, reference, gold, final, predicted) -> dict[str, float]:
    """r², Precision@1 and mean KL of states mapped to the last layer."""
    s = score(head, reference, predicted.astype(np.float32), gold)
    return {
        "r2": round(float(r2_score(final, predicted)), 4),
        "p_at_1": round(float(np.mean(s["final_rank"] == 1)), 4),
        "kl": round(float(np.nanmean(s["kl"])), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished run's folder")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--corpus", default="news")
    parser.add_argument("--positions", default="1,8,all")
    parser.add_argument("--mat-layers", default="5,15,25")
    parser.add_argument("--lens-layers", default="5,10,15,20,25")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_positions"))
    parser.add_argument("--maps", type=Path, help="write the tuned lenses here as map files")
    parser.add_argument("--lens-epochs", type=int, help="the tuned lens's max_epochs instead")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    run = args.run.resolve()
    where = {"model": args.model, "corpus": args.corpus}
    model_dir = run / paths.MODEL.format(model=args.model)
    model, tokenizer, info = load_cached(model_dir)
    head = load_decoder_head(str(model_dir), args.model, args.threads, model)
    lens_meta = read_metadata(run / paths.MAP.format(method="tuned_lens", **where))
    lens_settings = TrainSettings.of(lens_meta["settings"])  # type: ignore[arg-type]
    if args.lens_epochs:
        lens_settings = dataclasses.replace(lens_settings, max_epochs=args.lens_epochs)
    seed = int(lens_meta["seed"])  # type: ignore[call-overload]

    val_dir = run / paths.fill(paths.HIDDEN, split="validation", **where)
    positions, val_info = read_positions(val_dir)
    last = val_info["num_layers"]
    val_ids = positions.column("sentence_id").to_numpy()
    gold = positions.column("gold_id").to_numpy()
    final = read_aligned(val_dir, last, val_ids, np.float32)
    reference = final_reference(head, final, 1)
    mat_layers = [int(x) for x in args.mat_layers.split(",") if x]
    lens_layers = [int(x) for x in args.lens_layers.split(",") if x]

    report = {"peak_gflops": round(peak_matmul_gflops(args.threads)), "counts": {}}
    print(f"fp32 matmul peak, {args.threads} threads: {report['peak_gflops']} GFLOP/s")
    for count in [count_of(x) for x in args.positions.split(",")]:
        folder, cost = training_states(run, model, tokenizer, info, args, count)
        ids, x_last = read_states(folder, last)
        result = {"cost": cost, "mat": {}, "tuned_lens": {}}
        lenses = {}  # layer -> the tuned lens's tensors
        for layer in sorted(set(mat_layers) | set(lens_layers)):
            x = read_aligned(folder, layer, ids)
            val = read_aligned(val_dir, layer, val_ids, np.float32)
            if layer in mat_layers:
                start = time.perf_counter()
                fitted, _ = fit_source(x, [(last, x_last)])
                weight = fitted[last]  # (d_out, d_in)
                seconds = time.perf_counter() - start
                row = scores(head, reference, gold, final, val @ weight.T.astype(np.float32))
                result["mat"][layer] = {**row, "fit_s": round(seconds, 2)}
            if layer in lens_layers:
                trained = train_tuned_lens(
                    x, head, x_last, settings=lens_settings,
                    seed=pair_seed(seed, "tuned_lens", layer, last),
                    reference=lens_reference(head, x_last), groups=ids,
                )  # fmt: skip
                t = trained.tensors
                predicted = val @ t["weight"].T + t["bias"]
                row = scores(head, reference, gold, final, predicted)
                result["tuned_lens"][layer] = {**row, "fit_s": round(trained.seconds, 1)}
                lenses[layer] = t
        if args.maps:
            args.maps.mkdir(parents=True, exist_ok=True)
            meta = {
                "method": "tuned_lens",
                "n_train": cost["sentences"],
                "training_rows": cost["rows"],
                "positions_per_sentence": str(count),
            }
            with MapWriter(args.maps / f"tuned_lens-{count}.safetensors", meta) as maps:
                for layer, tensors in lenses.items():
                    maps.add(layer, {last: tensors})
        report["counts"][str(count)] = result
        print(f"\npositions per sentence: {count}  {json.dumps(cost)}")
        for method in ("mat", "tuned_lens"):
            for layer, row in result[method].items():
                print(f"  {method:10s} layer {layer:2d}: " + "  ".join(
                    f"{k} {v}" for k, v in row.items()))  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
