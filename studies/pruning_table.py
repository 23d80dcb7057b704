"""Study behind docs/findings.md, "The pruning table: every training-free stand-in on one
protocol" (numbers of commit fad3141, `config/pruning-table.yaml`).

The depth-pruning stand-ins of finished runs side by side, one model a run folder: for each
measured model (the full one, every variant at the span `pruning.export_selection` chose, and
`pruning.also_measure`'s baselines at their own blocks), the perplexity ratio at each context
and the % of the full model's benchmark accuracy retained (ratio of averages and mean of
ratios, acc), each with its 95% interval; the full model's accuracy per task against chance; and
from `benchmark_pairs`, the pairs whose accuracy difference the intervals separate, and how many
documents a task the others would need. `--figure` draws % retained against the perplexity ratio
at the longest context, a panel per model.

    .venv/bin/python studies/pruning_table.py RUN_FOLDER:MODEL [RUN_FOLDER:MODEL ...]
        [--corpus news] [--figure docs/images/pruning-table.png]

Reads results/metrics/MODEL/CORPUS/{pruning_context,benchmark_accuracy,benchmark_retained,
benchmark_pairs}.parquet; writes nothing but the figure.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow.parquet as pq

KEY = ("variant", "removed", "selection")


def read(folder: Path, model: str, corpus: str, name: str) -> list[dict]:
    return pq.read_table(
        folder / "results" / "metrics" / model / corpus / f"{name}.parquet"
    ).to_pylist()


def label(row: dict, shared: str, prefix: str = "") -> str:
    """A measured model's name: its variant, with its selection rule where that is not the
    rule `shared` by every variant (pruning.export_selection)."""
    variant, selection = row[prefix + "variant"], row[prefix + "selection"]
    if variant == "full":
        return "full"
    return f"{variant}@{selection}" if selection != shared else variant


def interval(row: dict, name: str, digits: int = 2) -> str:
    low, high = row[name + "_low"], row[name + "_high"]
    return f"{row[name]:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def points(pair: dict) -> str:
    """A pair's difference in points of accuracy, with its interval."""
    low, high = 100 * pair["difference_low"], 100 * pair["difference_high"]
    return f"{100 * pair['difference']:+.1f} points [{low:+.1f}, {high:+.1f}]"


