"""The `jtc` command: look at what each layer predicts, share fitted maps, export pruned models.

jtc lens --model smollm2 --corpus news --text "The river flows into the" --out lens.png
jtc export --model smollm2 --corpus news --method mat --out shared/smollm2-news-mat
jtc prune --model-dir results/models/smollm2 --start 20 --length 4 --variant replaceme \
    --maps results/pruning/smollm2/news/maps.safetensors --out shared/smollm2-replaceme-20-4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    from jtc import __version__

    defaults = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(
        prog="jtc", description=__doc__.splitlines()[0], formatter_class=defaults
    )
    parser.add_argument("--version", action="version", version=f"jtc {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("lens", "a layer × token heatmap of each method's top-1 prediction on new text"),
        ("export", "copy one method's fitted maps with a description.json, to share or reload"),
    ):
        sub = commands.add_parser(name, help=text, description=text, formatter_class=defaults)
        sub.add_argument("--results", default="results", help="the workflow's results folder")
        sub.add_argument("--model", required=True, help="model name in the workflow config")
        sub.add_argument("--corpus", required=True, help="corpus the maps were fitted on")
        if name == "lens":
            sub.add_argument("--text", required=True)
            sub.add_argument("--methods", nargs="+", default=["id", "mat"])
            sub.add_argument("--out", default="lens.png", help="figure (.png or .pdf)")
            sub.add_argument("--top", type=int, default=5, help="also print the top-k per layer")
            sub.add_argument(
                "--stat",
                choices=["prob", "entropy", "kl", "rank"],
                default="prob",
                help="what colours the cells: the top-1 probability, the entropy, the KL from "
                "the model's own prediction, or the rank of the model's own top-1 token",
            )
            sub.add_argument(
                "--scale",
                nargs=2,
                type=float,
                metavar=("LOW", "HIGH"),
                help="the colour scale's ends (default: the values' range)",
            )
        else:
            sub.add_argument("--method", default="mat", help="a fitted method (not id)")
            sub.add_argument("--out", required=True, help="folder to write, new or empty")
            sub.add_argument(
                "--force", action="store_true", help="replace --out even if it holds files"
            )
    _prune_parser(commands, defaults)
    return parser


def _prune_parser(commands, defaults) -> None:
    from jtc.pruning.variants import EXPORTED, VARIANTS

    text = (
        "write a causal LM with blocks I+1..I+N removed and VARIANT in their place, folded into "
        "its weights, as a standard checkpoint"
    )
    sub = commands.add_parser("prune", help=text, description=text, formatter_class=defaults)
    sub.add_argument(
        "--model-dir",
        required=True,
        help="a cached model folder: results/models/NAME of a finished workflow run (made by "
        "its resolve_model job, `snakemake results/models/NAME`), not the model's source",
    )
    sub.add_argument(
        "--start",
        type=int,
        required=True,
        metavar="I",
        help="the last block kept before the span (blocks are 1..L; 0: the span starts at the "
        "first block, for a variant that does not fold into block I's MLP)",
    )
    sub.add_argument(
        "--length", type=int, required=True, metavar="N", help="the number of blocks removed"
    )
    sub.add_argument(
        "--variant",
        choices=EXPORTED,
        required=True,
        help="; ".join(f"{n}: {VARIANTS[n].formula}, {VARIANTS[n].summary}" for n in EXPORTED),
    )
    sub.add_argument(
        "--maps",
        help="the workflow's maps file of this model (results/pruning/MODEL/CORPUS/"
        "maps.safetensors), with VARIANT.start_I.length_N.weight; for every --variant but drop "
        "(a file fitted on another model is refused)",
    )
    sub.add_argument(
        "--out",
        required=True,
        help="folder to write, new or empty, outside the workflow's results folder and "
        "--model-dir; its stamp.json records each file's size and sha256",
    )
    sub.add_argument(
        "--force",
        action="store_true",
        help="replace --out even if it holds files (never a folder that is or holds a jtc "
        "output: a model cache, a states folder, a workflow run's results)",
    )


def _prune(args: argparse.Namespace) -> int:
    from jtc.pruning.checkpoint import DESCRIPTION, export
    from jtc.pruning.export_inputs import export_problem
    from jtc.pruning.out_folder import PRUNE, out_problem
    from jtc.pruning.variants import variant_of

    try:
        has_map = variant_of(args.variant).has_map
        if has_map and not args.maps:
            raise ValueError(f"--variant {args.variant} needs --maps FILE (the fitted maps)")
        if not has_map and args.maps:
            raise ValueError(
                f"--variant {args.variant} takes no --maps (it removes the blocks as they are)"
            )
        # where it writes, then each input refused as what it is, before anything is loaded
        problem = out_problem(args.model_dir, args.out, args.force)
        if problem:
            raise ValueError(problem)
        problem = export_problem(args.model_dir, args.maps, ("--model-dir", "--maps"))
        if problem:
            raise ValueError(problem)
        folder = export(
            args.model_dir,
            args.out,
            start=args.start,
            length=args.length,
            variant=args.variant,
            maps=args.maps,
            force=args.force,
            made_by=PRUNE,
        )
    except (OSError, ValueError, RuntimeError) as err:
        print(f"jtc prune: {err}", file=sys.stderr)
        return 2
    import json

    done = json.loads((folder / DESCRIPTION).read_text())
    removed = done["blocks_removed"]
    print(folder)
    print(
        f"{done['variant']}: removed blocks {removed[0]}..{removed[-1]} of "
        f"{done['num_layers_before']} ({done['num_layers_after']} left); parameters "
        f"{done['parameters_before']:,} -> {done['parameters_after']:,}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "prune":
        return _prune(args)
    from jtc.api import Lens, Shortcuts

    try:
        if args.command == "export":
            folder = Shortcuts.from_results(args.results, args.model, args.corpus, args.method)
            print(folder.export(args.out, results=args.results, force=args.force))
            return 0
        lens = Lens.from_results(args.results, args.model, args.corpus, tuple(args.methods))
        lens.figure(args.text, args.out, stat=args.stat, scale=args.scale)
        table = lens.predictions(args.text, k=args.top).to_pylist()
    except (OSError, ValueError, RuntimeError) as err:
        print(f"jtc {args.command}: {err}", file=sys.stderr)
        return 2
    # the last token that is not a special one ([SEP] of a masked LM)
    last = max(r["position"] for r in table if r["input_token"] not in _specials(lens))
    if lens.masked:
        print(f"top-{args.top} predictions for the masked last word, by layer:")
    else:
        print(f"top-{args.top} next-token predictions after the last token, by layer:")
    name_width = max(len(m) for m in args.methods)
    for method in args.methods:
        for layer in sorted({r["layer"] for r in table}):
            tokens = [
                f"{r['token']} ({r['probability']:.2f})"
                for r in table
                if r["method"] == method and r["layer"] == layer and r["position"] == last
            ]
            print(f"  {method:>{name_width}} layer {layer:3d}: " + ", ".join(tokens))
    print(f"figure: {Path(args.out).resolve()}")
    return 0


def _specials(lens) -> set[str]:
    """The special tokens' text as the lens shows input tokens."""
    return {lens.token(t) for t in lens.tokenizer.all_special_ids}


if __name__ == "__main__":
    sys.exit(main())
