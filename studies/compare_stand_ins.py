"""Study behind docs/findings.md, "An exportable stand-in: ReplaceMe's map in a rotated stream"
(the paired ratios against replaceme; numbers of commit c31ee51), and "Depth pruning on running
text" (one context column pair per context length).

Depth pruning's stand-ins side by side, from a finished run's results: for each corpus and
length, the span a selection rule chose for each variant, its next-token perplexity ratio on the
selected sentences and at each real context (windows of each length), each with its 95%
interval, and the paired ratio against a reference variant (ReplaceMe by default) on the same
sentences or windows: exp((CE_variant − CE_reference) / tokens), resampled by sentence or
window, so that an interval below 1 says the variant beats the reference on these tokens.

    .venv/bin/python studies/compare_stand_ins.py RUN_FOLDER [--model smollm2]
        [--rule angular_distance] [--reference replaceme] [--contexts 512 2048]

Reads results/pruning/MODEL/CORPUS/{selection,selected_runs,context_windows,
generation_prompts}.parquet (what `pruning_tables` and the measures read); writes nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from ratios import perplexity_ratio


def unit_sums(rows: list[dict], key: str) -> dict[int, tuple[float, float, float]]:
    """{unit: (cross_entropy, cross_entropy_full, tokens)} of one run's rows."""
    return {r[key]: (r["cross_entropy"], r["cross_entropy_full"], r["tokens"]) for r in rows}


def paired(runs: dict[str, dict], variant: str, reference: str) -> tuple[float, ...] | None:
    """The ratio of `variant` against `reference` on the units both have, with its interval."""
    if variant not in runs or reference not in runs:
        return None
    units = sorted(set(runs[variant]) & set(runs[reference]))
    if not units:
        return None
    ce = np.array([runs[variant][u][0] for u in units])
    other = np.array([runs[reference][u][0] for u in units])
    tokens = np.array([runs[variant][u][2] for u in units], dtype=float)
    return perplexity_ratio(ce, other, tokens)


def fmt(values: tuple[float, ...] | None) -> str:
    return "—" if values is None else f"{values[0]:.2f} [{values[1]:.2f}, {values[2]:.2f}]"


def compare(
    folder: Path, model: str, corpus: str, rule: str, reference: str, contexts: list[int]
) -> list[list[str]]:
    base = folder / "results" / "pruning" / model / corpus
    selection = [
        r for r in pq.read_table(base / "selection.parquet").to_pylist() if r["selection"] == rule
    ]
    selected = base / "selected_runs.parquet"
    selected = pq.read_table(selected).to_pylist() if selected.exists() else []
    windows = base / "context_windows.parquet"
    windows = pq.read_table(windows).to_pylist() if windows.exists() else []
    prompts = base / "generation_prompts.parquet"
    prompts = pq.read_table(prompts).to_pylist() if prompts.exists() else []
    rows = []
    for n in sorted({r["length"] for r in selection}):
        chosen = {r["variant"]: r for r in selection if r["length"] == n}
        units = {"sentences": {}} | {c: {} for c in contexts}
        for variant, row in chosen.items():
            units["sentences"][variant] = unit_sums(
                [r for r in selected if (r["variant"], r["removed"]) == (variant, row["removed"])],
                "sentence_id",
            )
            for context in contexts:
                units[context][variant] = unit_sums(
                    [
                        r
                        for r in windows
                        if (r["variant"], r["length"], r["start"], r["context"])
                        == (variant, n, row["start"], context)
                    ],
                    "window",
                )
        for variant, row in chosen.items():
            alone = {}
            for name, runs in units.items():
                if runs[variant]:
                    ce, full, tokens = (
                        np.array(v, dtype=float) for v in zip(*runs[variant].values(), strict=True)
                    )
                    alone[name] = perplexity_ratio(ce, full, tokens)
            agree = [
                r
                for r in prompts
                if (r["variant"], r["length"], r["start"]) == (variant, n, row["start"])
            ]
            share = (
                f"{sum(r['agreement'] for r in agree) / sum(r['new_tokens'] for r in agree):.2f}"
                if agree
                else "—"
            )
            rows.append(
                [
                    corpus,
                    str(n),
                    row["removed"],
                    variant,
                    *(
                        text
                        for name, runs in units.items()
                        for text in (fmt(alone.get(name)), fmt(paired(runs, variant, reference)))
                    ),
                    share,
                ]
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--rule", default="angular_distance")
    parser.add_argument("--reference", default="replaceme")
    parser.add_argument("--contexts", type=int, nargs="+", default=[512])
    args = parser.parse_args(argv)
    head = ["corpus", "n", "removed", "variant", "sentences: ratio", f"vs {args.reference}"]
    for context in args.contexts:
        head += [f"context {context}: ratio", f"vs {args.reference}"]
    head += ["generation"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for corpus in sorted(p.name for p in (args.folder / "results/pruning" / args.model).iterdir()):
        for row in compare(
            args.folder, args.model, corpus, args.rule, args.reference, args.contexts
        ):
            print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
