"""A paper-size jtc experiment end to end through Snakemake, on one model folder (a random-weight
model of a real shape from bench/scale_model.py, or any local model folder) and one text corpus.

It writes WORKDIR/config.yaml (one model, one text_file corpus, the methods asked for; NJTC and
N-NJTC into the last layer only, as in config/paper.yaml; prediction and early exit on), runs

    python -m snakemake --snakefile REPO/workflow/Snakefile --directory WORKDIR
        --configfile WORKDIR/config.yaml --cores N TARGET

with this Python (so snakemake need only be importable, e.g. from PYTHONPATH), and prints:
the wall time; jobs and job-seconds per rule (jobs counted from Snakemake's log, seconds summed
from the `s` column of the benchmark files WORKDIR/benchmarks/<rule>/...tsv written by this run);
GPU utilisation sampled every 0.5 s (mean %, share of samples above 0) and peak GPU memory used,
from nvidia-smi (skipped with a note where there is none); per rule, the share of the GPU's
memory the workflow gave its jobs (gpu_memory_percent, an estimate) beside the most GPU memory one
of its jobs was seen to use (nvidia-smi's per-process memory, matched to the job's script);
per rule that asks for memory, its jobs' requests (mem_mb, from Snakemake's "resources:" lines)
beside the peak RSS they reached (the larger of the benchmark files' max_rss and the high-water
mark VmHWM sampled every 0.5 s from the jobs' processes), checked against 50-100% of the rule's
largest request.
--matmul-peak measures this machine's fp32 matmul peak before and after the run.
--json FILE writes the same as JSON.

Run: python bench/bench_scale.py --model-dir DIR --workdir DIR --text FILE [--dtype bfloat16]
         [--train 9000 --validation 3000] [--methods id,mat,njtc,nnjtc,tuned_lens]
         [--submodule-jumps 0] [--cores 16] [--matmul-peak] [--json report.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"
R2_TABLE = "results/metrics/{model}/{corpus}/r2.parquet"  # jtc.paths.metric("r2.parquet")
# the rules whose jobs hold the model or its head on the GPU (--gpu-jobs caps them)
GPU_RULES = (
    "extract_hidden",
    "decode_predictions",
    "train_map",
    "record_parts",
    "replace_parts",
)
JOB_LINE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):\s*$")
STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]\s*$")
JOB_ID = re.compile(r"^\s+jobid: (\d+)\s*$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)")
PROGRESS = re.compile(r"^\d+ of \d+ steps \(.*\) done")
GPU_SHARE = re.compile(r"^\s+resources: .*\bgpu_memory_percent=(\d+)")
MEM_MB = re.compile(r"^\s+resources: .*\bmem_mb=(\d+)")
BENCHMARK = re.compile(r"^\s+benchmark: (\S+)\s*$")
# a job's peak RSS must lie within these shares of its memory request (mem_mb)
MEMORY_RANGE = (0.5, 1.0)
# the script a job runs: Snakemake copies workflow/scripts/<rule>.py to
# .snakemake/scripts/tmpXXXX.<rule>.py
JOB_SCRIPT = re.compile(r"\.snakemake/scripts/tmp\w+\.(\w+)\.py$")


# --- the experiment -------------------------------------------------------------------------


def model_layers(model_dir: Path) -> int:
    """The number of blocks of a Hugging Face model folder, from its config.json."""
    config = json.loads((model_dir / "config.json").read_text())
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        if key in config:
            return int(config[key])
    raise SystemExit(f"{model_dir}/config.json names no number of layers")


def jump_layers(layers: int, count: int) -> list[int]:
    """`count` jump layers spread evenly over 0..layers-1 (first and last included)."""
    if count <= 1:
        return [layers // 2]
    count = min(count, layers)
    return sorted({round(i * (layers - 1) / (count - 1)) for i in range(count)})


def experiment_config(args, model: str, corpus: str) -> dict:
    model_dir = Path(args.model_dir).resolve()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    fraction = args.validation_fraction or args.validation / (args.train + args.validation)
    config = {
        "seed": args.seed,
        "sizes": {"train": args.train, "validation": args.validation},
        "positions_per_sentence": args.positions,
        "validation_fraction": round(fraction, 6),
        "batch_size": args.batch_size,
        "max_tokens": args.max_tokens,
        "methods": methods,
        "corpora": {corpus: {"source": "text_file", "path": str(Path(args.text).resolve())}},
        "models": {model: {"source": str(model_dir), "predict": True}},
    }
    if args.threads:
        config["threads"] = args.threads
    config["models"][model]["dtype"] = args.dtype
    training = {m: {"targets": "last"} for m in ("njtc", "nnjtc") if m in methods}
    if training:
        config["training"] = training
    if args.bootstrap:
        config["prediction"] = {"bootstrap": args.bootstrap}
    if args.submodule_jumps > 0:
        config["submodules"] = {
            "models": [model],
            "corpora": [corpus],
            "jump_layers": jump_layers(model_layers(model_dir), args.submodule_jumps),
            "sentences": min(args.submodule_sentences, args.validation),
        }
    return config


# --- GPU sampling ---------------------------------------------------------------------------


def job_rule(pid: str, proc: Path = Path("/proc"), workdir: Path | None = None) -> str | None:
    """The rule whose job process `pid` is, from its command line (None: not a job, a job of
    another working directory than `workdir` when given, or a pid this machine's /proc does not
    show, e.g. nvidia-smi inside a container)."""
    try:
        argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for arg in argv:
        text = arg.decode(errors="replace")
        match = JOB_SCRIPT.search(text)
        if match and (workdir is None or text.startswith(f"{workdir}/")):
            return match.group(1)
    return None


class GpuSampler(threading.Thread):
    """nvidia-smi's utilisation and memory used, every `interval` seconds, in the background;
    the visible GPUs (CUDA_VISIBLE_DEVICES, when it lists indices) averaged (utilisation) and
    summed (memory); and the GPU memory of each job process of `workdir`'s workflow, kept per
    rule as its largest (nvidia-smi lists every process on the GPU: other workflows' jobs, and
    on a shared node other users', are not counted)."""

    QUERY = ["--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
    APPS = ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]

    def __init__(self, workdir: Path | None, interval: float = 0.5, proc: Path = Path("/proc")):
        super().__init__(daemon=True)
        self.workdir = workdir
        self.interval = interval
        self.proc = proc
        self.samples: list[tuple[float, float]] = []  # (utilisation %, memory MiB)
        self.errors = 0
        self.rule_peak_mib: dict[str, float] = {}  # rule -> most memory one of its jobs held
        self._stop_event = threading.Event()
        self.command = ["nvidia-smi", *self.QUERY]
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        if re.fullmatch(r"\d+(,\d+)*", visible):
            self.command += ["-i", visible]

    @staticmethod
    def available() -> bool:
        return shutil.which("nvidia-smi") is not None

    def sample(self) -> tuple[float, float] | None:
        try:
            out = subprocess.run(
                self.command, capture_output=True, text=True, timeout=10, check=True
            ).stdout
            rows = [[float(x) for x in line.split(",")] for line in out.splitlines() if line]
        except (OSError, subprocess.SubprocessError, ValueError):
            return None
        if not rows:
            return None
        return sum(r[0] for r in rows) / len(rows), sum(r[1] for r in rows)

    def sample_processes(self) -> None:
        """Each GPU process's memory, kept as the largest seen for the rule it runs (only the
        jobs of `workdir`'s workflow)."""
        try:
            out = subprocess.run(
                ["nvidia-smi", *self.APPS], capture_output=True, text=True, timeout=10, check=True
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return
        for line in out.splitlines():
            fields = [field.strip() for field in line.split(",")]
            if len(fields) != 2 or not fields[1].replace(".", "", 1).isdigit():
                continue  # e.g. "[N/A]" where the driver does not tell
            rule = job_rule(fields[0], self.proc, self.workdir)
            if rule is not None:
                self.rule_peak_mib[rule] = max(self.rule_peak_mib.get(rule, 0.0), float(fields[1]))

    def run(self) -> None:
        while not self._stop_event.is_set():
            start = time.monotonic()
            value = self.sample()
            if value is None:
                self.errors += 1
            else:
                self.samples.append(value)
                self.sample_processes()
            self._stop_event.wait(max(0.0, self.interval - (time.monotonic() - start)))

    def stop(self) -> dict:
        self._stop_event.set()
        self.join()
        if not self.samples:
            return {"note": f"nvidia-smi gave no samples ({self.errors} failed)"}
        utilisation = [u for u, _ in self.samples]
        return {
            "samples": len(self.samples),
            "interval_s": self.interval,
            "utilization_mean_pct": sum(utilisation) / len(utilisation),
            "busy_share": sum(u > 0 for u in utilisation) / len(utilisation),
            "memory_peak_mib": max(m for _, m in self.samples),
            "failed_samples": self.errors,
            "rule_peak_mib": dict(sorted(self.rule_peak_mib.items())),
        }


class RssSampler(threading.Thread):
    """Every `interval` seconds, the peak RSS so far (VmHWM) of each running job process of
    `workdir`'s workflow (matched to its rule by the script on its command line, as GpuSampler
    does), kept per rule as the largest seen: the peak of rules that write no benchmark file. A
    job's growth in its last interval before it exits is missed."""

    def __init__(self, workdir: Path | None, interval: float = 0.5, proc: Path = Path("/proc")):
        super().__init__(daemon=True)
        self.workdir = workdir
        self.interval = interval
        self.proc = proc
        self.rule_peak_mb: dict[str, float] = {}
        self._rules: dict[str, str | None] = {}  # pid -> rule (None: not a job)
        self._stop_event = threading.Event()

    def sample(self) -> None:
        for entry in self.proc.glob("[0-9]*"):
            pid = entry.name
            if pid not in self._rules:
                self._rules[pid] = job_rule(pid, self.proc, self.workdir)
            rule = self._rules[pid]
            if rule is None:
                continue
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
            if match:
                peak = int(match.group(1)) * 1024 / 1e6  # MB, as Snakemake's max_rss
                self.rule_peak_mb[rule] = max(self.rule_peak_mb.get(rule, 0.0), peak)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.interval)

    def stop(self) -> dict[str, float]:
        self._stop_event.set()
        self.join()
        return dict(sorted(self.rule_peak_mb.items()))


# --- the run and its report -----------------------------------------------------------------


def snakemake_command(args, workdir: Path, configfile: Path) -> list[str]:
    """`python -m snakemake --snakefile S --directory W --configfile C [options] --cores N TARGET`
    (options that take several values, such as --set-resources, come before --cores so that
    they cannot swallow the target)."""
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE)]
    cmd += ["--directory", str(workdir), "--configfile", str(configfile)]
    if args.gpu_jobs > 0:  # --resources replaces the workflow profile's: keep its GPU share
        cmd += ["--resources", f"gpu={args.gpu_jobs}", "gpu_memory_percent=100"]
        cmd += ["--set-resources", *(f"{rule}:gpu=1" for rule in GPU_RULES)]
    if args.forceall:
        cmd.append("--forceall")
    return [*cmd, *args.snakemake_args, "--cores", str(args.cores), args.target]


