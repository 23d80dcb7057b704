"""The whole-run benchmark (bench/bench_run.py): it reads each job's fixed and total CPU time from
the lines jtc.logs writes (the last pair of an appended log), sums them per rule, and on the
tiny run counts every job Snakemake ran."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from harness import rules_run

from jtc.logs import CPU, READY

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import bench_run  # noqa: E402

STAMP = "2026-01-01 00:00:00,000 INFO jtc: "  # jtc.logs' formatter: time, level, logger


def logged(fmt: str, value: float) -> str:
    return STAMP + fmt % value


def test_parser_takes_the_last_complete_run_of_an_appended_log():
    text = "\n".join(
        [
            logged(READY, 1.25),  # a first run that finished
            logged(CPU, 2.5),
            STAMP + "jtc modules loaded: jtc jtc.logs",
            logged(READY, 1.5),  # a second that failed before its CPU line
            STAMP.replace("INFO", "ERROR") + "job failed",
            "Traceback (most recent call last):",
            "RuntimeError: boom",
            STAMP + "loading the model",  # the last: ready() marked mid-way, then the work
            logged(READY, 3.125),
            STAMP + "fitting layer 0",
            logged(CPU, 12.75),
            STAMP + "jtc modules loaded: jtc jtc.logs",
            "",
        ]
    )
    assert bench_run.parse_job_log(text) == (3.125, 12.75)
    assert bench_run.parse_job_log(text.split("loading the model")[0]) == (1.25, 2.5)
    assert bench_run.parse_job_log(logged(READY, 1.0)) is None  # failed: no CPU line
    assert bench_run.parse_job_log(STAMP + "job failed\n") is None
    assert bench_run.parse_job_log("") is None


@pytest.mark.parametrize("mark_ready", [False, True])
def test_parser_reads_what_job_log_writes(tmp_path, mark_ready):
    # a job's own process: jtc.logs.job_log around some work, with or without ready()
    log = tmp_path / "job.log"
    code = (
        "from jtc.logs import job_log, ready\n"
        f"with job_log({str(log)!r}):\n"
        f"    {'ready()' if mark_ready else 'pass'}\n"
        "    sum(i * i for i in range(300_000))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    ready, cpu = bench_run.parse_job_log(log.read_text())
    assert 0 < ready < cpu
    assert READY % ready in log.read_text() and CPU % cpu in log.read_text()


def write_run(folder: Path) -> Path:
    """A finished run's logs and benchmark files: rule a (2 jobs), b (1), c (1 failed)."""
    jobs = {
        "logs/a/m/x/from_0.log": (1.0, 4.0),
        "logs/a/m/x/from_1.log": (2.0, 4.0),
        "logs/b/m.log": (0.5, 1.5),
    }
    for name, (ready, cpu) in jobs.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{logged(READY, ready)}\n{logged(CPU, cpu)}\n")
    (folder / "logs/c").mkdir()
    (folder / "logs/c/m.log").write_text(logged(READY, 0.7) + "\nTraceback ...\n")
    bench = folder / "benchmarks/a/m/x/from_0.tsv"
    bench.parent.mkdir(parents=True)
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time"
    bench.write_text(f"{header}\n2.5\t0:00:02\t100.0\t1\t1\t1\t0\t0\t50\t3.75\n")
    return folder


def test_report_sums_each_rule_and_sets_failed_logs_aside(tmp_path, capsys):
    report = bench_run.report_run(write_run(tmp_path))
    a, b = report["rules"]["a"], report["rules"]["b"]
    assert (a["jobs"], a["cpu_seconds"], a["fixed_cpu_seconds"]) == (2, 8.0, 3.0)
    assert a["fixed_share"] == pytest.approx(3 / 8) and a["cpu_seconds_per_job"] == 4.0
    assert (a["benchmark_files"], a["benchmark_seconds"], a["benchmark_cpu_seconds"]) == (
        1,
        2.5,
        3.75,
    )
    assert (b["jobs"], b["cpu_seconds"], b["fixed_cpu_seconds"], b["benchmark_seconds"]) == (
        1,
        1.5,
        0.5,
        None,
    )
    assert "c" not in report["rules"] and report["unparsed_logs"] == ["logs/c/m.log"]
    totals = report["totals"]
    assert (totals["jobs"], totals["cpu_seconds"], totals["fixed_cpu_seconds"]) == (3, 9.5, 3.5)
    assert totals["fixed_share"] == pytest.approx(3.5 / 9.5)

    assert bench_run.main(["--report-only", str(tmp_path), "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "36.8%" in out and "logs/c/m.log" in out  # the total fixed share, the failed log
    assert json.loads((tmp_path / "r.json").read_text())["totals"] == totals


def test_targets_are_judged_for_the_default_experiment_on_two_cores_only(tmp_path):
    report = {
        "wall_seconds": 800.0,
        "exit_status": 0,
        "totals": {"fixed_share": 0.12},
        "noop": {"wall_seconds": 3.0, "nothing_to_do": True},
    }
    judged = bench_run.judge_targets(report, bench_run.DEFAULT_CONFIG, 2)
    assert {name: r["pass"] for name, r in judged["results"].items()} == {
        "run wall": True,
        "fixed share": False,
        "no-op rerun wall": True,
    }
    assert not bench_run.judge_targets(report, bench_run.DEFAULT_CONFIG, 4)["judged"]
    other = tmp_path / "config.yaml"
    other.write_text("seed: 0\n")
    assert not bench_run.judge_targets(report, other, 2)["judged"]


def test_a_run_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "results").mkdir()
    with pytest.raises(SystemExit, match="not empty"):
        bench_run.main(["--dir", str(tmp_path)])


@pytest.mark.workflow
def test_report_on_the_tiny_run_counts_every_job_log(tiny_run, tiny_first_run, capsys):
    report = bench_run.report_run(tiny_run)
    logs = sorted((tiny_run / "logs").rglob("*.log"))
    per_rule = Counter(path.relative_to(tiny_run / "logs").parts[0] for path in logs)
    assert report["unparsed_logs"] == []
    assert {rule: entry["jobs"] for rule, entry in report["rules"].items()} == per_rule
    # every job Snakemake ran has its log and its lines (the rule `all` runs nothing)
    ran = {rule: n for rule, n in rules_run(tiny_first_run).items() if rule != "all"}
    assert ran == per_rule
    for rule, entry in report["rules"].items():
        for job in entry["job_logs"]:
            text = (tiny_run / job["log"]).read_text()
            assert READY % job["ready"] in text and CPU % job["cpu"] in text
            assert 0 < job["ready"] <= job["cpu"], (rule, job)
        assert entry["cpu_seconds"] == pytest.approx(sum(j["cpu"] for j in entry["job_logs"]))
        assert 0 < entry["fixed_share"] <= 1
    totals = report["totals"]
    assert totals["jobs"] == len(logs)
    assert 0 < totals["fixed_cpu_seconds"] <= totals["cpu_seconds"]

    bench_run.print_report(report)
    out = capsys.readouterr().out
    assert all(rule in out for rule in per_rule) and "total" in out
