"""Study behind docs/performance.md, "Token positions per training sentence" (the tuned-lens
package's recipe; numbers of commit 930b5e6), and docs/findings.md, "Three sizes" (its Qwen2.5
0.5B table; commit 8d82e58).

The tuned-lens package's own lens and training recipe as a baseline for jtc's tuned lens.

Trains the `TunedLens` of the tuned-lens package 0.2.0 (Belrose et al. 2023; a reference, not a
project dependency: `.venv/bin/pip install --no-deps tuned-lens==0.2.0`) on SmolLM2 with the
package's own train loop's recipe, then scores it and any of jtc's map files on jtc's validation
positions with jtc's own scoring code, and prints Precision@1 (against the final model's top-1),
Surprisal and KL(final ‖ lens) per layer, each with its 95% bootstrap interval, and the paired
P@1 difference of the package lens against each map file.

The package's recipe (tuned_lens/scripts/train_loop.py and ingredients.py of 0.2.0), kept here:

- the lens: `tuned_lens.TunedLens.from_model(model)`, the package's own module, used as is: a
  `Linear(d, d)` translator per layer created at zero (weight and bias), h ↦ h + W h + b,
  decoded by its `Unembed` (a copy of the model's final norm and lm_head, frozen);
- the loss: KL from the final-layer distribution to the lens's over every token of a step,
  `sum(p_final * (log p_final - log_softmax(lens(h))), -1).mean()` with the labels
  `final_logits.float().log_softmax(-1)` (token shift 0), every layer's loss backpropagated in
  turn into one lens;
- the optimizer: SGD with Nesterov momentum 0.9, lr = lr_scale·(1 − 0.9) = 0.1, weight decay
  1e-3; no warmup (SGD) and a linear decay to 0 over the steps (get_linear_schedule_with_warmup);
  the gradient norm of the whole lens clipped to 1.0 before each step; data shuffled with seed 42;
- 250 steps.

What differs, for a 2-core CPU (the package's budget, 250 steps × 2^18 tokens, is 65M tokens;
the default experiment's 2,000 training sentences hold 58,809 tokens):

- tokens per step: what the data has, spread over the 250 steps (ceil(epochs × tokens / 250):
  236 for all tokens of the 2,000 sentences, one epoch), instead of 2^18; `--steps`,
  `--epochs` change the budget. Steps take whole shuffled sentences' tokens in turn (the
  package's steps take shuffled 2,048-token chunks of concatenated documents);
- the text: jtc's own news sentences, tokenised as jtc's extraction does (add_special_tokens,
  truncation at the run's max_tokens, every non-special position; a sentence per sequence)
  instead of 2,048-token chunks of the Pile;
- float32 throughout: the package runs the lens under bfloat16 autocast (for GPU memory), which
  on this CPU is slower (`--bf16` restores it);
- only the translators of `--layers` (jtc's numbering: h_l is block l's output, h_0 the
  embeddings; hidden_states[l] of transformers) are trained, so the gradient clipping is over
  those translators; the package trains all of them together (`--layers 0-29` does too, at 6×
  the cost);
- the model's states are computed once before training (the package runs the model every step):
  the same numbers, since the model is frozen.

With `--positions one` the lens is trained on jtc's own training states instead (one drawn
position per sentence, the run's hidden/.../train folder), with the same recipe; `--sentences N`
takes the first N training sentences.

The package lens's translator is h + W h + b, so it is exported as a jtc map (weight I + W,
bias b; checked against the package's own forward) and scored by the path jtc's maps take
(jtc.shortcuts.maps → jtc.model.scoring.score → jtc.evaluation.prediction), on the run's
validation states. `--jtc-maps` takes any number of jtc map files ([LABEL=]PATH, repeatable),
e.g. tuned lenses trained on 1, 8 and all positions, and `--save-map` writes the package lens as
a jtc map file. Needs a finished run of the default experiment (`--results`).

    .venv/bin/python studies/lens_baseline.py --results /path/to/run/results \\
        [--sentences 1000] [--positions all|one] [--layers 5 10 15 20 25] \\
        [--jtc-maps tuned_lens=/path/to/tuned_lens.safetensors ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from jtc.data.extract import prepare_inputs
from jtc.data.states import read_aligned, read_positions
from jtc.evaluation.prediction import bootstrap_means, metric_values, prediction_summary
from jtc.files.io import read_json, read_table
from jtc.model.head import load_decoder_head
from jtc.model.scoring import final_reference, score, score_table
from jtc.paths import CORPUS, HIDDEN, MAP, MODEL, under
from jtc.settings import IntervalSettings
from jtc.shortcuts.maps import ShortcutMap, save_maps, to_last_layer

PACKAGE = "tuned_lens_pkg"  # the package lens's name in the table
METRICS = ("precision@1", "surprisal", "kl")
# the package's defaults (tuned_lens 0.2.0, scripts/train_loop.py Train, ingredients.Optimizer)
STEPS = 250
LR_SCALE = 1.0
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-3
CLIP = 1.0
SEED = 42


def teach_final_norm(model) -> None:
    """The package (0.2.0) finds the final norm of the model types it lists (Llama among them)
    and no other; models laid out as Llama's (Qwen2: base_model.norm) are taught to it here."""
    from tuned_lens import model_surgery

    try:
        model_surgery.get_final_norm(model)
        return
    except NotImplementedError:
        original = model_surgery.get_final_norm

    def final_norm(m):
        try:
            return original(m)
        except NotImplementedError:
            return m.base_model.norm

    model_surgery.get_final_norm = final_norm


