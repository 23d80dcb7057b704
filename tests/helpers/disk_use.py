"""What a run said it would write (jtc.pipeline.disk's line) and what it wrote."""

import re
from pathlib import Path

UNITS = {"TB": 1e12, "GB": 1e9, "MB": 1e6, "kB": 1e3, "B": 1}
ESTIMATE = re.compile(r"jtc: this run writes about ([\d.]+) (\w+);")


def said_estimate(proc) -> float:
    found = ESTIMATE.search(proc.stdout + proc.stderr)
    assert found, proc.stderr[-3000:]
    return float(found.group(1)) * UNITS[found.group(2)]


def size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
