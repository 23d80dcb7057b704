"""The sentences each job draws from the splits of a corpus (the first n of a split in the
sentence table's seeded order, jtc.data.corpus.select_split), checked against what the corpus
has before any job that draws them runs, naming the config key that asks for them:
- while planning, an upper bound from a text file's lines (lines_problem, dry runs too);
- the rules that draw depth pruning's sentences read the table through the prepare_corpus
  checkpoint (the workflow's `checked_sentences`): checked exactly (split_problem) once it is
  made, in the same run, before any of them starts;
- the other draws (sizes.train, sizes.validation) as the run starts, where the table is there
  and up to date (sizes_problem).
The job that draws them names the same key if it still finds too few. Torch-free."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jtc.files.planned import PlannedJob

SPLITS = ("train", "validation")


def _text_lines(spec: Mapping[str, Any]) -> int | None:
    """The sentences a text-file corpus has at most (its lines, at most max_sentences); None
    for another source."""
    if spec.get("source") != "text_file":
        return None
    lines, last = 0, b"\n"
    with open(spec["path"], "rb") as handle:
        while block := handle.read(1 << 20):
            lines += block.count(b"\n")
            last = block[-1:]
    lines += last != b"\n"
    return min(lines, spec.get("max_sentences") or lines)


@dataclass(frozen=True)
class Draw:
    """The first `sentences` sentences of a corpus's `split` that the config key `key` asks
    for (`after`: the sentences of the split drawn before them, the generation prompts')."""

    key: str
    split: str
    sentences: int
    after: int = 0

    @property
    def needed(self) -> int:
        return self.after + self.sentences


# the rules that draw sentences from a split, by the keys they draw them with
_DRAWING = {
    "sizes.train": ("extract_hidden", "record_parts"),
    "sizes.validation": ("extract_hidden", "record_parts"),
    "pruning.calibration_sentences": ("calibrate_pruning", "context_perplexity"),
    "pruning.evaluation_sentences": ("run_pruned",),
    "pruning.selected_sentences": ("run_pruned",),
    "pruning.generation.prompts": ("generation_fidelity",),
}


def split_draws(config: dict[str, Any], rules: Collection[str]) -> list[Draw]:
    """What the jobs of `rules` (the rules of a corpus's planned jobs) draw from its splits."""
    sizes, pruning = config["sizes"], config["pruning"]
    skip = max(pruning["evaluation_sentences"], pruning["selected_sentences"])
    draws = [
        Draw("sizes.train", "train", sizes["train"]),
        Draw("sizes.validation", "validation", sizes["validation"]),
        Draw("pruning.calibration_sentences", "train", pruning["calibration_sentences"]),
        Draw("pruning.evaluation_sentences", "validation", pruning["evaluation_sentences"]),
        Draw("pruning.selected_sentences", "validation", pruning["selected_sentences"]),
        Draw("pruning.generation.prompts", "validation", pruning["generation"]["prompts"], skip),
    ]
    if pruning["calibration"]["text"] != "sentences":
        # windows are sized in tokens: calibrate_pruning checks them (jtc.pruning.windows)
        draws = [d for d in draws if d.key != "pruning.calibration_sentences"]
    return [d for d in draws if set(_DRAWING[d.key]) & set(rules)]


def _fix(draw: Draw, have: int, corpus: str) -> str:
    """How to go on when a split has `have` sentences, fewer than `draw` needs."""
    most = have - draw.after
    lower = f"lower {draw.key}" + (f" to at most {most}" if most > 0 else "")
    if draw.after:
        lower += " (or pruning.evaluation_sentences and pruning.selected_sentences)"
    return (
        f"{lower}, or give the corpus more {draw.split} sentences (a larger corpus, "
        f"corpora.{corpus}.max_sentences, validation_fraction)"
    )


def _asked(draw: Draw) -> str:
    """What a draw asks for, in words."""
    if draw.after:
        return (
            f"{draw.sentences} {draw.split} sentences after the {draw.after} evaluation and "
            f"selected ones ({draw.needed} in all)"
        )
    return f"{draw.sentences} {draw.split} sentences"


def split_problem(
    corpus: str, counts: Mapping[str, int], draws: Iterable[Draw], where: str
) -> str | None:
    """The first draw that asks more of a split than the corpus has (`counts`: its sentences
    per split, as `where` tells), naming the key, both numbers and the fix."""
    for draw in draws:
        have = counts.get(draw.split, 0)
        if draw.needed > have:
            return (
                f"config key '{draw.key}': {_asked(draw)} asked of corpus '{corpus}', which "
                f"has {have} ({where}); {_fix(draw, have, corpus)}"
            )
    return None


def split_counts(table: str | Path) -> dict[str, int]:
    """The sentences of each split of a sentence table (jtc.data.corpus), its `split` column
    alone read."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    counts = pc.value_counts(pq.read_table(table, columns=["split"]).column("split"))
    return {str(c["values"]): int(c["counts"]) for c in counts.to_pylist()}


def sizes_problem(jobs: list[PlannedJob], config: dict[str, Any]) -> str | None:
    """Before any job runs: where a corpus's sentence table is there and up to date (its
    prepare_corpus job does not run), what the jobs to run would draw from its splits beyond
    what they have (split_problem), refused here rather than when the job that draws them
    fails (for run_pruned: after every earlier job)."""
    for job in jobs:
        if job.rule != "prepare_corpus" or job.runs or not Path(job.outputs[0]).is_file():
            continue
        corpus = job.wildcards["corpus"]
        rules = {j.rule for j in jobs if j.runs and j.wildcards.get("corpus") == corpus}
        counts = split_counts(job.outputs[0])
        where = f"its sentence table {job.outputs[0]}"
        problem = split_problem(corpus, counts, split_draws(config, rules), where)
        if problem:
            return f"invalid configuration: {problem}"
    return None


def lines_problem(name: str, spec: dict[str, Any], config: dict[str, Any]) -> str | None:
    """While planning: a text-file corpus (at most one sentence a line) with fewer lines than
    the largest draws of its two splits together, where one of them is depth pruning's (where
    it prunes this corpus; that key is named: sizes alone are size_problem's); other corpora
    are counted as the run starts (sizes_problem)."""
    lines = _text_lines(spec)
    pruning = config["pruning"]
    pruned = pruning["models"] and name in (pruning["corpora"] or config["corpora"])
    if lines is None or not pruned:
        return None
    rules = ["extract_hidden", "calibrate_pruning", "run_pruned"]
    if pruning["measures_in_all"]:
        rules.append("generation_fidelity")
    draws = split_draws(config, rules)
    most = {split: max(d.needed for d in draws if d.split == split) for split in SPLITS}
    # the pruning draws that are the largest of their split, the largest first
    largest = [d for d in draws if d.key.startswith("pruning.") and d.needed == most[d.split]]
    for draw in sorted(largest, key=lambda d: -d.needed):
        other = "validation" if draw.split == "train" else "train"
        counts = {draw.split: lines - most[other], other: most[other]}
        where = (
            f"{spec['path']}: at most {lines} sentences, one a line, {most[other]} of them "
            f"{other} sentences"
        )
        problem = split_problem(name, counts, [draw], where)
        if problem:
            return problem
    return None
