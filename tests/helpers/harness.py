"""The one way the tests run the workflow: the Snakemake command, what a run did or plans to do,
and the tiny project (tiny random models, a small text corpus and a config using them)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import waits
import yaml
from tiny import save_model, write_sentences

ROOT = Path(__file__).resolve().parents[2]
SNAKEFILE = ROOT / "workflow" / "Snakefile"
# seconds for one Snakemake run on an idle machine (waits.py stretches it on a busy one): a
# limit for a run that hangs, many times what the longest run of the tiny project takes
TIMEOUT = 900
# the tiny project's models: name in the config -> (tests/helpers/tiny.py kind, folder)
TINY_MODELS = {"gpt": ("gpt2", "tiny-gpt2"), "bert": ("bert-mlm", "tiny-bert")}
TEXT = "text.txt"
# a pruning block for the tiny GPT-2 (2 blocks, length 1): small calibration and measures; a
# test adds the benchmark tasks it scores
TINY_PRUNING = {
    "models": ["gpt"],
    "calibration": {"text": "windows", "windows": 4, "window_tokens": 16},
    "calibration_sentences": 20,
    "evaluation_sentences": 6,
    "selected_sentences": 8,
    "context": {"lengths": [16], "windows": 2},
    "generation": {"prompts": 2, "new_tokens": 3},
}


def snakemake_command(workdir, *args, snakefile=None, configfile=None, cores=2) -> list[str]:
    """`python -m snakemake -s SNAKEFILE -d WORKDIR --configfile CONFIG --cores N ARGS...`;
    the config is workdir/config.yaml unless another is given, cores=None leaves --cores out."""
    workdir = Path(workdir)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(snakefile or SNAKEFILE), "-d", str(workdir)]
    cmd += ["--configfile", str(configfile or workdir / "config.yaml")]
    if cores is not None:
        cmd += ["--cores", str(cores)]
    return [*cmd, *map(str, args)]


def snakemake_env(env=None) -> dict[str, str]:
    """The environment of a run: this one (with `env`'s variables on top), hash seed fixed."""
    return {**os.environ, **(env or {}), "PYTHONHASHSEED": "0"}


def run_snakemake(
    workdir,
    *args,
    check=True,
    snakefile=None,
    env=None,
    configfile=None,
    cores=2,
    timeout=TIMEOUT,
    start=subprocess.Popen,
) -> subprocess.CompletedProcess:
    """Run Snakemake on `workdir` and wait for it (at most `timeout` seconds on an idle machine,
    stretched on a busy one: waits.py). With check (the default), a failed run raises an
    AssertionError showing the command and the tail of its output. `start` starts the process
    (subprocess.Popen; early.Early.popen for a run in the background)."""
    cmd = snakemake_command(workdir, *args, snakefile=snakefile, configfile=configfile, cores=cores)
    what = f"snakemake to finish: {' '.join(cmd)}"
    proc = waits.run(cmd, timeout, what, start=start, text=True, env=snakemake_env(env))
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake failed (exit {proc.returncode}): {' '.join(cmd)}\n"
            f"--- stdout (tail) ---\n{proc.stdout[-3000:]}\n"
            f"--- stderr (tail) ---\n{proc.stderr[-6000:]}"
        )
    return proc