def run_logged(cmd: list[str], log_path: Path, env: dict, echo: bool) -> tuple[int, list[str]]:
    """Run `cmd`, its output (stdout and stderr) written to `log_path`; the job lines and, with
    `echo`, the progress lines go to stderr too. Returns (exit status, output lines)."""
    lines: list[str] = []
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            lines.append(line.rstrip("\n"))
            if echo and (PROGRESS.match(line) or JOB_LINE.match(line)):
                print(f"  {line.rstrip()}", file=sys.stderr, flush=True)
        return proc.wait(), lines


def jobs_per_rule(lines: list[str]) -> dict[str, int]:
    """{rule: jobs started} from Snakemake's output ("rule NAME:", "localrule NAME:",
    "checkpoint NAME:" open each job's block)."""
    counts: dict[str, int] = {}
    for line in lines:
        match = JOB_LINE.match(line)
        if match:
            counts[match.group(1)] = counts.get(match.group(1), 0) + 1
    return counts


def gpu_shares(lines: list[str]) -> dict[str, int]:
    """{rule: the largest share of the GPU's memory (percent) given to one of its jobs}, from
    the resources line of each job's block in Snakemake's output."""
    shares: dict[str, int] = {}
    rule = None
    for line in lines:
        if match := JOB_LINE.match(line):
            rule = match.group(1)
        elif rule is not None and (match := GPU_SHARE.match(line)):
            shares[rule] = max(shares.get(rule, 0), int(match.group(1)))
    return shares


