"""What reruns when a config key changes: every job whose params read it
(jtc.pipeline.rule_reads) and every job after those, in JOB_GRAPH. config/README.md's "reruns"
column is written from `reruns(key)` (jtc.pipeline.config_docs); tests/workflow/test_reruns.py
holds it to dry runs.

JOB_GRAPH (workflow/job_graph.yaml) is the job graph Snakemake plans for the default experiment
with every rule planned (graph_config), its jobs told apart by rule and `split` wildcard only
(a key of sizes reads one split's jobs). `python -m jtc.pipeline.reruns` writes it: Snakemake caches
the model and prepares the corpus in a scratch folder first (about a minute), since the jobs
after a checkpoint are planned without their inputs until it has run.

    python -m jtc.pipeline.reruns          # rewrite workflow/job_graph.yaml
    python -m jtc.pipeline.reruns --check  # exit 1 if it differs
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import heapq
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from jtc.files.io import write_or_check
from jtc.pipeline.rule_reads import WORKFLOW, Rule, params_read, read_workflow

ROOT = WORKFLOW.parent
JOB_GRAPH = WORKFLOW / "job_graph.yaml"
DEFAULT_CONFIG = ROOT / "config" / "config.yaml"
# the targets that plan every rule of graph_config (`pruned`, `measures` and `benchmarks` are
# outside `all` by default)
TARGETS = ("all", "pruned", "measures", "benchmarks")

SPLIT_NODE = re.compile(r"^(\w+)(?:\[(\w+)\])?$")


# ---- the job graph -----------------------------------------------------------------------------


def node_of(name: str) -> tuple[str, str | None]:
    """(rule, split) of a node of the job graph: `rule`, or `rule[split]`."""
    match = SPLIT_NODE.match(name)
    if not match:
        raise ValueError(f"not a node of the job graph: {name!r}")
    return match.group(1), match.group(2)


def read_job_graph(path: Path = JOB_GRAPH) -> dict[str, list[str]]:
    """{node: the nodes whose jobs read its outputs}, every node of the graph."""
    return yaml.safe_load(path.read_text())["reads"]


def graph_config(default: Path = DEFAULT_CONFIG) -> dict[str, Any]:
    """The default experiment cut to the model it prunes and its first corpus, with every rule
    planned: its shortlist check on (the schema's rank) beside its trained methods,
    sub-modules and depth pruning."""
    config = yaml.safe_load(default.read_text())
    model, corpus = config["pruning"]["models"][0], next(iter(config["corpora"]))
    config["models"] = {model: config["models"][model]}
    config["corpora"] = {corpus: config["corpora"][corpus]}
    config["submodules"].update(models=[model], corpora=[])
    config["pruning"].update(models=[model], corpora=[])
    config["early_exit"].pop("shortlist_rank", None)
    return config


def _dot_graph(dot: str, rules: dict[str, Rule]) -> dict[str, list[str]]:
    """The job graph of Snakemake's `--dag dot`, its jobs collapsed to rule and split; only
    the rules with outputs (not the targets `all`, `pruned`...)."""
    labels = dict(re.findall(r'^\s*(\d+)\[label = "([^"]*)"', dot, re.M))
    nodes = {}
    for number, label in labels.items():
        rule, *wildcards = label.split("\\n")
        split = next((w.split(": ")[1] for w in wildcards if w.startswith("split: ")), None)
        nodes[number] = f"{rule}[{split}]" if split else rule
    graph: dict[str, set[str]] = {
        node: set() for node in nodes.values() if rules[node_of(node)[0]].has_output
    }
    for source, target in re.findall(r"^\s*(\d+) -> (\d+)", dot, re.M):
        if nodes[source] in graph and nodes[target] in graph:
            graph[nodes[source]].add(nodes[target])
    return {node: sorted(graph[node]) for node in sorted(graph)}


def snakemake_job_graph(
    folder: Path, configfile: Path, workflow: Path = WORKFLOW
) -> dict[str, list[str]]:
    """The job graph Snakemake plans for a run folder and its config, TARGETS (its
    checkpoints done, else the jobs after them are planned without their inputs)."""
    command = [sys.executable, "-m", "snakemake", "-s", str(workflow / "Snakefile"), "-d"]
    command += [str(folder), "--configfile", str(configfile), "--cores", "1"]
    command += ["--dag", "dot", "--", *TARGETS]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=workflow.parent)
    if proc.returncode != 0:
        raise RuntimeError(f"snakemake --dag failed:\n{proc.stderr[-4000:]}")
    return _dot_graph(proc.stdout, read_workflow(workflow).rules)


def default_job_graph(workflow: Path = WORKFLOW) -> dict[str, list[str]]:
    """The job graph of graph_config, in a scratch folder where its model is cached and its
    corpus prepared first (the checkpoints: about a minute)."""
    from jtc import paths

    config = graph_config()
    with tempfile.TemporaryDirectory(prefix="jtc-job-graph-") as scratch:
        configfile = Path(scratch) / "config.yaml"
        configfile.write_text(yaml.safe_dump(config))
        made = [paths.MODEL.format(model=m) for m in config["models"]]
        made += [paths.CORPUS.format(corpus=c) for c in config["corpora"]]
        command = [sys.executable, "-m", "snakemake", "-s", str(workflow / "Snakefile")]
        command += ["-d", scratch, "--configfile", str(configfile), "--cores", "2", *made]
        proc = subprocess.run(command, capture_output=True, text=True, cwd=workflow.parent)
        if proc.returncode != 0:
            raise RuntimeError(f"snakemake (the checkpoints) failed:\n{proc.stderr[-4000:]}")
        return snakemake_job_graph(Path(scratch), configfile, workflow)


def graph_text(graph: dict[str, list[str]]) -> str:
    head = (
        "# Written by `python -m jtc.pipeline.reruns` (do not edit): the job graph that Snakemake\n"
        "# plans for config/config.yaml with every rule planned (reruns.graph_config),\n"
        "# each job named by its rule (and split): under `reads`, the jobs that read its outputs.\n"
        "# config/README.md's reruns column follows it (jtc.pipeline.config_docs).\n"
    )
    body = yaml.safe_dump({"reads": graph}, default_flow_style=None, width=100, sort_keys=False)
    return head + body


# ---- what reruns -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Reruns:
    """The jobs (nodes of the job graph, in the pipeline's order) that rerun when a key
    changes: those whose params read it and every one after them (`whole`), and those only a
    value computed from it reaches, which rerun when that value changes (`partial`); `first`
    and `partial_first` are the readers no other reader comes before."""

    whole: tuple[str, ...]
    partial: tuple[str, ...]
    first: tuple[str, ...]
    partial_first: tuple[str, ...]

    def rules(self, partial: bool = True) -> set[str]:
        """The rules of the jobs that rerun (with the partial ones, or without)."""
        nodes = self.whole + (self.partial if partial else ())
        return {node_of(node)[0] for node in nodes}


def _after(graph: dict[str, list[str]], start: Iterable[str]) -> set[str]:
    """`start` and every node after it."""
    seen, todo = set(start), list(start)
    while todo:
        for node in graph[todo.pop()]:
            if node not in seen:
                seen.add(node)
                todo.append(node)
    return seen


def _first(graph: dict[str, list[str]], readers: set[str]) -> set[str]:
    """The readers that come after no other reader."""
    return readers - {n for r in readers for n in _after(graph, graph[r])}


@functools.cache
def node_order(graph_path: Path = JOB_GRAPH, workflow: Path = WORKFLOW) -> dict[str, int]:
    """The nodes in an order the pipeline can run them: each after the nodes it reads, and
    otherwise in the order the workflow defines its rules."""
    graph = read_job_graph(graph_path)
    defined = {name: i for i, name in enumerate(read_workflow(workflow).rules)}
    waiting = {node: 0 for node in graph}
    for after in graph.values():
        for node in after:
            waiting[node] += 1
    ready = [(defined[node_of(n)[0]], n) for n, count in waiting.items() if count == 0]
    order: dict[str, int] = {}
    while ready:
        _, node = heapq.heappop(ready)
        order[node] = len(order)
        for after in graph[node]:
            waiting[after] -= 1
            if waiting[after] == 0:
                heapq.heappush(ready, (defined[node_of(after)[0]], after))
    return order


def reruns(key: str, graph_path: Path = JOB_GRAPH, workflow: Path = WORKFLOW) -> Reruns:
    """What reruns when the dotted config key `key` (pruning.lengths) changes."""
    graph, reads = read_job_graph(graph_path), params_read(workflow)
    path = tuple(key.split("."))
    readers: dict[bool, set[str]] = {False: set(), True: set()}
    for node in graph:
        rule, split = node_of(node)
        for read in reads[rule]:
            if read.matches(path, split):
                readers[read.partial].add(node)
    reading = {rule for rule, rs in reads.items() if any(r.matches(path, None) for r in rs)}
    missing = reading - {node_of(n)[0] for n in graph}
    if missing:
        raise ValueError(
            f"config key {key}: rules {sorted(missing)} read it but are not in "
            f"{graph_path.name}: python -m jtc.pipeline.reruns"
        )
    whole = _after(graph, readers[False])
    partial = _after(graph, readers[True]) - whole
    order = node_order(graph_path, workflow).__getitem__
    return Reruns(
        tuple(sorted(whole, key=order)),
        tuple(sorted(partial, key=order)),
        tuple(sorted(_first(graph, readers[False]), key=order)),
        tuple(sorted(_first(graph, readers[True] - whole), key=order)),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {JOB_GRAPH.name} differs")
    args = parser.parse_args(argv)
    stale = f"{JOB_GRAPH} is not Snakemake's job graph: python -m jtc.pipeline.reruns"
    return write_or_check(JOB_GRAPH, graph_text(default_job_graph()), args.check, stale)


if __name__ == "__main__":
    sys.exit(main())