def layer_list(values: list[str]) -> list[int]:
    """5 10 15, 5,10,15 or 0-29."""
    layers: list[int] = []
    for value in values:
        for part in value.split(","):
            first, _, last = part.partition("-")
            layers.extend(range(int(first), int(last or first) + 1))
    return sorted(set(layers))


def map_files(values: list[str]) -> dict[str, Path]:
    """{label: path} of [LABEL=]PATH arguments; the label defaults to the file's stem (with its
    folder where two stems are the same)."""
    pairs = [v.split("=", 1) if "=" in v else [None, v] for v in values]
    stems = [Path(p).stem for _, p in pairs]
    files = {}
    for (label, path), stem in zip(pairs, stems, strict=True):
        if label is None:
            label = stem if stems.count(stem) == 1 else f"{Path(path).parent.name}/{stem}"
        if label in files or label == PACKAGE:
            raise SystemExit(f"two map files named {label!r}: give them LABEL=PATH")
        files[label] = Path(path)
    return files


def tokenise(
    tokenizer, texts: list[str], ids: np.ndarray, max_tokens: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Token ids of each sentence and its non-special positions, from jtc's own extraction
    (jtc.data.extract.prepare_inputs with every position: a causal sentence is cut after its
    last ordinary token)."""
    prepared = prepare_inputs(tokenizer, texts, ids, "causal", 0, max_tokens, None, "all")
    first = np.searchsorted(prepared.input_of, np.arange(len(prepared.inputs)))
    return prepared.inputs, np.split(prepared.positions.astype(np.int64), first[1:])


@torch.inference_mode()
def token_states(model, ids: list[np.ndarray], ordinary: list, layers: list[int], batch: int):
    """States h_l (jtc's numbering; transformers' hidden_states[l] for l < L) at every ordinary
    position of every sentence, and the last layer's h_L before the final norm (the final norm's
    input: transformers' last hidden state is after it): float32 tensors with one row per
    token, sentence after sentence; and each sentence's first row. Batches of sentences of
    similar length, padded on the right (a causal model's states do not see the padding)."""
    captured: list[torch.Tensor] = []
    hook = model.model.norm.register_forward_pre_hook(lambda _, args: captured.append(args[0]))
    sites = [*layers, "final"]
    found: dict = {site: [None] * len(ids) for site in sites}
    order = np.argsort([len(x) for x in ids], kind="stable")
    try:
        for start in range(0, len(ids), batch):
            rows = order[start : start + batch]
            tokens = torch.zeros((len(rows), max(len(ids[r]) for r in rows)), dtype=torch.long)
            mask = torch.zeros_like(tokens)
            for j, r in enumerate(rows):
                tokens[j, : len(ids[r])] = torch.from_numpy(ids[r])
                mask[j, : len(ids[r])] = 1
            captured.clear()
            out = model.model(input_ids=tokens, attention_mask=mask, output_hidden_states=True)
            if len(out.hidden_states) != model.config.num_hidden_layers + 1 or len(captured) != 1:
                raise RuntimeError("unexpected hidden states from transformers")
            for site in sites:
                source = captured[0] if site == "final" else out.hidden_states[site]
                for j, r in enumerate(rows):
                    found[site][r] = source[j, torch.from_numpy(ordinary[r])].float().clone()
    finally:
        hook.remove()
    states = {site: torch.cat(found[site]) for site in sites}
    counts = np.array([len(o) for o in ordinary])
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    final = states.pop("final")
    return states, final, first


def first_rows(train_dir, positions: pa.Table, layer: int, n: int) -> np.ndarray:
    """The first n rows of a layer's stored training states (float32)."""
    ids = positions.column("sentence_id").to_numpy()
    return np.array(read_aligned(train_dir, layer, ids, np.float32)[:n])  # writable


def check_against_jtc(states, final, first, positions, train_dir, rows, layers, last) -> float:
    """Largest difference, relative to the states' scale, between these states at jtc's drawn
    positions and jtc's stored training states (the same layer numbering and tokens)."""
    drawn = first + positions.column("position").to_numpy()[rows]  # no special tokens first
    worst = 0.0
    for layer in [*layers, last]:
        ours = (final if layer == last else states[layer])[drawn].numpy()
        stored = first_rows(train_dir, positions, layer, len(rows))
        worst = max(worst, float(np.abs(ours - stored).max() / np.abs(stored).max()))
    return worst


def train_package_lens(lens, states, final, sentence_rows, args) -> dict:
    """The package's train loop (scripts/train_loop.py Train.execute) on stored states: per step,
    each layer's KL(final ‖ lens) over the step's tokens backpropagated in turn, the lens's
    gradient clipped to norm 1, an SGD step and a scheduler step."""
    from transformers import get_linear_schedule_with_warmup

    layers = sorted(states)
    params = [p for p in lens.parameters() if p.requires_grad]
    momentum = MOMENTUM
    # ingredients.Optimizer.create_optim (SGD) and create_scheduler (no warmup for SGD)
    opt = torch.optim.SGD(
        params,
        lr=LR_SCALE * (1 - momentum),
        momentum=momentum,
        nesterov=True,
        weight_decay=WEIGHT_DECAY,
    )
    scheduler = get_linear_schedule_with_warmup(opt, 0, args.steps)
    # whole sentences' tokens in a seeded shuffled order, one epoch after the other
    generator = np.random.default_rng(SEED)
    order = np.concatenate(
        [
            np.concatenate([sentence_rows[s] for s in generator.permutation(len(sentence_rows))])
            for _ in range(args.epochs)
        ]
    )
    per_step = math.ceil(len(order) / args.steps)
    seconds = dict.fromkeys(layers, 0.0)
    label_seconds = 0.0
    losses = {layer: [] for layer in layers}
    log_every = max(1, args.steps // 10)
    lens.train()
    start = time.perf_counter()
    for step in range(args.steps):
        rows = torch.from_numpy(order[step * per_step : (step + 1) * per_step])
        if len(rows) == 0:
            break
        tick = time.perf_counter()
        with torch.no_grad():
            # final_logits.float().log_softmax(dim=-1): the model's own logits, D(h_L)
            labels = lens.unembed(final[rows]).float().log_softmax(dim=-1)
            probs = labels.exp()  # the package's labels.exp(), once for every layer
        label_seconds += time.perf_counter() - tick
        for layer in layers:
            tick = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                logits = lens(states[layer][rows], idx=layer)
                loss = torch.sum(probs * (labels - logits.log_softmax(-1)), dim=-1).mean()
            loss.backward()  # one batch a step: grad_acc_steps 1
            losses[layer].append(loss.item())
            seconds[layer] += time.perf_counter() - tick
        torch.nn.utils.clip_grad_norm_(lens.parameters(), CLIP)
        opt.step()
        opt.zero_grad(set_to_none=False)
        scheduler.step()
        if (step + 1) % log_every == 0 or step + 1 == args.steps:
            recent = "  ".join(
                f"{layer}: {np.mean(losses[layer][-log_every:]):.3f}" for layer in layers
            )
            elapsed = time.perf_counter() - start
            print(f"  step {step + 1}/{args.steps} ({elapsed:.0f} s)  KL by layer  {recent}")
    lens.eval()
    return {
        "steps": args.steps,
        "tokens_per_step": per_step,
        "tokens": len(order),
        "seconds": time.perf_counter() - start,
        "seconds_per_layer": seconds,
        "label_seconds": label_seconds,
        "first_loss": {layer: losses[layer][0] for layer in layers},
        "last_loss": {layer: float(np.mean(losses[layer][-log_every:])) for layer in layers},
    }


def exported(lens, layer: int) -> dict[str, np.ndarray]:
    """The package lens's translator at `layer` as a jtc map: weight I + W, bias b."""
    translator = lens[layer]
    weight = translator.weight.detach().double().numpy()
    return {
        "weight": (weight + np.eye(len(weight))).astype(np.float32),
        "bias": translator.bias.detach().float().numpy(),
    }


@torch.inference_mode()
def export_error(lens, head, maps, states: dict[int, np.ndarray]) -> float:
    """Largest difference between the package lens's own logits and jtc's head on the exported
    map's prediction, on a few validation rows, relative to the logits' scale."""
    worst = 0.0
    for layer, shortcut in maps.items():
        h = torch.tensor(states[layer][:16], dtype=torch.float32)
        own = lens(h, idx=layer)
        ours = head.logits(torch.tensor(shortcut(states[layer][:16]), dtype=torch.float32))
        worst = max(worst, float((own - ours).abs().max() / own.abs().max()))
    return worst


def score_methods(args, head, lens_maps, jtc_maps, layers) -> tuple[dict, float]:
    """Per-position scores of every method at every layer on the validation states, as
    jtc.stages.prediction.decode_predictions scores them; and the export check."""
    val_dir = under(args.results, HIDDEN, model=args.model, corpus=args.corpus, split="validation")
    positions, info = read_positions(val_dir)
    last = info["num_layers"]
    ids = positions.column("sentence_id").to_numpy()
    gold = positions.column("gold_id").to_numpy()
    reference = final_reference(head, read_aligned(val_dir, last, ids, np.float32), 1)
    tables: dict[str, list[pa.Table]] = {m: [] for m in [PACKAGE, *jtc_maps]}
    val_states = {}
    for layer in layers:
        states = read_aligned(val_dir, layer, ids, np.float32)
        val_states[layer] = states
        for method in tables:
            if method == PACKAGE:
                mapped = lens_maps[layer](states)
            else:
                mapped = to_last_layer(jtc_maps[method], layer, states, last)
            scores = score(head, reference, mapped.astype(np.float32, copy=False), gold)
            tables[method].append(score_table(method, layer, ids, scores))
    return {m: pa.concat_tables(t) for m, t in tables.items()}, val_states


def summarise(tables: dict[str, pa.Table], args) -> dict:
    """Mean and 95% interval of each metric by method and layer (jtc's prediction summary), and
    the paired bootstrap interval of the package lens's P@1 less each map file's."""
    settings = IntervalSettings.defaults(top_k=[1])
    summary = prediction_summary(
        tables, model=args.model, corpus=args.corpus, settings=settings, seed=args.seed
    )
    out: dict = {}
    for row in summary.to_pylist():
        if row["metric"] in METRICS:
            cell = out.setdefault(row["method"], {}).setdefault(row["layer"], {})
            cell[row["metric"]] = [row["mean"], row["ci_low"], row["ci_high"]]
    differences = {}
    for method in tables:
        if method == PACKAGE:
            continue
        for layer in sorted(out[method]):

            def hits(name: str, layer: int = layer) -> np.ndarray:
                rows = tables[name].filter(pc.equal(tables[name].column("layer"), layer))
                return metric_values(rows, [1])["precision@1"]

            diff = (hits(PACKAGE) - hits(method))[:, None]
            mean, low, high, _ = bootstrap_means(
                diff, settings.bootstrap, args.seed, settings.confidence_level
            )
            differences.setdefault(method, {})[layer] = [mean[0], low[0], high[0]]
    return {"metrics": out, "p1_difference": differences}


def print_table(results: dict, layers: list[int]) -> None:
    metrics = results["metrics"]
    methods = list(metrics)
    width = max(len(m) for m in methods) + 2
    print(f"\n{'layer':>5}  {'method':<{width}} {'P@1 [95% CI]':>22} {'Surprisal':>10} {'KL':>8}")
    for layer in layers:
        for method in methods:
            cell = metrics[method][layer]
            p1, low, high = cell["precision@1"]
            print(
                f"{layer:>5}  {method:<{width}} {p1:>8.3f} [{low:.3f}, {high:.3f}] "
                f"{cell['surprisal'][0]:>10.3f} {cell['kl'][0]:>8.3f}"
            )
    for method, by_layer in results["p1_difference"].items():
        cells = "  ".join(
            f"{layer}: {d * 100:+.1f} [{lo * 100:+.1f}, {hi * 100:+.1f}]"
            for layer, (d, lo, hi) in by_layer.items()
        )
        print(f"\nP@1 points, {PACKAGE} − {method} (paired 95% CI): {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[1], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--results", default="results", help="a finished run's results folder")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--corpus", default="news")
    parser.add_argument("--layers", nargs="+", default=["5", "10", "15", "20", "25"])
    parser.add_argument("--sentences", type=int, default=None, help="default: all (2,000)")
    parser.add_argument("--positions", choices=["all", "one"], default="all")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--epochs", type=int, default=1, help="passes over the tokens")
    parser.add_argument("--bf16", action="store_true", help="the package's bfloat16 autocast")
    parser.add_argument(
        "--jtc-maps",
        nargs="+",
        action="extend",
        default=[],
        metavar="[LABEL=]PATH",
        help="jtc map files to score beside it (default: the run's tuned_lens map)",
    )
    parser.add_argument("--save-map", help="write the package lens as a jtc map file")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences a forward pass")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's (config seed)")
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(SEED)
    layers = layer_list(args.layers)
    default_map = under(
        args.results, MAP, model=args.model, corpus=args.corpus, method="tuned_lens"
    )
    jtc_maps = map_files(args.jtc_maps or [str(default_map)])
    try:
        from tuned_lens import TunedLens
    except ImportError:
        sys.exit("needs the tuned-lens package: .venv/bin/pip install --no-deps tuned-lens==0.2.0")
    from importlib.metadata import version

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = under(args.results, MODEL, model=args.model)
    train_dir = under(args.results, HIDDEN, model=args.model, corpus=args.corpus, split="train")
    positions, info = read_positions(train_dir)
    last = info["num_layers"]
    if max(layers) >= last:
        sys.exit(f"--layers: the lens has translators for layers 0..{last - 1}")
    n = min(args.sentences or info["sentences"], len(positions))
    rows = np.arange(n)
    print(f"tuned-lens {version('tuned-lens')}, {args.model} on {args.corpus}: {n} sentences")

    tick = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    model.requires_grad_(False)
    teach_final_norm(model)
    lens = TunedLens.from_model(model)
    prepare: dict = {"model_seconds": time.perf_counter() - tick}
    tick = time.perf_counter()
    if args.positions == "all":
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        corpus = read_table(
            under(args.results, CORPUS, corpus=args.corpus), ["sentence_id", "text"]
        )
        texts_by_id = dict(zip(*corpus.to_pydict().values(), strict=True))
        ids = positions.column("sentence_id").to_numpy()[rows]
        max_tokens = min(info["max_tokens"], read_json(model_dir / "info.json")["max_positions"])
        tokens, ordinary = tokenise(tokenizer, [texts_by_id[i] for i in ids], ids, max_tokens)
        lengths = np.array([len(t) for t in tokens])
        if not np.array_equal(lengths, positions.column("n_tokens").to_numpy()[rows]):
            sys.exit("the tokenisation differs from jtc's extraction (n_tokens)")
        if any(len(o) != len(t) for o, t in zip(ordinary, tokens, strict=True)):
            sys.exit("special tokens in the sentences: the drawn-position check assumes none")
        states, final, first = token_states(model, tokens, ordinary, layers, args.batch_size)
        prepare["check_vs_jtc_states"] = check_against_jtc(
            states, final, first, positions, train_dir, rows, layers, last
        )
        print(
            f"states of {len(final)} tokens in {time.perf_counter() - tick:.0f} s; at jtc's "
            f"drawn positions they match jtc's stored states to "
            f"{prepare['check_vs_jtc_states']:.1e} (relative)"
        )
        sentence_rows = [f + np.arange(len(o)) for f, o in zip(first, ordinary, strict=True)]
    else:
        states = {
            layer: torch.from_numpy(first_rows(train_dir, positions, layer, n)) for layer in layers
        }
        final = torch.from_numpy(first_rows(train_dir, positions, last, n))
        sentence_rows = [np.array([i]) for i in range(n)]
    prepare["states_seconds"] = time.perf_counter() - tick
    del model

    which = "every token" if args.positions == "all" else "jtc's one position per sentence"
    print(f"training the package's lens at layers {layers} on {which}")
    training = train_package_lens(lens, states, final, sentence_rows, args)
    per_layer = "  ".join(f"{k}: {v:.0f} s" for k, v in training["seconds_per_layer"].items())
    print(
        f"trained in {training['seconds']:.0f} s ({training['steps']} steps × "
        f"{training['tokens_per_step']} tokens; per layer {per_layer}; labels "
        f"{training['label_seconds']:.0f} s)"
    )
    del states, final

    lens_maps = {layer: ShortcutMap(exported(lens, layer)) for layer in layers}
    if args.save_map:
        save_maps(
            args.save_map,
            {layer: {last: dict(m.tensors)} for layer, m in lens_maps.items()},
            {"method": PACKAGE, "model": args.model, "corpus": args.corpus, "n_train": n},
        )
    head = load_decoder_head(model_dir, args.model, args.threads)
    tick = time.perf_counter()
    tables, val_states = score_methods(args, head, lens_maps, jtc_maps, layers)
    error = export_error(lens, head, lens_maps, val_states)
    results = summarise(tables, args)
    print(
        f"scored in {time.perf_counter() - tick:.0f} s; exported map vs the package's own "
        f"forward: {error:.1e} (relative)"
    )
    print_table(results, layers)
    if args.json:
        record = {
            "command": sys.argv,
            "tuned_lens_version": version("tuned-lens"),
            "model": args.model,
            "corpus": args.corpus,
            "sentences": n,
            "positions": args.positions,
            "layers": layers,
            "recipe": {
                "steps": args.steps,
                "epochs": args.epochs,
                "tokens_per_step": training["tokens_per_step"],
                "optimizer": "SGD",
                "lr": LR_SCALE * (1 - MOMENTUM),
                "momentum": MOMENTUM,
                "nesterov": True,
                "weight_decay": WEIGHT_DECAY,
                "warmup_steps": 0,
                "schedule": "linear to 0",
                "grad_clip": CLIP,
                "bf16_autocast": args.bf16,
                "seed": SEED,
            },
            "jtc_maps": {k: str(v) for k, v in jtc_maps.items()},
            "prepare": prepare,
            "training": training,
            "export_error": error,
            **results,
        }
        Path(args.json).write_text(json.dumps(record, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
