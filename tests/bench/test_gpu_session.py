"""The GPU session (bench/gpu_session.sh, bench/gpu_carry.sh): bench/README.md's device calls
are short commands of steps the script knows, in the order they must run; the script refuses an
unknown step or deadline and a missing carried folder before it touches anything; both scripts
pass shellcheck where it is installed. The session itself is rehearsed by hand (bench/README.md:
`--rehearse`, about 5 minutes on 2 cores)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_session.sh"
DEVICE_LIMIT = 2000  # characters of one device call's command line


def session(*args, tmp_path, **env):
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "OUT": str(tmp_path / "out"), **env},
        timeout=60,
    )


def test_readme_device_calls_are_the_scripts_steps_in_order():
    text = (ROOT / "bench" / "README.md").read_text()
    section = text[text.index("**On the GPU machine**") : text.index("**Device time.**")]
    calls = re.findall(r"^(bash bench/gpu_session\.sh [^#\n]*?)\s*(?:#.*)?$", section, re.M)
    assert [call.split()[2] for call in calls] == ["tests", "qwen", "1.7b", "7b"]
    assert all(len(call) <= DEVICE_LIMIT for call in calls)
    steps = re.search(r"^case \$STEP in\n(.*?)^esac", SCRIPT.read_text(), re.M | re.S).group(1)
    assert re.findall(r"^\s+([\w.]+)\) DEFAULT_BUDGET=(\d+)", steps, re.M) == [
        ("tests", "210"),
        ("1.7b", "300"),
        ("7b", "330"),
        ("qwen", "300"),
    ]


@pytest.mark.parametrize("args", [(), ("train",), ("tests", "3m"), ("7b", "60", "--fast")])
def test_unknown_steps_and_deadlines_are_refused(tmp_path, args):
    proc = session(*args, tmp_path=tmp_path)
    assert proc.returncode == 2
    assert "usage: bash bench/gpu_session.sh tests|1.7b|7b|qwen" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_missing_carried_folder_is_named_with_the_script_that_makes_it(tmp_path):
    proc = session("tests", tmp_path=tmp_path, JTC_CARRY=str(tmp_path / "nowhere"))
    assert proc.returncode == 1
    assert f"no carried folder at {tmp_path / 'nowhere'}" in proc.stderr
    assert "bench/gpu_carry.sh" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_scripts_pass_shellcheck():
    scripts = [SCRIPT, ROOT / "bench" / "gpu_carry.sh"]
    proc = subprocess.run(["shellcheck", *map(str, scripts)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
