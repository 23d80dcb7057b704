"""The whole run: the default experiment (or any config) through Snakemake from an empty folder,
and where its CPU time goes.

It runs

    python -m snakemake -s REPO/workflow/Snakefile -d DIR --configfile CONFIG --cores N all

with this Python (the tests' command line, tests/helpers/harness.py), then the same again (a no-op
rerun, which must plan nothing), and prints:

- the wall time of the run;
- per rule (stage): jobs, CPU-s in all, fixed CPU-s (interpreter, imports, model or state
  loading: what the job had spent when it was ready to work), the fixed share, CPU-s per job,
  and as a cross-check the wall seconds and CPU seconds of the rule's Snakemake benchmark files
  (DIR/benchmarks/<rule>/...tsv; `-` where a rule writes none);
- the totals, and Snakemake's own overhead: the CPU time of the whole process tree (Snakemake and
  every job, from getrusage(RUSAGE_CHILDREN)) less the jobs' CPU;
- the no-op rerun's wall time (and CPU);
- the targets (run wall <= 15 min, fixed share <= 10% of the jobs' CPU, no-op rerun <= 5 s),
  pass or fail, judged only for the default experiment (config/config.yaml) on --cores 2.

The jobs' numbers come from the two lines every job's log ends with (jtc.logs.READY and
jtc.logs.CPU: the job process's CPU time when it was ready to work and in all; logs are appended,
so the last pair of each file counts). --report-only DIR prints the same for a run finished
elsewhere, from its logs and benchmark files alone (no wall time, tree CPU or rerun).

    .venv/bin/python bench/bench_run.py [--configfile config/config.yaml] [--dir DIR]
        [--cores 2] [--json report.json]
    .venv/bin/python bench/bench_run.py --report-only DIR [--json report.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_scale import jobs_per_rule, run_logged  # noqa: E402

from jtc.logs import CPU, READY  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"
DEFAULT_CONFIG = REPO / "config" / "config.yaml"
TARGET_CORES = 2
TARGETS = {  # the targets on the 2-core machine: name -> upper limit
    "run wall": 15 * 60.0,  # seconds
    "fixed share": 0.10,  # of the jobs' CPU time
    "no-op rerun wall": 5.0,  # seconds
}
NOTHING_TO_DO = "Nothing to be done"


# --- the jobs' logs ---------------------------------------------------------------------------


def log_line_pattern(fmt: str) -> re.Pattern:
    """The regular expression of a log line written with `fmt` (one %.3f), the number its group."""
    before, number, after = fmt.partition("%.3f")
    if not number or "%" in before + after:
        raise ValueError(f"expected one %.3f in {fmt!r}")
    return re.compile(re.escape(before) + r"(\d+(?:\.\d*)?)" + re.escape(after) + r"\s*$")


READY_LINE = log_line_pattern(READY)
CPU_LINE = log_line_pattern(CPU)


def parse_job_log(text: str) -> tuple[float, float] | None:
    """(CPU-s when ready, CPU-s in all) of the last run a job log records: its last CPU line
    with the READY line written before it in that run; None when no run got that far (a failed
    job, or a log from before jtc wrote these lines)."""
    ready, last = None, None
    for line in text.splitlines():
        if match := READY_LINE.search(line):
            ready = float(match.group(1))
        elif match := CPU_LINE.search(line):
            if ready is not None:
                last = (ready, float(match.group(1)))
            ready = None
    return last


def read_job_logs(run_dir: Path) -> tuple[dict[str, list[dict]], list[str]]:
    """({rule: [{log, ready, cpu}]}, logs without a READY/CPU pair) over RUN_DIR/logs/<rule>/."""
    rules: dict[str, list[dict]] = {}
    unparsed: list[str] = []
    root = run_dir / "logs"
    for path in sorted(root.rglob("*.log")) if root.is_dir() else []:
        relative = path.relative_to(run_dir)
        pair = parse_job_log(path.read_text(errors="replace"))
        if pair is None:
            unparsed.append(str(relative))
            continue
        rule = path.relative_to(root).parts[0]
        rules.setdefault(rule, []).append({"log": str(relative), "ready": pair[0], "cpu": pair[1]})
    return rules, unparsed


def _float(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):  # "NA" for a job too short to sample
        return None


def read_benchmarks(run_dir: Path) -> dict[str, dict]:
    """{rule: {files, seconds, cpu_seconds, max_rss_mb}} over RUN_DIR/benchmarks/<rule>/...tsv:
    the sums of the `s` and `cpu_time` columns, the largest `max_rss`."""
    rules: dict[str, dict] = {}
    root = run_dir / "benchmarks"
    for path in sorted(root.rglob("*.tsv")) if root.is_dir() else []:
        rule = path.relative_to(root).parts[0]
        entry = rules.setdefault(
            rule, {"files": 0, "seconds": 0.0, "cpu_seconds": 0.0, "max_rss_mb": None}
        )
        entry["files"] += 1
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle, delimiter="\t"):
                entry["seconds"] += _float(row.get("s")) or 0.0
                entry["cpu_seconds"] += _float(row.get("cpu_time")) or 0.0
                rss = _float(row.get("max_rss"))
                if rss is not None:
                    entry["max_rss_mb"] = max(entry["max_rss_mb"] or 0.0, rss)
    return rules


def _share(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def report_run(run_dir) -> dict:
    """What a finished run's logs and benchmark files say: per rule and in all, the jobs, their
    CPU-s, fixed CPU-s and fixed share; each job's numbers; the logs without them."""
    run_dir = Path(run_dir)
    jobs, unparsed = read_job_logs(run_dir)
    benchmarks = read_benchmarks(run_dir)
    rules = {}
    for rule in sorted(jobs.keys() | benchmarks.keys()):
        entries = jobs.get(rule, [])
        cpu = sum(j["cpu"] for j in entries)
        fixed = sum(j["ready"] for j in entries)
        bench = benchmarks.get(rule)
        rules[rule] = {
            "jobs": len(entries),
            "cpu_seconds": cpu,
            "fixed_cpu_seconds": fixed,
            "fixed_share": _share(fixed, cpu),
            "cpu_seconds_per_job": cpu / len(entries) if entries else None,
            "benchmark_files": bench["files"] if bench else 0,
            "benchmark_seconds": bench["seconds"] if bench else None,
            "benchmark_cpu_seconds": bench["cpu_seconds"] if bench else None,
            "max_rss_mb": bench["max_rss_mb"] if bench else None,
            "job_logs": entries,
        }
    cpu = sum(r["cpu_seconds"] for r in rules.values())
    fixed = sum(r["fixed_cpu_seconds"] for r in rules.values())
    return {
        "run_dir": str(run_dir),
        "rules": rules,
        "totals": {
            "jobs": sum(r["jobs"] for r in rules.values()),
            "cpu_seconds": cpu,
            "fixed_cpu_seconds": fixed,
            "fixed_share": _share(fixed, cpu),
            "benchmark_seconds": sum(r["benchmark_seconds"] or 0.0 for r in rules.values()),
        },
        "unparsed_logs": unparsed,
    }