def job_blocks(lines: list[str]) -> list[dict]:
    """Each job's rule, benchmark file (None: the rule writes none) and memory request (mem_mb;
    None: the rule asks for none), from its block in Snakemake's output."""
    jobs: list[dict] = []
    for line in lines:
        if match := JOB_LINE.match(line):
            jobs.append({"rule": match.group(1), "benchmark": None, "mem_mb": None})
        elif not jobs or not line.startswith(" "):
            continue
        elif match := BENCHMARK.match(line):
            jobs[-1]["benchmark"] = match.group(1)
        elif match := MEM_MB.match(line):
            jobs[-1]["mem_mb"] = int(match.group(1))
    return jobs


def benchmark_max_rss(path: Path, since: float) -> float | None:
    """The largest max_rss (MB) of a benchmark file written since `since`, else None."""
    try:
        if path.stat().st_mtime < since:
            return None
        with open(path, newline="") as handle:
            values = [row.get("max_rss", "") for row in csv.DictReader(handle, delimiter="\t")]
    except OSError:
        return None
    numbers = [float(v) for v in values if re.fullmatch(r"[0-9.]+", v or "")]
    return max(numbers) if numbers else None


def memory_check(
    blocks: list[dict],
    workdir: Path,
    since: float,
    sampled_mb: dict[str, float],
    bounds: tuple[float, float] = MEMORY_RANGE,
) -> dict[str, dict]:
    """Per rule that asks for memory: its jobs' requests (mem_mb) beside the peak RSS they
    reached. Snakemake samples a job's max_rss (its benchmark file) now and then and can miss
    a short peak, so the rule's peak (`peak_mb`) is the larger of its jobs' max_rss and the
    largest VmHWM sampled from its processes (the kernel's high-water mark, `sampled_mb`), set
    beside its largest request (`ratio`). `ok`: that ratio within `bounds`, and no job's max_rss
    above its own request (`job_ratios`); None where nothing was measured."""
    rules: dict[str, dict] = {}
    for job in blocks:
        if job["mem_mb"] is None:
            continue
        entry = rules.setdefault(
            job["rule"], {"jobs": 0, "requests_mb": [], "max_rss_mb": [], "job_ratios": []}
        )
        entry["jobs"] += 1
        entry["requests_mb"].append(job["mem_mb"])
        peak = benchmark_max_rss(workdir / job["benchmark"], since) if job["benchmark"] else None
        if peak is not None:
            entry["max_rss_mb"].append(peak)
            entry["job_ratios"].append(peak / job["mem_mb"])
    for rule, entry in rules.items():
        entry["sampled_mb"] = sampled_mb.get(rule)
        peaks = entry["max_rss_mb"] + ([entry["sampled_mb"]] if entry["sampled_mb"] else [])
        entry["peak_mb"] = max(peaks) if peaks else None
        if entry["peak_mb"] is None:
            entry["ratio"] = entry["ok"] = None
            continue
        entry["ratio"] = entry["peak_mb"] / max(entry["requests_mb"])
        entry["ok"] = bounds[0] <= entry["ratio"] <= bounds[1] and all(
            r <= bounds[1] for r in entry["job_ratios"]
        )
    return dict(sorted(rules.items()))


