"""Study behind docs/findings.md, "Three sizes: SmolLM2-135M, Qwen2.5 0.5B and 1.5B" (every table
and the figure; numbers of commit 8d82e58).

Findings of several models side by side, from finished runs' results/ folders (the tables
the workflow wrote; nothing is recomputed), and a figure of the trend across their sizes.

Prints Markdown tables, per model and corpus: the shape; mat > id (share of layer pairs, and
the mean r² of each); Precision@1 and KL at a quarter, half and three quarters of the depth for
id, mat and the tuned lens; the most tolerant sub-module; early exit's savings; the depth-pruning
table (the chosen span of each length and variant: next-token perplexity ratio, top-1
agreement; context perplexity at the longest window; generation fidelity). --figure writes
Precision@1 against relative depth, one panel per method, one line per model.

    .venv/bin/python studies/compare_sizes.py --results DIR/results --models smollm2 qwen-0_5b \
        qwen-1_5b [--corpora news wiki] [--figure docs/images/size-trend.png]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from jtc import paths  # noqa: E402
from jtc.files.io import read_json  # noqa: E402

METHODS = ("id", "mat", "tuned_lens")
DEPTHS = (0.25, 0.5, 0.75)


class Results(list):
    """Results folders, each model read from the first that has it (a model run in a folder
    of its own with the same settings, e.g. SmolLM2 beside a run of the larger models)."""

    def of(self, model: str) -> Path:
        for folder in self:
            if paths.under(folder, paths.MODEL, model=model).exists():
                return folder
        raise SystemExit(f"no results folder has model {model!r}")


def table(results: Results, model: str, corpus: str, name: str) -> pd.DataFrame | None:
    path = paths.under(results.of(model), paths.metric(name), model=model, corpus=corpus)
    return pd.read_parquet(path) if path.exists() else None


def markdown(rows: list[dict]) -> str:
    if not rows:
        return "(no rows)\n"
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def shape(results: Results, model: str) -> dict:
    info = read_json(paths.under(results.of(model), paths.MODEL, model=model) / "info.json")
    return {
        "model": model,
        "parameters": f"{info['parameters'] / 1e6:,.0f}M",
        "layers": info["num_layers"],
        "width": info["hidden_size"],
        "vocabulary": f"{info['vocab_size']:,}",
    }


def r2_row(results: Results, model: str, corpus: str) -> dict | None:
    r2 = table(results, model, corpus, "r2.parquet")
    if r2 is None:
        return None
    wide = r2.pivot_table(index=["source_layer", "target_layer"], columns="method", values="r2")
    return {
        "model": model,
        "corpus": corpus,
        "pairs": len(wide),
        "mat > id": float((wide["mat"] > wide["id"]).mean()),
        "mean r² id": float(wide["id"].mean()),
        "mean r² mat": float(wide["mat"].mean()),
    }


def prediction_rows(results: Results, model: str, corpus: str) -> list[dict]:
    scores = table(results, model, corpus, "prediction.parquet")
    if scores is None:
        return []
    layers = int(scores["layer"].max())
    rows = []
    for depth in DEPTHS:
        layer = round(depth * layers)
        row = {"model": model, "corpus": corpus, "layer": f"{layer} of {layers}"}
        for method in METHODS:
            pick = scores[(scores["method"] == method) & (scores["layer"] == layer)]
            for metric, label in (("precision@1", "P@1"), ("kl", "KL")):
                value = pick.loc[pick["metric"] == metric, "mean"]
                row[f"{label} {method}"] = float(value.iloc[0]) if len(value) else float("nan")
        rows.append(row)
    return rows


def submodule_row(results: Results, model: str, corpus: str) -> dict | None:
    scores = table(results, model, corpus, "submodules.parquet")
    if scores is None:
        return None
    p1 = scores[(scores["metric"] == "precision@1") & scores["method"].str.startswith("mat_")]
    means = p1.groupby("method")["mean"].mean().sort_values(ascending=False)
    return {
        "model": model,
        "corpus": corpus,
        "jump layers": ", ".join(str(x) for x in sorted(p1["layer"].unique())),
        **{f"P@1 {m}": float(v) for m, v in means.items()},
        "most tolerant": means.index[0],
    }


def exit_rows(results: Results, model: str, corpus: str) -> list[dict]:
    savings = table(results, model, corpus, "early_exit_savings.parquet")
    if savings is None:
        return []
    held = savings[(savings["selection"] == "held_out") & savings["method"].isin(METHODS)]
    return [
        {
            "model": model,
            "corpus": corpus,
            "method": r.method,
            "check every": r.check_every,
            "target": r.target,
            "accuracy": float(r.accuracy),
            "layers saved %": float(r.saved_percent),
            "MACs saved %": float(r.macs_saved_percent),
        }
        for r in held[held["target"] == 0.9].itertuples()
    ]


def pruning_rows(results: Results, model: str, corpus: str) -> list[dict]:
    selected = table(results, model, corpus, "pruning_selected.parquet")
    context = table(results, model, corpus, "pruning_context.parquet")
    generation = table(results, model, corpus, "pruning_generation.parquet")
    if selected is None:
        return []
    chosen = selected[selected["selection"] == "angular_distance"]
    rows = []
    for r in chosen.itertuples():
        row = {
            "model": model,
            "corpus": corpus,
            "length": f"{r.length} ({r.fraction_removed:.0%})",
            "variant": r.variant,
            "removed": r.removed,
            "ppl ratio": float(r.perplexity_ratio),
            "top-1 agreement": float(r.top1_agreement),
        }
        if context is not None:
            longest = context[context["context"] == context["context"].max()]
            match = longest[(longest["variant"] == r.variant) & (longest["length"] == r.length)]
            if len(match):
                row[f"context ppl ratio ({int(longest['context'].iloc[0])})"] = float(
                    match["perplexity_ratio"].iloc[0]
                )
        if generation is not None:
            match = generation[
                (generation["variant"] == r.variant) & (generation["length"] == r.length)
            ]
            for column in ("agreement_share", "identical_share"):
                if len(match):
                    row[f"generation {column.replace('_', ' ')}"] = float(match[column].iloc[0])
        rows.append(row)
    return rows


def figure(results: Results, models: list[str], corpus: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = {m: table(results, m, corpus, "prediction.parquet") for m in models}
    tables = {m: t for m, t in tables.items() if t is not None}
    # a panel per method some run scored (runs without the tuned lens draw no empty panel)
    methods = [m for m in METHODS if any((t["method"] == m).any() for t in tables.values())]
    fig, axes = plt.subplots(1, len(methods), figsize=(4 * len(methods), 3.4), sharey=True)
    for model, scores in tables.items():
        layers = scores["layer"].max()
        for ax, method in zip(axes, methods, strict=True):
            pick = scores[(scores["method"] == method) & (scores["metric"] == "precision@1")]
            pick = pick.sort_values("layer")
            x = pick["layer"] / layers
            line = ax.plot(x, pick["mean"], label=model)[0]
            ax.fill_between(x, pick["ci_low"], pick["ci_high"], alpha=0.2, color=line.get_color())
    for ax, method in zip(axes, methods, strict=True):
        ax.set_title(method)
        ax.set_xlabel("layer / depth")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"Precision@1 ({corpus}, 95% interval)")
    axes[0].legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument(
        "--results", type=Path, nargs="+", required=True, help="results folders (first wins)"
    )
    parser.add_argument("--models", nargs="+", required=True)
    parser.add_argument("--corpora", nargs="+", default=["news", "wiki"])
    parser.add_argument("--figure", type=Path)
    args = parser.parse_args()
    models, corpora = args.models, args.corpora
    res = Results(args.results)
    pairs = [(m, c) for m in models for c in corpora]
    print("### Models\n\n" + markdown([shape(res, m) for m in models]))
    print("### mat > id\n\n" + markdown([r for m, c in pairs if (r := r2_row(res, m, c))]))
    rows = [r for m, c in pairs for r in prediction_rows(res, m, c)]
    print("### Prediction\n\n" + markdown(rows))
    rows = [r for m, c in pairs if (r := submodule_row(res, m, c))]
    print("### Sub-modules\n\n" + markdown(rows))
    print("### Early exit\n\n" + markdown([r for m, c in pairs for r in exit_rows(res, m, c)]))
    print("### Pruning\n\n" + markdown([r for m, c in pairs for r in pruning_rows(res, m, c)]))
    if args.figure:
        figure(res, models, corpora[0], args.figure)
        print(f"wrote {args.figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
