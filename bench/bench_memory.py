"""Memory requests against what a finished run's jobs used, with the requests of the code as it
is now: the requests are planned again (a dry run with --forceall over the finished folder, so
every model is cached and every shape is the real one) and set beside the peak RSS each job's
Snakemake benchmark file recorded (max_rss). Per rule: jobs, the largest request, the peak, their
ratio, and whether it lies in [50%, 100%] with no job above its own request (bench_scale's
memory_check).

    .venv/bin/python bench/bench_memory.py --dir DIR --configfile CONFIG [--json report.json]

A rule's request is what one job asks of the scheduler; two jobs run at once on 2 cores, so the
largest two requests that can overlap must fit the machine's memory (printed beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_scale import SNAKEFILE, job_blocks, memory_check  # noqa: E402


def planned_blocks(workdir: Path, configfile: Path) -> list[dict]:
    """Each job's rule, benchmark file and memory request as the workflow plans them now."""
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE)]
    cmd += ["--directory", str(workdir), "--configfile", str(configfile)]
    cmd += ["--forceall", "--dry-run", "--nolock", "--cores", "2", "all"]
    env = dict(os.environ, PYTHONPATH=str(SNAKEFILE.parents[1] / "src"))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return job_blocks(done.stdout.splitlines())


def machine_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--configfile", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rules = memory_check(planned_blocks(args.dir, args.configfile.resolve()), args.dir, 0.0, {})
    print(f"{'rule':22} {'jobs':>4} {'request MB':>10} {'peak MB':>8} {'ratio':>6}  in range")
    for rule, entry in rules.items():
        if entry["peak_mb"] is None:
            continue
        print(
            f"{rule:22} {entry['jobs']:4d} {max(entry['requests_mb']):10,d} "
            f"{entry['peak_mb']:8,.0f} {entry['ratio']:6.0%}  {'yes' if entry['ok'] else 'NO'}"
        )
    top = sorted((max(e["requests_mb"]) for e in rules.values()), reverse=True)[:2]
    print(f"the two largest requests: {sum(top):,} MB; this machine: {machine_mb():,.0f} MB")
    if args.json:
        args.json.write_text(json.dumps(rules, indent=2) + "\n")
    return 0 if all(e["ok"] is not False for e in rules.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
