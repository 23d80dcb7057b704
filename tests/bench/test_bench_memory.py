"""The memory benchmark (bench/bench_memory.py) on the finished tiny run: the requests planned
again by a dry run, each beside the peak RSS its jobs' benchmark files recorded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import bench_memory  # noqa: E402
from bench_scale import benchmark_max_rss  # noqa: E402


@pytest.mark.workflow
def test_each_rule_s_requests_beside_its_jobs_peaks(tiny_run, tmp_path, capsys):
    report = tmp_path / "memory.json"
    argv = ["--dir", str(tiny_run), "--configfile", str(tiny_run / "config.yaml")]
    status = bench_memory.main([*argv, "--json", str(report)])
    rules = json.loads(report.read_text())
    out = capsys.readouterr().out

    measured = {rule: e for rule, e in rules.items() if e["peak_mb"] is not None}
    assert measured and "the two largest requests" in out
    for rule, entry in measured.items():
        files = sorted((tiny_run / "benchmarks" / rule).rglob("*.tsv"))
        assert len(files) == entry["jobs"]  # every job planned again has its benchmark file
        peak = max(benchmark_max_rss(path, 0.0) for path in files)
        assert entry["peak_mb"] == peak > 0
        assert entry["ratio"] == pytest.approx(peak / max(entry["requests_mb"]))
        assert rule in out
    assert status == (0 if all(e["ok"] is not False for e in rules.values()) else 1)