def logged_seconds(lines: list[str]) -> dict[str, float]:
    """{rule: wall seconds of its jobs} from the time stamps of Snakemake's output (each job's
    start and "Finished jobid" lines; 1 s resolution): every rule, benchmarked or not."""
    stamp, rule, started = None, None, {}
    seconds: dict[str, float] = {}
    for line in lines:
        if match := STAMP.match(line):
            stamp = time.mktime(time.strptime(match.group(1), "%a %b %d %H:%M:%S %Y"))
        elif match := JOB_LINE.match(line):
            rule = match.group(1)
        elif (match := JOB_ID.match(line)) and rule is not None and stamp is not None:
            started[match.group(1)] = stamp
            rule = None
        elif (match := FINISHED.match(line)) and stamp is not None:
            begin = started.pop(match.group(1), None)
            if begin is not None:
                seconds[match.group(2)] = seconds.get(match.group(2), 0.0) + stamp - begin
    return seconds


def benchmark_seconds(workdir: Path, since: float) -> dict[str, dict]:
    """{rule: {files, seconds, max_rss_mb}} over the benchmark files WORKDIR/benchmarks/<rule>/
    ...tsv written since `since` (a time.time()): the sum of their `s` column, the largest
    max_rss."""
    rules: dict[str, dict] = {}
    root = workdir / "benchmarks"
    for path in sorted(root.rglob("*.tsv")) if root.is_dir() else []:
        if path.stat().st_mtime < since:
            continue
        rule = path.relative_to(root).parts[0]
        entry = rules.setdefault(rule, {"files": 0, "seconds": 0.0, "max_rss_mb": 0.0})
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle, delimiter="\t"):
                entry["seconds"] += float(row["s"])
                try:
                    entry["max_rss_mb"] = max(entry["max_rss_mb"], float(row["max_rss"]))
                except (KeyError, ValueError):
                    pass
        entry["files"] += 1
    return rules