# --- printing ---------------------------------------------------------------------------------


def _number(value, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _percent(value) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def print_stages(report: dict) -> None:
    rules, totals = report["rules"], report["totals"]
    width = max([len(r) for r in rules] + [5])
    header = (
        f"{'rule':<{width}}  {'jobs':>4}  {'CPU-s':>9}  {'fixed CPU-s':>11}  {'fixed':>6}  "
        f"{'CPU-s/job':>9}  {'bench wall-s':>12}  {'bench CPU-s':>11}"
    )
    print(header)
    for rule in sorted(rules, key=lambda r: -rules[r]["cpu_seconds"]):
        e = rules[rule]
        print(
            f"{rule:<{width}}  {e['jobs']:>4}  {e['cpu_seconds']:>9.1f}  "
            f"{e['fixed_cpu_seconds']:>11.1f}  {_percent(e['fixed_share']):>6}  "
            f"{_number(e['cpu_seconds_per_job'], 2):>9}  "
            f"{_number(e['benchmark_seconds'], 1):>12}  "
            f"{_number(e['benchmark_cpu_seconds'], 1):>11}"
        )
    print(
        f"{'total':<{width}}  {totals['jobs']:>4}  {totals['cpu_seconds']:>9.1f}  "
        f"{totals['fixed_cpu_seconds']:>11.1f}  {_percent(totals['fixed_share']):>6}  "
        f"{_number(_share(totals['cpu_seconds'], totals['jobs']), 2):>9}  "
        f"{totals['benchmark_seconds']:>12.1f}"
    )
    print(
        "(CPU-s and fixed CPU-s: the jobs' own log lines, each job's process with all its "
        "threads; fixed: interpreter, imports and loading, before the stage's work; bench: "
        "the `s` and `cpu_time` columns of the rule's benchmark files, '-' where it writes none)"
    )
    if report["unparsed_logs"]:
        names = report["unparsed_logs"]
        print(
            f"{len(names)} job logs without the READY/CPU lines (failed jobs, or an older jtc), "
            f"not counted: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
        )


def print_report(report: dict) -> None:
    if "wall_seconds" in report:
        print(
            f"run: {report['run_dir']} (config {report['configfile']}, --cores {report['cores']}"
            f", {report['machine_cpus']} CPUs here)"
        )
        print(f"wall time: {report['wall_seconds']:.1f} s (snakemake exit {report['exit_status']})")
    else:
        print(f"report on the finished run in {report['run_dir']} (logs and benchmarks only)")
    print_stages(report)
    mismatch = report.get("job_count_mismatch")
    if mismatch:
        print(f"jobs Snakemake ran vs job logs counted, where they differ: {mismatch}")
    if "tree_cpu_seconds" in report:
        tree, jobs = report["tree_cpu_seconds"], report["totals"]["cpu_seconds"]
        overhead = report["snakemake_overhead_cpu_seconds"]
        print(
            f"CPU of the whole process tree: {tree:.1f} s; the jobs' {jobs:.1f} s; Snakemake's "
            f"own overhead {overhead:.1f} s ({_percent(_share(overhead, tree))} of the tree)"
        )
        fixed = report["totals"]["fixed_cpu_seconds"] + overhead
        print(
            f"fixed cost with Snakemake's overhead counted as fixed: {fixed:.1f} s "
            f"({_percent(_share(fixed, tree))} of the tree's CPU)"
        )
    noop = report.get("noop")
    if noop:
        state = "nothing to do" if noop["nothing_to_do"] else f"PLANNED JOBS: {noop['jobs']}"
        print(
            f"no-op rerun: wall {noop['wall_seconds']:.2f} s, CPU {noop['cpu_seconds']:.2f} s "
            f"(snakemake exit {noop['exit_status']}, {state})"
        )
    targets = report.get("targets")
    if targets is None:
        return
    if not targets["judged"]:
        print(f"targets: not judged ({targets['why']})")
        return
    for name, entry in targets["results"].items():
        value, limit = entry["value"], entry["limit"]
        if name == "fixed share":
            shown = f"{_percent(value)} (limit {_percent(limit)} of the jobs' CPU)"
        else:
            shown = f"{_number(value, 2)} s (limit {limit:g} s)"
        print(f"target {name}: {shown} {'PASS' if entry['pass'] else 'FAIL'}")


# --- the run ----------------------------------------------------------------------------------


def snakemake_command(run_dir: Path, configfile: Path, cores: int) -> list[str]:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "-d", str(run_dir)]
    return [*cmd, "--configfile", str(configfile), "--cores", str(cores), "all"]


