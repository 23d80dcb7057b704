"""A module's run handlers joined to those of the Snakefile that uses it (jtc.pipeline.hooks):
Snakemake calls only the main Snakefile's, and jtc's guards are its handlers."""

import subprocess
import sys
from pathlib import Path

import pytest

from jtc.pipeline.hooks import join_main_workflow

SRC = Path(__file__).resolve().parents[2] / "src"


class Modifier:
    def __init__(self):
        self.main = True

    def is_main_snakefile(self):
        return self.main


class Workflow:
    """Snakemake 9's registration of handlers (snakemake/workflow.py): set by the main Snakefile
    alone, the default doing nothing."""

    def __init__(self):
        self.modifier = Modifier()
        self._onstart = self._onsuccess = self._onerror = lambda log: None

    def onstart(self, func):
        if self.modifier.is_main_snakefile():
            self._onstart = func

    def onsuccess(self, func):
        if self.modifier.is_main_snakefile():
            self._onsuccess = func

    def onerror(self, func):
        if self.modifier.is_main_snakefile():
            self._onerror = func


def recorder(calls, name, fail=False):
    def handler(log):
        calls.append((name, log))
        if fail:
            raise RuntimeError(name)

    return handler


def join_module(workflow, calls, fail=()):
    workflow.modifier.main = False  # the module's code runs
    handlers = {n: recorder(calls, f"jtc {n}", n in fail) for n in ("onstart", "onerror")}
    handlers["onsuccess"] = recorder(calls, "jtc onsuccess", "onsuccess" in fail)
    workflow.onstart(handlers["onstart"])  # its own `onstart:`: read, not kept
    joined = join_main_workflow(workflow, **handlers)
    workflow.modifier.main = True
    return joined


@pytest.mark.parametrize("host", ["none", "before", "after"])
def test_a_modules_handlers_run_with_the_hosts_set_before_or_after_it(host):
    workflow, calls = Workflow(), []
    if host == "before":
        workflow.onstart(recorder(calls, "host onstart"))
        workflow.onerror(recorder(calls, "host onerror"))
    assert join_module(workflow, calls) == ["onstart", "onsuccess", "onerror"]
    if host == "after":
        workflow.onstart(recorder(calls, "host onstart"))
        workflow.onerror(recorder(calls, "host onerror"))
    for name in ("onstart", "onsuccess", "onerror"):
        getattr(workflow, f"_{name}")("LOG")
    hosts = [("host onstart", "LOG"), ("host onerror", "LOG")] if host != "none" else []
    expected = [("jtc onstart", "LOG"), ("jtc onsuccess", "LOG"), ("jtc onerror", "LOG")]
    if hosts:
        expected = [expected[0], hosts[0], expected[1], expected[2], hosts[1]]
    assert calls == expected


def test_a_refusal_at_the_start_stops_before_the_hosts_handler_and_both_end_handlers_run():
    workflow, calls = Workflow(), []
    join_module(workflow, calls, fail=("onstart", "onerror"))
    workflow.onstart(recorder(calls, "host onstart"))
    workflow.onerror(recorder(calls, "host onerror"))
    with pytest.raises(RuntimeError, match="jtc onstart"):
        workflow._onstart(None)
    with pytest.raises(RuntimeError, match="jtc onerror"):
        workflow._onerror(None)
    assert [name for name, _ in calls] == ["jtc onstart", "jtc onerror", "host onerror"]


def test_joined_once_and_only_handlers():
    workflow, calls = Workflow(), []
    join_module(workflow, calls)
    assert join_module(workflow, calls) == []  # a second join: nothing more
    workflow._onsuccess(None)
    assert calls == [("jtc onsuccess", None)]
    with pytest.raises(ValueError, match="onfinish"):
        join_main_workflow(Workflow(), onfinish=lambda log: None)


MODULE = """from jtc.pipeline.hooks import join_main_workflow


rule made:
    output:
        "made.txt",
    shell:
        "test {config[fail]} = 0 && touch {output}"


def said(what):
    return lambda log: print(f"module {what}", flush=True)


onstart:
    print("module's own onstart block", flush=True)


if not workflow.modifier.is_main_snakefile():
    join_main_workflow(
        workflow, onstart=said("onstart"), onsuccess=said("onsuccess"), onerror=said("onerror")
    )
"""
HOST_HANDLERS = """
onstart:
    print("host onstart", flush=True)


onsuccess:
    print("host onsuccess", flush=True)


onerror:
    print("host onerror", flush=True)
"""
USE = """
module other:
    snakefile:
        "module.smk"
    config:
        config


use rule * from other
"""


@pytest.mark.workflow
@pytest.mark.parametrize("host", ["none", "before", "after"])
@pytest.mark.parametrize("fail", [0, 1])
def test_snakemake_runs_a_modules_joined_handlers_with_the_hosts(tmp_path, host, fail):
    """Snakemake itself (its parser and Workflow): the module's handlers run, and the host's
    set before its `module` statement or after its `use rule`."""
    (tmp_path / "module.smk").write_text(MODULE)
    text = {"none": USE, "before": HOST_HANDLERS + USE, "after": USE + HOST_HANDLERS}[host]
    (tmp_path / "Snakefile").write_text(f'config["fail"] = {fail}\n' + text)
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "made.txt"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == fail, proc.stderr[-3000:]
    said = [line for line in proc.stdout.splitlines() if line.startswith(("module", "host"))]
    end = "onerror" if fail else "onsuccess"
    expected = ["module onstart", f"module {end}"]
    if host != "none":
        expected = ["module onstart", "host onstart", f"module {end}", f"host {end}"]
    assert said == expected, proc.stdout + proc.stderr[-3000:]
