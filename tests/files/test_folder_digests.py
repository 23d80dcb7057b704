"""Every file of a folder output is recorded in its stamp.json (size, mtime_ns, sha256;
jtc.files.digests): a change is found while the workflow plans when it changes the size or the
mtime (the sha256 is computed only then, and a file whose bytes are the same passes), and in
any case by the check that reads the folder whole (`verify_folders`, `snakemake pruned`) or, for
a cached model, by the load (its manifest). Folders stamped by an older jtc (JSON files only)
are read as before."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from damage import flip_byte
from tiny import save_model

from jtc.files import digests, stamps
from jtc.files.io import CorruptFileError, atomic_dir
from jtc.files.planned import damaged_outputs, leftovers
from jtc.model.cache import cache_model, load_cached

PRUNED = "results/pruned/m/c"
WEIGHTS = bytes(range(256)) * 64  # 16 KiB standing in for model.safetensors


@pytest.fixture
def in_job(tmp_path, monkeypatch):
    """A fake workflow job in tmp_path: start(rule, outputs) registers it."""
    monkeypatch.chdir(tmp_path)

    def start(rule, outputs, wildcards=None):
        stamps.begin(rule, wildcards or {"model": "m", "corpus": "c"}, {"seed": 1}, outputs)

    yield start
    stamps.end()


@pytest.fixture
def hashed(monkeypatch):
    """The files whose sha256 the checks compute, by name, in order."""
    seen: list[str] = []
    real = digests.file_sha256

    def counting(path):
        seen.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(digests, "file_sha256", counting)
    monkeypatch.setattr(digests, "_hashed", {})
    return seen


def write_pruned_folder(in_job, folder=PRUNED):
    """A folder output as export_pruned writes it: weights, a config, a sub-folder."""
    in_job("export_pruned", [folder])
    with atomic_dir(folder) as tmp:
        (tmp / "model.safetensors").write_bytes(WEIGHTS)
        (tmp / "config.json").write_text('{"num_hidden_layers": 1}')
        (tmp / "extra").mkdir()
        (tmp / "extra/notes.txt").write_text("kept")
    stamps.end()
    return Path(folder)


def flip(path: Path, offset: int = 1000, keep_mtime: bool = False) -> None:
    flip_byte(path, offset, keep_mtime)


def test_every_file_of_a_folder_output_is_recorded_with_size_mtime_and_sha256(in_job):
    folder = write_pruned_folder(in_job)
    files = json.loads((folder / stamps.FOLDER_STAMP).read_text())["files"]
    assert sorted(files) == ["config.json", "extra/notes.txt", "model.safetensors"]
    for name, entry in files.items():
        stat = (folder / name).stat()  # renaming the folder into place kept them
        assert entry == {
            "bytes": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "sha256": digests.file_sha256(folder / name),
        }
    # a file inside a pruned checkpoint belongs to the folder, which is rebuilt whole
    assert stamps.output_of(folder / "model.safetensors") == folder
    hint = stamps.rebuild_hint(folder / "model.safetensors")
    assert f"(rm -r {PRUNED}, then `snakemake pruned`, or `snakemake {PRUNED}` for it alone" in hint
    assert "`snakemake results/models/m` makes it alone" in stamps.rebuild_hint(
        "results/models/m/info.json"
    )  # (and the same command, which makes it again, as `all` does)
    # and it is one output, not a leftover file, for what lists the outputs of other configs
    assert leftovers("results", [PRUNED]) == []


def test_planning_reads_sizes_and_hashes_only_json_and_files_whose_mtime_changed(in_job, hashed):
    folder = write_pruned_folder(in_job)
    hashed.clear()
    assert damaged_outputs([PRUNED]) == []
    assert hashed == ["config.json"]  # the weights are not read
    assert damaged_outputs([PRUNED]) == [] and hashed == ["config.json"]  # once a process
    # the same bytes with a new mtime (a copy without its times): hashed, and fine
    weights = folder / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    hashed.clear()
    assert damaged_outputs([PRUNED]) == [] and damaged_outputs([PRUNED]) == []
    assert hashed == ["model.safetensors"]
    # its bytes are those recorded: it is given the recorded mtime back, and not read again
    recorded = json.loads((folder / stamps.FOLDER_STAMP).read_text())["files"]
    assert weights.stat().st_mtime_ns == recorded["model.safetensors"]["mtime_ns"]
    digests._hashed.clear()  # (a new process)
    hashed.clear()
    assert damaged_outputs([PRUNED]) == [] and hashed == ["config.json"]


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("flip", "its sha256 differs from the one recorded when its job wrote it (its mtime too)"),
        ("truncate", f"it has {len(WEIGHTS) // 2} bytes, {len(WEIGHTS)} when its job wrote it"),
        ("delete", "it is missing"),
    ],
)
def test_a_damaged_file_of_a_folder_output_is_refused_while_planning(in_job, damage, said):
    folder = write_pruned_folder(in_job)
    weights = folder / "model.safetensors"
    if damage == "flip":
        flip(weights)
    elif damage == "truncate":
        weights.write_bytes(WEIGHTS[: len(WEIGHTS) // 2])
    else:
        weights.unlink()
    (problem,) = damaged_outputs([PRUNED])
    assert f"{weights} is not the file its job wrote (damaged, edited or missing: {said}" in problem
    assert f"delete the folder {PRUNED} and rerun the workflow (rm -r {PRUNED}" in problem
    with pytest.raises(CorruptFileError, match=f"rm -r {PRUNED}"):
        stamps.verify_folders([PRUNED])


def test_a_byte_flipped_with_its_mtime_put_back_is_found_by_the_full_check(in_job, hashed):
    folder = write_pruned_folder(in_job)
    assert damaged_outputs([PRUNED]) == []  # planned (and hashed) once before the damage
    flip(folder / "model.safetensors", keep_mtime=True)
    assert damaged_outputs([PRUNED]) == []  # the size and mtime are those recorded
    hashed.clear()
    with pytest.raises(CorruptFileError) as raised:
        stamps.verify_folders([PRUNED])
    assert "model.safetensors is not the file its job wrote" in str(raised.value)
    assert "(its size and mtime are those recorded)" in str(raised.value)
    assert f"rm -r {PRUNED}" in str(raised.value)
    assert "model.safetensors" in hashed  # read now, not taken from this process's memory


def test_a_folder_copied_with_new_times_passes_and_one_copied_with_them_is_not_reread(
    in_job, hashed
):
    write_pruned_folder(in_job, "elsewhere/results/pruned/m/c")  # a finished run elsewhere
    shutil.copytree("elsewhere/results", "results", copy_function=shutil.copyfile)  # new times
    hashed.clear()
    assert damaged_outputs([PRUNED]) == []  # new mtimes, the same bytes
    assert "model.safetensors" in hashed
    digests._hashed.clear()  # (a new process)
    hashed.clear()
    assert damaged_outputs([PRUNED]) == [] and hashed == ["config.json"]  # the times restored
    shutil.rmtree("results")
    shutil.copytree("elsewhere/results", "results")  # copy2: the times kept
    digests._hashed.clear()  # (a new process)
    hashed.clear()
    assert damaged_outputs([PRUNED]) == [] and hashed == ["config.json"]
    stamps.verify_folders([PRUNED])  # the full check of the copy: the same bytes


def test_a_folder_stamped_by_an_older_jtc_is_read_as_before(in_job):
    """A stamp.json whose files are {JSON file: sha256} (an older jtc's): its JSON files are
    checked, the others were not recorded and pass."""
    folder = write_pruned_folder(in_job)
    stamp_file = folder / stamps.FOLDER_STAMP
    stamp = json.loads(stamp_file.read_text())
    stamp["files"] = {"config.json": digests.file_sha256(folder / "config.json")}
    stamp_file.write_text(json.dumps(stamp))
    flip(folder / "model.safetensors")
    assert damaged_outputs([PRUNED]) == []
    stamps.verify_folders([PRUNED])
    (folder / "config.json").write_text('{"num_hidden_layers": 2}')
    (problem,) = damaged_outputs([PRUNED])
    assert "config.json is not the file its job wrote" in problem


def test_a_cached_models_weights_are_checked_by_planning_and_by_the_load(in_job, tmp_path):
    """The cached model of a workflow job: stamp.json for planning, manifest.json for the
    load. A byte flipped with the mtime put back passes planning; the load refuses it, naming
    the folder to delete and the snakemake command that caches it again."""
    source = save_model("gpt2", tmp_path / "src", layers=1, width=8)
    folder = "results/models/m"
    in_job("resolve_model", [folder], {"model": "m"})
    cache_model("m", {"source": str(source)}, folder)
    stamps.end()
    files = json.loads(Path(folder, stamps.FOLDER_STAMP).read_text())["files"]
    assert {"model.safetensors", "manifest.json", "info.json"} <= set(files)
    assert damaged_outputs([folder]) == []
    weights = Path(folder, "model.safetensors")
    flip(weights, offset=weights.stat().st_size - 3, keep_mtime=True)
    assert damaged_outputs([folder]) == []
    with pytest.raises(CorruptFileError) as raised:
        load_cached(folder)
    message = str(raised.value)
    assert f"{weights} is damaged" in message and f"rm -r {folder}" in message
    assert f"`snakemake {folder}`" in message and "the same snakemake command" not in message
    flip(weights, offset=weights.stat().st_size - 3)  # put right, with a new mtime
    assert damaged_outputs([folder]) == []  # hashed: the bytes recorded
    load_cached(folder)


TASKS = "results/benchmarks/tasks"


def test_a_task_file_edited_with_its_size_and_mtime_kept_is_refused_by_run_benchmarks(in_job):
    """One PIQA gold label changed, still valid JSON, the size and mtime put back: planning's
    quick check cannot see it; run_benchmarks hashes every task file before it loads the model
    and refuses, naming the file and the command that makes the folder again (`all` need not:
    the tasks are made by `snakemake benchmarks`)."""
    from jtc.measures.tasks import write_tasks
    from jtc.stages.benchmarks import run_benchmarks

    in_job("benchmark_tasks", [TASKS], {})
    with atomic_dir(TASKS) as tmp:
        write_tasks(tmp, ["piqa"], 2, located=TASKS)
    stamps.end()
    documents = Path(TASKS, "piqa.jsonl")
    text, stat = documents.read_text(), documents.stat()
    first = text.index('"label": ')
    label = text[first + 9]
    edited = text[: first + 9] + ("1" if label == "0" else "0") + text[first + 10 :]
    documents.write_text(edited)
    os.utime(documents, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert [json.loads(line) for line in edited.splitlines()]  # still valid JSON lines
    assert damaged_outputs([TASKS]) == []  # the size and mtime are those recorded

    def benchmarks():
        run_benchmarks(
            "results/models/none",  # never loaded: the tasks are checked first
            "maps.safetensors",
            "selection.parquet",
            TASKS,
            "out.parquet",
            settings={"tasks": ["piqa"], "shots": {}, "limit": 2},
            measured={"variants": ["drop"], "export_selection": "best", "also_measure": []},
            batch_size=1,
            seed=0,
            threads=1,
        )

    with pytest.raises(CorruptFileError) as raised:
        benchmarks()
    message = str(raised.value)
    assert f"{documents} is not the file its job wrote" in message
    assert "(its size and mtime are those recorded)" in message
    assert f"(rm -r {TASKS}, then `snakemake benchmarks`, or `snakemake {TASKS}`" in message
    assert not Path("out.parquet").exists()