def children_cpu() -> float:
    """User + system CPU seconds of this process's finished (waited-for) children and theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(cmd: list[str], log_path: Path, env: dict, echo: bool) -> dict:
    """Run `cmd` (output to `log_path`): its exit status, wall seconds, the CPU seconds of its
    whole process tree, the jobs it ran per rule and whether it had nothing to do."""
    cpu_before = children_cpu()
    start = time.perf_counter()
    status, lines = run_logged(cmd, log_path, env, echo)
    wall = time.perf_counter() - start
    return {
        "exit_status": status,
        "wall_seconds": wall,
        "cpu_seconds": children_cpu() - cpu_before,
        "jobs": jobs_per_rule(lines),
        "nothing_to_do": any(NOTHING_TO_DO in line for line in lines),
        "log": str(log_path),
        "tail": lines[-40:],
    }


def judge_targets(report: dict, configfile: Path, cores: int) -> dict:
    if configfile.resolve() != DEFAULT_CONFIG.resolve():
        return {"judged": False, "why": f"{configfile} is not the default experiment"}
    if cores != TARGET_CORES:
        return {"judged": False, "why": f"--cores {cores}; the targets are for {TARGET_CORES}"}
    noop = report.get("noop") or {}
    values = {
        "run wall": report["wall_seconds"] if report["exit_status"] == 0 else None,
        "fixed share": report["totals"]["fixed_share"],
        "no-op rerun wall": noop.get("wall_seconds") if noop.get("nothing_to_do") else None,
    }
    results = {
        name: {
            "value": value,
            "limit": TARGETS[name],
            "pass": value is not None and value <= TARGETS[name],
        }
        for name, value in values.items()
    }
    return {"judged": True, "results": results}


def run_experiment(args) -> dict:
    configfile = Path(args.configfile).resolve()
    if not configfile.is_file():
        raise SystemExit(f"--configfile {configfile}: no such file")
    run_dir = Path(args.dir or tempfile.mkdtemp(prefix="jtc-bench-run-")).resolve()
    if run_dir.exists() and any(run_dir.iterdir()):
        raise SystemExit(f"--dir {run_dir} is not empty: the run starts from an empty folder")
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = snakemake_command(run_dir, configfile, args.cores)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    print(f"command: {' '.join(cmd)}", flush=True)

    run = timed_run(cmd, run_dir / "bench_run.log", env, echo=not args.quiet)
    noop = None
    if run["exit_status"] == 0:
        noop = timed_run(cmd, run_dir / "bench_run_noop.log", env, echo=False)
        noop["nothing_to_do"] = noop["nothing_to_do"] and not noop["jobs"]
    report = report_run(run_dir)
    counted = {rule: entry["jobs"] for rule, entry in report["rules"].items()}
    ran = {rule: n for rule, n in run["jobs"].items() if rule != "all"}
    mismatch = {
        rule: [ran.get(rule, 0), counted.get(rule, 0)]
        for rule in sorted(ran.keys() | counted.keys())
        if ran.get(rule, 0) != counted.get(rule, 0)
    }
    report.update(
        configfile=str(configfile),
        cores=args.cores,
        machine_cpus=os.cpu_count(),
        command=cmd,
        wall_seconds=run["wall_seconds"],
        exit_status=run["exit_status"],
        log=run["log"],
        snakemake_jobs=ran,
        job_count_mismatch=mismatch,
        tree_cpu_seconds=run["cpu_seconds"],
        snakemake_overhead_cpu_seconds=run["cpu_seconds"] - report["totals"]["cpu_seconds"],
        noop=None if noop is None else {k: v for k, v in noop.items() if k != "tail"},
    )
    report["targets"] = judge_targets(report, configfile, args.cores)
    if run["exit_status"] != 0:
        print(
            f"snakemake failed (exit {run['exit_status']}); the last lines of {run['log']}:\n"
            + "\n".join(run["tail"]),
            file=sys.stderr,
        )
    elif noop is not None and not noop["nothing_to_do"]:
        print(f"the no-op rerun was not one: see {noop['log']}", file=sys.stderr)
    return report


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configfile", default=str(DEFAULT_CONFIG), help="the experiment (config/config.yaml)"
    )
    parser.add_argument(
        "--dir", default=None, help="the run folder, empty or new (default: a new temporary one)"
    )
    parser.add_argument("--cores", type=int, default=TARGET_CORES)
    parser.add_argument("--json", default=None, help="write the report to this JSON file too")
    parser.add_argument(
        "--report-only",
        metavar="DIR",
        default=None,
        help="run nothing: report on the finished run in DIR from its logs and benchmark files",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report_only:
        run_dir = Path(args.report_only).resolve()
        if not (run_dir / "logs").is_dir():
            raise SystemExit(f"--report-only {run_dir}: no logs/ folder (not a run folder?)")
        report = report_run(run_dir)
        status = 0
    else:
        report = run_experiment(args)
        status = report["exit_status"]
        if status == 0 and not report["noop"]["nothing_to_do"]:
            status = 1
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