def report_rules(
    jobs: dict[str, int],
    seconds: dict[str, dict],
    logged: dict[str, float],
    shares: dict[str, int],
    gpu_peak_mib: dict[str, float],
) -> dict[str, dict]:
    rules = {}
    for rule in sorted(jobs.keys() | seconds.keys()):
        bench = seconds.get(rule)
        rules[rule] = {
            "jobs": jobs.get(rule, 0),
            "seconds": bench["seconds"] if bench else None,
            "benchmark_files": bench["files"] if bench else 0,
            "max_rss_mb": bench["max_rss_mb"] if bench else None,
            "log_seconds": logged.get(rule),
            "gpu_share_pct": shares.get(rule),
            "gpu_peak_mib": gpu_peak_mib.get(rule),
        }
    return rules


def _number(value, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def matmul_peak(threads: int) -> float:
    """This machine's fp32 matmul peak (GFLOP/s) with `threads` (bench/common.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import peak_matmul_gflops

    return peak_matmul_gflops(threads)


def print_report(report: dict) -> None:
    print(f"wall time: {report['wall_seconds']:.1f} s (snakemake exit {report['exit_status']})")
    if report.get("matmul_peak_gflops"):
        peaks = ", ".join(f"{p:.0f}" for p in report["matmul_peak_gflops"])
        print(f"fp32 matmul peak before and after the run: {peaks} GFLOP/s")
    rules = report["rules"]
    width = max([len(r) for r in rules] + [5])
    print(
        f"{'rule':<{width}}  {'jobs':>5}  {'job-seconds':>11}  {'log seconds':>11}  "
        f"{'peak RSS MB':>11}  {'GPU share %':>11}  {'GPU MiB':>8}"
    )
    order = sorted(rules, key=lambda r: -(rules[r]["seconds"] or rules[r]["log_seconds"] or 0))
    for rule in order:
        entry = rules[rule]
        print(
            f"{rule:<{width}}  {entry['jobs']:>5}  {_number(entry['seconds'], 1):>11}  "
            f"{_number(entry['log_seconds'], 0):>11}  {_number(entry['max_rss_mb'], 0):>11}  "
            f"{_number(entry['gpu_share_pct'], 0):>11}  {_number(entry['gpu_peak_mib'], 0):>8}"
        )
    total_jobs = sum(e["jobs"] for e in rules.values())
    total = sum(e["seconds"] or 0.0 for e in rules.values())
    logged = sum(e["log_seconds"] or 0.0 for e in rules.values())
    print(f"{'total':<{width}}  {total_jobs:>5}  {total:>11.1f}  {logged:>11.0f}")
    print(
        "(job-seconds: the `s` column of the rule's benchmark files, '-' where it writes none; "
        "log seconds: from Snakemake's time stamps, 1 s resolution, every rule; GPU share: "
        "the largest gpu_memory_percent of the rule's jobs, estimated; GPU MiB: the most GPU "
        "memory one of its jobs was seen holding, '-' where none was seen)"
    )
    gpu = report["gpu"]
    if "note" in gpu:
        print(f"GPU: {gpu['note']}")
    else:
        print(
            f"GPU: utilisation mean {gpu['utilization_mean_pct']:.1f}%, busy (>0%) in "
            f"{gpu['busy_share'] * 100:.1f}% of {gpu['samples']} samples every "
            f"{gpu['interval_s']} s; peak memory used {gpu['memory_peak_mib']:.0f} MiB"
        )
    print_memory(report["memory"])
    print(f"r² table: {report['r2_table']} ({'exists' if report['r2_exists'] else 'MISSING'})")
    print(f"snakemake log: {report['log']}")


def _span(values: list[float], digits: int, scale: float = 1.0) -> str:
    if not values:
        return "-"
    low, high = min(values) * scale, max(values) * scale
    return (
        f"{low:.{digits}f}"
        if f"{low:.{digits}f}" == f"{high:.{digits}f}"
        else (f"{low:.{digits}f}-{high:.{digits}f}")
    )


def print_memory(memory: dict[str, dict], bounds: tuple[float, float] = MEMORY_RANGE) -> None:
    """Per rule that asks for memory: jobs, request (MB), max_rss and VmHWM (MB), the peak over
    the largest request, check."""
    if not memory:
        print("memory: no job asked for memory (mem_mb)")
        return
    low, high = (round(b * 100) for b in bounds)
    width = max([len(r) for r in memory] + [5])
    print(
        f"{'rule':<{width}}  {'jobs':>5}  {'request MB':>11}  {'max_rss MB':>11}  "
        f"{'VmHWM MB':>9}  {'peak/request':>12}  check"
    )
    for rule, entry in memory.items():
        if entry["ok"] is None:
            check = "no peak measured"
        else:
            check = "pass" if entry["ok"] else f"FAIL (outside {low}-{high}%)"
        if not entry["max_rss_mb"] and entry["ok"] is not None:
            check += " (no benchmark file: VmHWM only)"
        sampled = "-" if entry["sampled_mb"] is None else f"{entry['sampled_mb']:.0f}"
        ratio = "-" if entry["ratio"] is None else f"{entry['ratio'] * 100:.0f}%"
        print(
            f"{rule:<{width}}  {entry['jobs']:>5}  {_span(entry['requests_mb'], 0):>11}  "
            f"{_span(entry['max_rss_mb'], 0):>11}  {sampled:>9}  {ratio:>12}  {check}"
        )
    judged = [e for e in memory.values() if e["ok"] is not None]
    print(
        f"memory requests: {sum(e['ok'] for e in judged)} of {len(judged)} rules whose peak RSS "
        f"is within {low}-{high}% of their largest request (mem_mb), no job's max_rss above its "
        "own. max_rss: the rule's benchmark files (Snakemake's samples); VmHWM: the largest "
        "high-water mark sampled every 0.5 s from the rule's processes; peak: the larger"
    )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True, help="a model folder (scale_model.py)")
    parser.add_argument("--workdir", required=True, help="Snakemake's working directory")
    parser.add_argument("--text", required=True, help="text corpus, one sentence a line")
    parser.add_argument("--name", default=None, help="the model's name in the config")
    parser.add_argument("--corpus", default="text", help="the corpus's name in the config")
    parser.add_argument("--train", type=int, default=9000)
    parser.add_argument("--validation", type=int, default=3000)
    parser.add_argument(
        "--positions",
        type=lambda v: v if v == "all" else int(v),
        default=1,
        help="token positions per training sentence (positions_per_sentence: an integer or all)",
    )
    parser.add_argument(
        "--validation-fraction",
        type=float,
        default=None,
        help="share of the text's lines put in validation (default validation/(train+validation))",
    )
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--methods", default="id,mat,njtc,nnjtc,tuned_lens")
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        default="bfloat16",
        help="the model's models.NAME.dtype",
    )
    parser.add_argument(
        "--submodule-jumps",
        type=int,
        default=0,
        help="jump layers of the sub-module stage (0: off)",
    )
    parser.add_argument("--submodule-sentences", type=int, default=500)
    parser.add_argument("--bootstrap", type=int, default=None, help="prediction.bootstrap")
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--threads", type=int, default=None, help="jtc threads (default: jtc's)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--gpu-jobs",
        type=int,
        default=0,
        help="at most this many jobs that hold the model or its head on the GPU at once (a gpu "
        "resource on those rules); default 0: no such cap, the GPU jobs' estimated shares of "
        "its memory decide (the workflow's gpu_memory_percent)",
    )
    parser.add_argument("--target", default="all", help="Snakemake target rule or file")
    parser.add_argument("--forceall", action="store_true", help="rerun every job")
    parser.add_argument("--json", default=None, help="write the report to this JSON file too")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--matmul-peak",
        action="store_true",
        help="measure this machine's fp32 matmul peak (bench/common.py) with --threads threads "
        "before and after the run, to set the wall time beside",
    )
    parser.add_argument(
        "--snakemake-args",
        nargs=argparse.REMAINDER,
        default=[],
        help="further Snakemake options (put this last)",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    model_dir = Path(args.model_dir).resolve()
    if not (model_dir / "config.json").is_file():
        raise SystemExit(f"--model-dir {model_dir}: no config.json (a model folder is needed)")
    model = args.name or re.sub(r"[^A-Za-z0-9_-]", "-", model_dir.name).strip("-_") or "model"
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    config = experiment_config(args, model, args.corpus)
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    cmd = snakemake_command(args, workdir, configfile)
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    log_path = workdir / "bench_scale.log"
    print(f"config: {configfile}\ncommand: {' '.join(cmd)}", flush=True)

    peaks = [matmul_peak(args.threads or 1)] if args.matmul_peak else []
    sampler = GpuSampler(workdir) if GpuSampler.available() else None
    if sampler:
        sampler.start()
    rss = RssSampler(workdir)
    rss.start()
    started = time.time()
    start = time.perf_counter()
    status, lines = run_logged(cmd, log_path, env, echo=not args.quiet)
    wall = time.perf_counter() - start
    gpu = sampler.stop() if sampler else {"note": "no nvidia-smi on this machine: not sampled"}
    sampled_rss = rss.stop()
    if args.matmul_peak:
        peaks.append(matmul_peak(args.threads or 1))

    r2 = workdir / R2_TABLE.format(model=model, corpus=args.corpus)
    report = {
        "wall_seconds": wall,
        "exit_status": status,
        "rules": report_rules(
            jobs_per_rule(lines),
            benchmark_seconds(workdir, started - 1.0),
            logged_seconds(lines),
            gpu_shares(lines),
            gpu.get("rule_peak_mib", {}),
        ),
        "memory": memory_check(job_blocks(lines), workdir, started - 1.0, sampled_rss),
        "sampled_rss_mb": sampled_rss,
        "matmul_peak_gflops": peaks,
        "gpu": gpu,
        "model": model,
        "model_dir": str(model_dir),
        "workdir": str(workdir),
        "config": config,
        "command": cmd,
        "r2_table": str(r2),
        "r2_exists": r2.is_file(),
        "log": str(log_path),
    }
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if status != 0:
        print(
            f"snakemake failed (exit {status}); the last lines of {log_path}:\n"
            + "\n".join(lines[-40:]),
            file=sys.stderr,
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