def model_table(folder: Path, model: str, corpus: str) -> tuple[list[str], list[dict]]:
    context = read(folder, model, corpus, "pruning_context")
    retained = [r for r in read(folder, model, corpus, "benchmark_retained") if r["headline"]]
    accuracy = [r for r in read(folder, model, corpus, "benchmark_accuracy") if r["headline"]]
    pairs = read(folder, model, corpus, "benchmark_pairs")
    counts = {}
    for r in retained:
        counts[r["selection"]] = counts.get(r["selection"], 0) + 1
    shared = max((s for s in counts if s), key=counts.get)
    contexts = sorted({r["context"] for r in context})
    above = [r["task"] for r in accuracy if r["variant"] == "full" and r["full_above_chance"]]
    mean_above = {}  # each model's acc averaged over the tasks where the full model beats chance
    for r in accuracy:
        if r["task"] in above:
            mean_above.setdefault(tuple(r[k] for k in KEY), []).append(r["accuracy"])
    lines = [
        f"#### {model} ({corpus}; every stand-in at the span {shared} chose)",
        "",
        "| measured model | blocks removed | "
        + " | ".join(f"perplexity ratio, {c:,} tokens" for c in contexts)
        + " | % retained (ratio of averages) | % retained (mean of ratios)"
        + f" | acc, the {len(above)} tasks above chance |",
        "| --- | --- | " + " | ".join("---" for _ in contexts) + " | --- | --- | --- |",
    ]
    marks = []
    for r in retained:
        key = tuple(r[k] for k in KEY)
        ratio = {c["context"]: c for c in context if tuple(c[k] for k in KEY) == key}
        cells = [interval(ratio[c], "perplexity_ratio") if c in ratio else "—" for c in contexts]
        lines.append(
            f"| {label(r, shared)} | {r['removed'] or '—'} | "
            + " | ".join(cells)
            + f" | {interval(r, 'retained_of_averages', 1)}"
            + f" | {interval(r, 'retained_mean_ratio', 1)}"
            + f" | {100 * sum(mean_above[key]) / len(mean_above[key]):.1f} |"
        )
        if contexts[-1] in ratio and r["variant"] != "full":
            marks.append({"label": label(r, shared), "ratio": ratio[contexts[-1]], "retained": r})
    tasks = [r for r in accuracy if r["variant"] == "full"]
    lines += [
        "",
        f"Full model, acc per task ({tasks[0]['documents']} documents, split {tasks[0]['split']}; "
        f"above chance on {len(above)} of {len(tasks)}: {', '.join(above) or 'none'}): "
        + ", ".join(
            f"{r['task']} {interval(r, 'accuracy')} (chance {r['chance']:.2f})" for r in tasks
        ),
        "",
    ]
    for task_set in ("all", "full_above_chance"):
        rows = [p for p in pairs if p["headline"] and p["task_set"] == task_set]
        if not rows:
            continue
        split = [p for p in rows if p["separated"] and p["variant"] != "full"]
        lines.append(
            f"Pairs of pruned models separated on acc ({task_set}, {rows[0]['tasks']} tasks): "
            f"{len(split)} of {sum(p['variant'] != 'full' for p in rows)}"
            + "".join(
                f"; {label(p, shared)} − {label(p, shared, 'versus_')} {points(p)}" for p in split
            )
        )
        for first, second in (("drop", "replaceme"), ("replaceme", "rotation_replaceme")):
            for p in rows:
                if (label(p, shared), label(p, shared, "versus_")) in (
                    (first, second),
                    (second, first),
                ):
                    lines.append(
                        f"- {label(p, shared)} − {label(p, shared, 'versus_')}: {points(p)}, "
                        f"documents a task to separate: {p['documents_to_separate']}"
                    )
        lines.append("")
    return lines, marks


def figure(panels: list[tuple[str, list[dict]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels) + 2.4, 5.2), squeeze=False)
    markers = "osD^v<>pXh*P"
    colours = plt.get_cmap("tab20").colors[::2] + plt.get_cmap("tab20").colors[1::2]
    for ax, (title, marks) in zip(axes[0], panels, strict=True):
        for k, p in enumerate(marks):
            x, y = p["ratio"], p["retained"]
            ax.errorbar(
                x["perplexity_ratio"],
                y["retained_of_averages"],
                xerr=[
                    [x["perplexity_ratio"] - x["perplexity_ratio_low"]],
                    [x["perplexity_ratio_high"] - x["perplexity_ratio"]],
                ],
                yerr=[
                    [y["retained_of_averages"] - y["retained_of_averages_low"]],
                    [y["retained_of_averages_high"] - y["retained_of_averages"]],
                ],
                fmt=markers[k % len(markers)],
                color=colours[k % len(colours)],
                capsize=2,
                label=p["label"],
            )
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(ScalarFormatter())
        ax.tick_params(axis="x", which="minor", labelsize=7)
        ax.axhline(100, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("perplexity ratio at the longest context (log; 1 = the full model)")
        ax.set_ylabel("% of the full model's accuracy retained (acc, ratio of averages)")
        ax.set_title(title)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center right")
    fig.tight_layout(rect=(0, 0, 1 - 2.4 / fig.get_figwidth(), 1))
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="RUN_FOLDER:MODEL")
    parser.add_argument("--corpus", default="news")
    parser.add_argument("--figure", type=Path)
    args = parser.parse_args()
    panels = []
    for run in args.runs:
        folder, model = run.rsplit(":", 1)
        lines, marks = model_table(Path(folder), model, args.corpus)
        print("\n".join(lines))
        panels.append((model, marks))
    if args.figure:
        figure(panels, args.figure)


if __name__ == "__main__":
    main()
