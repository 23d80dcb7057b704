"""Every output knows what it is (jtc.files.stamps): files written in a workflow job carry a stamp
naming the output and the settings it was made with; readers refuse a file read as another
output; the workflow refuses, before a run, outputs made with other settings; damage anywhere
in a Parquet file that changes a value is an error (column digests)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jtc.data.states import StateWriter, read_site
from jtc.files import stamps
from jtc.files.io import CorruptFileError, atomic_dir, read_table, write_table
from jtc.files.planned import (
    PlannedJob,
    damaged_outputs,
    leftovers,
    replaced_outputs,
    stale_outputs,
)
from jtc.pipeline.config import command_line_config, merged
from jtc.shortcuts.maps import load_map, save_maps


@pytest.fixture
def in_job(tmp_path, monkeypatch):
    """A fake workflow job in tmp_path: start(rule, outputs, **params) registers it."""
    monkeypatch.chdir(tmp_path)

    def start(rule, outputs, wildcards=None, **params):
        stamps.begin(rule, wildcards or {"model": "m", "corpus": "c"}, params, outputs)

    yield start
    stamps.end()


def small_table():
    return pa.table(
        {
            "method": ["id", "mat", "mat", None],
            "layer": pa.array([0, 1, 2, 3], pa.int32()),
            "score": [0.5, float("nan"), None, 1.25],
        }
    )


def same(a: pa.Table, b: pa.Table) -> bool:
    """The same columns and values (NaN equal to NaN), whatever the metadata."""
    return a.column_names == b.column_names and repr(a.to_pydict()) == repr(b.to_pydict())


def test_a_table_written_in_a_job_names_itself_and_is_refused_under_another_name(in_job):
    r2, params = "results/metrics/m/c/r2.parquet", "results/metrics/m/c/parameters.parquet"
    in_job("r2_table", [r2], seed=1)
    write_table(small_table(), r2)
    stamps.end()
    assert stamps.read_stamp(r2)["path"] == "metrics/m/c/r2.parquet"
    assert same(read_table(r2), small_table())
    shutil.copy(r2, params)  # swapped
    with pytest.raises(CorruptFileError, match="holds results/metrics/m/c/r2.parquet") as err:
        read_table(params)
    assert f"rm {params}" in str(err.value)
    # a results folder moved elsewhere still reads
    shutil.copytree("results", "moved/results")
    assert same(read_table("moved/" + r2), small_table())


def test_a_map_copied_over_another_methods_is_refused(in_job):
    mat, rrr = "results/maps/m/c/mat.safetensors", "results/maps/m/c/rrr.safetensors"
    in_job("fit_map", [mat, rrr])
    save_maps(mat, {0: {1: np.eye(3)}}, {"method": "mat"})
    save_maps(rrr, {0: {1: {"down.weight": np.ones((1, 3)), "up.weight": np.ones((3, 1))}}}, {})
    stamps.end()
    assert load_map(rrr, 0, 1).rank == 1
    shutil.copy(mat, rrr)
    with pytest.raises(CorruptFileError, match="holds results/maps/m/c/mat.safetensors"):
        load_map(rrr, 0, 1)


def test_a_states_file_moved_between_folders_is_refused_naming_the_folder(in_job):
    train, valid = "results/hidden/m/c/train", "results/hidden/m/c/validation"
    in_job("extract_hidden", [train, valid])
    for folder, seed in ((train, 0), (valid, 1)):
        with atomic_dir(folder) as tmp:
            writer = StateWriter(tmp / "layer_000.parquet", 4, "float32", 256)
            states = np.random.default_rng(seed).normal(size=(5, 4))
            writer.write(np.arange(5), np.zeros(5, np.int32), states)
            writer.close()
            (tmp / "info.json").write_text('{"num_layers": 0}')
    stamps.end()
    assert stamps.read_stamp(train)["path"] == "hidden/m/c/train"  # the folder's stamp.json
    read_site(f"{valid}/layer_000.parquet")
    # its JSON files are in its stamp: an edited info.json is found while planning
    Path(f"{train}/info.json").write_text("{}")
    (problem,) = damaged_outputs([train, valid])
    assert f"{train}/info.json is not the file its job wrote" in problem
    shutil.copy(f"{train}/layer_000.parquet", f"{valid}/layer_000.parquet")
    with pytest.raises(CorruptFileError, match=f"rm -r {valid}"):
        read_site(f"{valid}/layer_000.parquet")


def test_damage_anywhere_in_a_table_is_an_error_or_changes_nothing(tmp_path):
    """Every byte of a small Parquet file flipped in turn: the read fails, or returns exactly
    what was written (page checksums cover the pages; the column digests cover the rest:
    page headers, the footer)."""
    path = tmp_path / "t.parquet"
    table = small_table()
    write_table(table, path)
    data = path.read_bytes()
    silent = []
    for offset in range(len(data)):
        damaged = bytearray(data)
        damaged[offset] ^= 0xFF
        path.write_bytes(bytes(damaged))
        try:
            got = read_table(path)
        except (CorruptFileError, FileNotFoundError):
            continue
        if not same(got, table):
            silent.append(offset)
    assert not silent, f"a flipped byte at offsets {silent[:10]} changed values unnoticed"


def test_column_digests_do_not_depend_on_how_rows_were_written(tmp_path):
    """A file streamed in pieces (StateWriter) checks against a whole read."""
    writer = StateWriter(tmp_path / "s.parquet", 3, "float16", 256)
    rng = np.random.default_rng(0)
    for start in (0, 300, 700):
        writer.write(
            np.arange(start, start + 300), np.zeros(300, np.int32), rng.normal(size=(300, 3))
        )
    writer.close()
    ids, states = read_site(tmp_path / "s.parquet")
    assert ids.tolist() == list(range(300)) + list(range(300, 600)) + list(range(700, 1000))
    assert states.shape == (900, 3)


def test_the_run_refuses_outputs_made_with_other_settings_and_names_what_it_replaces(in_job):
    r2 = "results/metrics/m/c/r2.parquet"
    in_job("r2_table", [r2], code="abc", methods=["id", "mat"])
    write_table(small_table(), r2)
    stamps.end()
    wildcards = {"model": "m", "corpus": "c"}

    def job(runs, **params):
        return PlannedJob("r2_table", wildcards, params, [r2], runs)

    # used as it is: fine with the same settings, refused with others
    assert stale_outputs([job(False, code="abc", methods=["id", "mat"])]) == []
    (problem,) = stale_outputs([job(False, code="abc", methods=["id"])])
    assert "made with other settings" in problem and f"rm {r2}" in problem
    # remade: named when the config changed, not for new code alone
    assert replaced_outputs([job(True, code="new", methods=["id", "mat"])]) == []
    assert replaced_outputs([job(True, code="abc", methods=["id"])]) == [r2]
    # an output with no stamp (an older jtc, or not made by the workflow) is refused too
    Path("results/metrics/m/c/prediction.parquet").write_bytes(Path(r2).read_bytes()[:0])
    unstamped = PlannedJob(
        "prediction_table", wildcards, {}, ["results/metrics/m/c/x.parquet"], False
    )
    write_table(small_table(), "results/metrics/m/c/x.parquet")  # outside a job: no stamp
    (problem,) = stale_outputs([unstamped])
    assert "carries no stamp" in problem


def test_a_param_waiting_for_a_checkpoint_is_no_settings_change(in_job):
    """The model cache deleted to rebuild it (a damaged one): while the run plans, replace_parts'
    jump layers (read off the cache's info.json, a checkpoint the run makes again) are
    Snakemake's placeholder, whose digest differs from the stamp's although no setting changed.
    Its output is not named as replaced; a param that did change still is."""
    from snakemake.common.tbdstring import TBDString

    from jtc.pipeline.planning import replaced_note

    replaced = "results/submodules/m/c/replaced.parquet"
    in_job("replace_parts", [replaced], code="abc", jumps=[4, 8], sentences=50)
    write_table(small_table(), replaced)
    stamps.end()

    def job(**params):
        return PlannedJob("replace_parts", {"model": "m", "corpus": "c"}, params, [replaced], True)

    waiting = job(code="abc", jumps=TBDString(), sentences=50)
    assert replaced_outputs([waiting]) == []
    assert replaced_note([waiting]) is None
    nested = job(code="abc", jumps={"layers": [TBDString()]}, sentences=50)
    assert replaced_outputs([nested]) == []
    assert replaced_outputs([job(code="abc", jumps=[4, 8], sentences=60)]) == [replaced]
    assert replaced_outputs([job(code="abc", jumps=[4, 8], sentences=50)]) == []


def test_outputs_of_another_config_are_listed(in_job):
    made = ["results/maps/m/c/mat.safetensors", "results/maps/m/c/rrr.safetensors"]
    in_job("fit_map", made)
    for path in made:
        save_maps(path, {0: {1: np.eye(2)}}, {})
    with atomic_dir("results/hidden/m/c/train") as tmp:
        write_table(small_table(), tmp / "layer_000.parquet")
    stamps.end()
    planned = [made[0], "results/hidden/m/c/validation"]
    assert sorted(leftovers("results", planned)) == ["results/hidden/m/c/train", made[1]]


def test_config_on_the_command_line_alone_sets_keys_of_the_default_file(tmp_path):
    default = tmp_path / "config.yaml"
    default.write_text("seed: 0\nsizes:\n  train: 10\n  validation: 5\nmodels: {a: {source: x}}\n")
    # --config alone: Snakemake left only the keys; they go on top of the default file
    got = command_line_config({"seed": 3}, default, {"seed": 3}, files_given=False)
    assert got == {
        "seed": 3,
        "sizes": {"train": 10, "validation": 5},
        "models": {"a": {"source": "x"}},
    }
    nested = command_line_config({}, default, {"sizes": {"train": 20}}, files_given=False)
    assert nested["sizes"] == {"train": 20, "validation": 5}
    # with --configfile, the config Snakemake built stands; nothing given, nothing changes
    assert command_line_config({"seed": 3}, default, {"seed": 3}, files_given=True) == {"seed": 3}
    assert command_line_config({"seed": 0}, default, {}, files_given=False) == {"seed": 0}
    assert merged({"a": {"b": 1, "c": 2}}, {"a": {"b": 5}, "d": [1]}) == {
        "a": {"b": 5, "c": 2},
        "d": [1],
    }


def test_a_csv_or_figure_edited_or_copied_over_another_is_found_while_planning(in_job):
    """Outputs with no room for a stamp (CSV, HTML, figures, Markdown) get a record with the
    sha256 of the whole file, checked while a run plans."""
    csv, png = "results/metrics/m/c/r2.csv", "results/figures/m/c/r2.png"
    in_job("r2_table", [csv, png])
    for path, text in ((csv, "a,b\n1,2\n"), (png, "not really a figure")):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    stamps.record_outputs([csv, png])
    stamps.end()
    assert Path("results/.stamps/metrics/m/c/r2.csv.json").is_file()
    assert damaged_outputs([csv, png, "results/metrics/m/c/missing.csv"]) == []
    Path(csv).write_text("a,b\n1,3\n")  # one value edited
    shutil.copy(png, "results/figures/m/c/prediction.png")  # no record: not checked
    (problem,) = damaged_outputs([csv, png, "results/figures/m/c/prediction.png"])
    assert problem.startswith(f"{csv} is not the file its job wrote") and f"rm {csv}" in problem
    # a copy of a file together with its record is named by what the record says it is
    shutil.copy(png, "results/figures/m/c/r2_copy.png")
    shutil.copy(
        "results/.stamps/figures/m/c/r2.png.json", "results/.stamps/figures/m/c/r2_copy.png.json"
    )
    (problem,) = damaged_outputs(["results/figures/m/c/r2_copy.png"])
    assert "it holds results/figures/m/c/r2.png" in problem


def test_one_output_of_a_job_put_back_from_a_run_with_other_settings_is_found(in_job):
    """Its siblings (the CSV beside a table) still say which settings the job had."""
    table, csv = "results/metrics/m/c/r2.parquet", "results/metrics/m/c/r2.csv"
    for tau, folder in ((1, "other"), (2, ".")):
        in_job("r2_table", [f"{folder}/{table}", f"{folder}/{csv}"], tau=tau)
        write_table(small_table(), f"{folder}/{table}", csv=True)
        stamps.record_outputs([f"{folder}/{csv}"])
        stamps.end()
    assert damaged_outputs([table, csv]) == []
    shutil.copy(f"other/{table}", table)
    (problem,) = damaged_outputs([table, csv])
    assert problem.startswith(f"{table} was made by the same job as {csv} but with other settings")