def run_snakemake_all(runs: dict, workers: int = 2) -> dict:
    """Several runs of run_snakemake, `workers` at a time: {key: (workdir, [args], {options})}
    -> {key: its CompletedProcess}. For runs that only plan (a bad config refused while
    planning): each is one busy process, so two cores plan two configs in the time of one."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {
            key: pool.submit(run_snakemake, workdir, *args, **options)
            for key, (workdir, args, options) in runs.items()
        }
        return {key: future.result() for key, future in futures.items()}


def selected(request, test: str, param: str) -> list:
    """The values of the parameter `param` of the test function `test` in the tests this
    session runs (after -k and the markers): what a fixture that prepares its cases at once
    needs to prepare."""
    return [
        item.callspec.params[param]
        for item in request.session.items
        if getattr(item, "originalname", None) == test and hasattr(item, "callspec")
    ]


def start_snakemake(
    workdir, *args, snakefile=None, env=None, configfile=None, cores=2, **popen
) -> subprocess.Popen:
    """Start Snakemake without waiting (the same command and environment as run_snakemake);
    `popen` goes to subprocess.Popen (stdout, stderr, start_new_session, ...)."""
    cmd = snakemake_command(workdir, *args, snakefile=snakefile, configfile=configfile, cores=cores)
    return subprocess.Popen(cmd, env=snakemake_env(env), **popen)


def _text(output) -> str:
    if output is None:
        return ""
    return output.decode(errors="replace") if isinstance(output, bytes) else output


def _output(proc) -> str:
    if isinstance(proc, str):
        return proc
    return _text(proc.stdout) + _text(proc.stderr)


JOB_LINE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")


def rules_run(proc) -> dict[str, int]:
    """{rule name: jobs} of a run (of a dry run: the jobs it plans), from its output."""
    names = re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):", _output(proc), re.M)
    return {n: names.count(n) for n in set(names)} if names else {}


def planned_jobs(proc) -> list[tuple[str, dict[str, str]]]:
    """[(rule, {wildcard: value})] of every job a (dry) run lists, in the order listed."""
    jobs: list[tuple[str, dict[str, str]]] = []
    for line in _output(proc).splitlines():
        start = JOB_LINE.match(line)
        if start:
            jobs.append((start.group(1), {}))
        elif jobs and line.strip().startswith("wildcards: "):
            pairs = line.strip().removeprefix("wildcards: ").split(", ")
            jobs[-1][1].update(pair.split("=", 1) for pair in pairs)
    return jobs


def planned(proc, wildcard: str) -> set[str]:
    """The values a wildcard (model, corpus, method...) takes over a (dry) run's jobs."""
    return {w[wildcard] for _, w in planned_jobs(proc) if wildcard in w}


def tiny_config(project, models=("gpt", "bert"), **changes) -> dict:
    """The tiny project's config: its text corpus `mini` and the named tiny models; `changes`
    replace top-level keys."""
    project = Path(project)
    config = {
        "seed": 0,
        "sizes": {"train": 48, "validation": 16},
        "positions_per_sentence": 1,  # a row per sentence, as the tests count them
        "validation_fraction": 0.3,
        "batch_size": 8,
        "max_tokens": 24,
        "threads": 1,
        "corpora": {"mini": {"source": "text_file", "path": str(project / TEXT)}},
        "models": {name: {"source": str(project / TINY_MODELS[name][1])} for name in models},
    }
    config.update(changes)
    return config


def write_config(workdir, config) -> Path:
    """Write `config` to workdir/config.yaml (the config run_snakemake uses)."""
    path = Path(workdir) / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def read_config(workdir) -> dict:
    return yaml.safe_load((Path(workdir) / "config.yaml").read_text())


def make_tiny_project(
    folder, models=("gpt", "bert"), sentences=200, seed=0, layers=2, width=16, **changes
) -> Path:
    """A folder with tiny random models (2 layers of width 16), a text corpus of `sentences`
    lines and a config.yaml using them (tiny_config with `changes`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in models:
        kind, subfolder = TINY_MODELS[name]
        save_model(kind, folder / subfolder, layers=layers, width=width)
    write_sentences(folder / TEXT, sentences, seed=seed)
    write_config(folder, tiny_config(folder, models, **changes))
    return folder


def link_inputs(project, workdir) -> Path:
    """Symlink the tiny project's model folders and text into `workdir` (made if missing)."""
    project, workdir = Path(project), Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    for name in [folder for _, folder in TINY_MODELS.values()] + [TEXT]:
        if (project / name).exists() and not (workdir / name).exists():
            os.symlink(project / name, workdir / name)
    return workdir


def copy_run(finished, workdir, config=None) -> Path:
    """A copy of a finished run that can be changed freely: its results and Snakemake's record
    of how they were made (.snakemake) copied with their times, the inputs linked, and its
    config (or `config`) written. The config's paths still name the original inputs, so the copy
    is up to date until its config changes."""
    finished, workdir = Path(finished), Path(workdir)
    link_inputs(finished, workdir)
    for name in ("results", ".snakemake"):
        if (finished / name).exists():
            shutil.copytree(finished / name, workdir / name, symlinks=True)
    write_config(workdir, read_config(finished) if config is None else config)
    return workdir


def snapshot(folder) -> dict[str, tuple[int, int]]:
    """{relative path: (size, mtime_ns)} of every file under a folder's results/."""
    files = snapshot_files(Path(folder) / "results")
    return {f"results/{name}": stat for name, stat in files.items()}


def snapshot_files(folder) -> dict[str, tuple[int, int]]:
    """{path relative to `folder`: (size, mtime_ns)} of every file under it."""
    folder = Path(folder)
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def python_example(path, heading):
    """The Python example of a Markdown file after its paragraph that starts with `heading`."""
    text = path.read_text()
    start = text.index("```python", text.index(heading)) + len("```python")
    return text[start : text.index("```", start)]
