"""Depth pruning exported as a checkpoint (jtc.pruning.checkpoint, `jtc prune`): on tiny random
Llama, Qwen2 and GPT-2 models, the written folder loads with plain transformers and reproduces
the pruned model computed with hooks on the original (block `start`'s MLP output times the
transform, the removed blocks skipped); the architectures and spans that cannot be pruned are
refused by name, and nothing is written then."""

import json
import os
import shutil
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from architectures import COMMON
from pruneable import LAYERS, TOKENIZER, make
from tiny import SENTENCES, make_tokenizer
from transformers import AutoModelForCausalLM

from jtc.cli import main
from jtc.files.io import CorruptFileError
from jtc.model.adapters import UnsupportedArchitecture
from jtc.model.cache import cache_model, load_cached
from jtc.model.discover import find_adapter
from jtc.model.manifest import model_fingerprint
from jtc.pruning import checkpoint
from jtc.pruning.checkpoint import export, prune_blocks, write_pruned
from jtc.pruning.map_file import SpanMapWriter, load_span_map
from jtc.pruning.mlp_fold import fold_problem
from jtc.shortcuts.maps import save_maps

KINDS = ["llama", "qwen2", "gpt2"]
START, LENGTH = 2, 2  # blocks 3 and 4 of 5 removed; the transform folded into block 2


def random_transform(width: int = COMMON["hidden_size"], seed: int = 0) -> np.ndarray:
    """A (d, d) weight far from the identity and from symmetric, so that a transpose shows."""
    rng = np.random.default_rng(seed)
    return (np.eye(width) + rng.normal(size=(width, width)) / np.sqrt(width)).astype(np.float32)


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    """{kind: a cached model folder (jtc.model.cache)} of each tiny model, made on first use."""
    folders = {}

    def get(kind: str):
        if kind not in folders:
            work = tmp_path_factory.mktemp(kind)
            model, _ = make(kind)
            model.save_pretrained(work / "src")
            TOKENIZER.save_pretrained(work / "src")
            cache_model(kind, {"source": str(work / "src")}, work / "m")
            folders[kind] = work / "m"
        return folders[kind]

    return get


def batch():
    return TOKENIZER(SENTENCES[:4], return_tensors="pt", padding=True)


def hooked(model, adapter, start, length, weight, run):
    """run(model) on the original model made to compute the pruned one with hooks: block
    `start`'s MLP output times weight.T, blocks start+1..start+length skipped (and Qwen2's
    layer_types, which its forward reads by position in the block list, those of the blocks
    kept). Without a KV cache: its layers follow the config."""
    blocks = adapter.blocks(model)
    handles = []
    if weight is not None:
        mlp = adapter.part("ffn").modules(blocks[start - 1])[1]
        w = torch.from_numpy(weight).float()
        handles.append(mlp.register_forward_hook(lambda _m, _a, out: out @ w.T))
    kept = [b for b in range(len(blocks)) if not start <= b < start + length]
    old = adapter.swap_blocks(model, [blocks[b] for b in kept])
    layer_types = getattr(model.config, "layer_types", None)
    if layer_types is not None:
        model.config.layer_types = [layer_types[b] for b in kept]
    try:
        with torch.no_grad():
            return run(model)
    finally:
        adapter.swap_blocks(model, old)
        if layer_types is not None:
            model.config.layer_types = layer_types
        for handle in handles:
            handle.remove()


def logits(model):
    with torch.no_grad():
        return model(**batch(), use_cache=False).logits


def greedy(model, tokens: int = 6, use_cache: bool = True):
    with torch.no_grad():
        out = model.generate(
            **TOKENIZER(SENTENCES[:1], return_tensors="pt"),
            max_new_tokens=tokens,
            do_sample=False,
            pad_token_id=0,
            use_cache=use_cache,
        )
    return out.tolist()


def greedy_without_cache(model):
    return greedy(model, use_cache=False)


def relative_error(got, want) -> float:
    return float((got - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("variant", ["replaceme", "drop"])
@pytest.mark.parametrize("kind", KINDS)
def test_export_reproduces_the_hooked_pruned_model(kind, variant, cached, tmp_path):
    weight = random_transform() if variant == "replaceme" else None
    folder = write_pruned(
        cached(kind),
        tmp_path / "out",
        start=START,
        length=LENGTH,
        variant=variant,
        transform=weight,
    )
    assert folder == tmp_path / "out"
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "pruning.json"} <= names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl"))]  # no pickles
    pruned = AutoModelForCausalLM.from_pretrained(folder).eval()
    original, _, info = load_cached(cached(kind))
    adapter = find_adapter(original, "causal")
    assert len(adapter.blocks(pruned)) == pruned.config.num_hidden_layers == LAYERS - LENGTH
    if kind == "qwen2":
        types_before = original.config.layer_types
        kept = types_before[:START] + types_before[START + LENGTH :]
        assert kept != types_before[: LAYERS - LENGTH]  # the logits would show a wrong choice
        assert pruned.config.layer_types == kept
    want = hooked(original, adapter, START, LENGTH, weight, logits)
    assert relative_error(logits(pruned), want) < 1e-4
    dropped = hooked(original, adapter, START, LENGTH, None, logits)
    if variant == "replaceme":  # the transform changes what the pruned model computes
        assert relative_error(dropped, want) > 1e-2
        transposed = hooked(original, adapter, START, LENGTH, weight.T.copy(), logits)
        assert relative_error(transposed, want) > 1e-2
    # generate runs on the folder with its KV cache, and picks what the hooked original picks
    assert greedy(pruned) == hooked(original, adapter, START, LENGTH, weight, greedy_without_cache)
    done = json.loads((folder / "pruning.json").read_text())
    assert done["variant"] == variant and (done["start"], done["length"]) == (START, LENGTH)
    assert done["blocks_removed"] == [3, 4]
    assert (done["num_layers_before"], done["num_layers_after"]) == (LAYERS, LAYERS - LENGTH)
    assert done["parameters_before"] == info["parameters"]
    assert done["parameters_after"] == sum(p.numel() for p in pruned.parameters())
    assert done["parameters_after"] < done["parameters_before"]
    assert done["model"] == kind and done["check"]["fold_error_relative"] < 1e-4
    assert done["check"]["reload_error_relative"] < 1e-6
    if variant == "replaceme":
        final = "mlp.c_proj" if kind == "gpt2" else "mlp.down_proj"
        assert done["folded_into"] == f"block {START}: {final}"
    else:
        assert done["folded_into"] is None


@pytest.mark.parametrize("kind", KINDS)
def test_pruned_in_memory_generates_with_its_kv_cache(kind):
    """prune_blocks renumbers the attention modules' layer_idx: generate's KV cache has one
    entry per remaining block, and greedy decoding matches the hooked original's."""
    weight = random_transform()
    model, adapter = make(kind)
    want = hooked(model, adapter, START, LENGTH, weight, greedy_without_cache)
    want_logits = hooked(model, adapter, START, LENGTH, weight, logits)
    prune_blocks(model, adapter, START, LENGTH, weight)
    assert model.config.num_hidden_layers == len(adapter.blocks(model)) == LAYERS - LENGTH
    indices = [
        module.layer_idx
        for module in adapter.blocks(model).modules()
        if isinstance(getattr(module, "layer_idx", None), int)
    ]
    assert indices and set(indices) == set(range(LAYERS - LENGTH))
    assert relative_error(logits(model), want_logits) < 1e-4
    assert greedy(model) == want


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_drop_at_either_end(kind):
    """start 0 (the first blocks) and start + length = L (the last ones) are valid drops."""
    for start, length in ((0, 2), (3, 2), (0, LAYERS - 1)):
        model, adapter = make(kind)
        want = hooked(model, adapter, start, length, None, logits)
        prune_blocks(model, adapter, start, length, None)
        assert len(adapter.blocks(model)) == LAYERS - length
        assert relative_error(logits(model), want) < 1e-4


def test_drop_needs_no_separable_parts():
    """GPT-NeoX (attention and MLP in parallel) cannot take a transform, but drops blocks."""
    model, adapter = make("gpt_neox")
    want = hooked(model, adapter, 1, 2, None, logits)
    prune_blocks(model, adapter, 1, 2, None)
    assert relative_error(logits(model), want) < 1e-4


@pytest.mark.parametrize(
    "kind, words",
    [
        ("bloom", ["'bloom'", "no feed-forward module", "inside their MLP", "--variant drop"]),
        ("gemma2", ["'gemma2'", "norm after its MLP", "post_feedforward_layernorm"]),
        ("gemma3_text", ["'gemma3_text'", "norm after its MLP", "post_feedforward_layernorm"]),
        ("bert", ["'bert'", "masked LM"]),
    ],
)
def test_fold_refuses_architectures_by_name(kind, words):
    model, adapter = make(kind, layers=3)
    problem = fold_problem(model, adapter)
    assert problem is not None and all(w in problem for w in words), problem
    if kind == "bert":
        return
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(UnsupportedArchitecture) as err:
        prune_blocks(model, adapter, 1, 1, random_transform())
    assert str(err.value) == problem
    assert len(adapter.blocks(model)) == 3  # nothing changed
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize("kind", KINDS)
def test_fold_finds_the_final_linear_layer(kind):
    model, adapter = make(kind, layers=2)
    assert fold_problem(model, adapter) is None
    assert fold_problem(model, adapter, block=2) is None


def test_fold_checks_that_the_final_linear_layer_gives_the_mlp_output():
    """An MLP that does more after its down_proj (here: doubles it) is refused, although a
    layer of the usual name is there."""
    model, adapter = make("llama", layers=2)
    mlp = adapter.blocks(model)[0].mlp
    forward = mlp.forward
    mlp.forward = types.MethodType(lambda self, x: 2 * forward(x), mlp)
    problem = fold_problem(model, adapter, block=1)
    assert problem and "no final linear layer" in problem and "down_proj" in problem
    assert fold_problem(model, adapter, block=2) is None  # block 2's MLP is as it was


@pytest.mark.parametrize(
    "start, length, variant, words",
    [
        (0, LAYERS, "drop", "at most 4 can go"),
        (1, LAYERS, "drop", "at most 4 can go"),
        (4, 2, "drop", "blocks 5..6 run past the model's 5 blocks"),
        (0, 2, "replaceme", "block 0 is the embeddings"),
        (2, 0, "drop", "length must be at least 1"),
        (-1, 2, "drop", "start must be 0 or more"),
    ],
)
def test_impossible_spans_are_refused(start, length, variant, words, cached, tmp_path):
    model, adapter = make("llama")
    weight = random_transform() if variant == "replaceme" else None
    with pytest.raises(ValueError, match=words):
        prune_blocks(model, adapter, start, length, weight)
    assert len(adapter.blocks(model)) == model.config.num_hidden_layers == LAYERS
    with pytest.raises(ValueError, match=words):
        write_pruned(
            cached("llama"),
            tmp_path / "out",
            start=start,
            length=length,
            variant=variant,
            transform=weight,
        )
    assert not (tmp_path / "out").exists()


def test_a_transform_of_the_wrong_shape_is_refused(cached, tmp_path):
    model, adapter = make("llama")
    with pytest.raises(ValueError, match=r"must be \(32, 32\)"):
        prune_blocks(model, adapter, 1, 1, np.eye(16))
    with pytest.raises(ValueError, match="non-finite"):
        prune_blocks(model, adapter, 1, 1, np.full((32, 32), np.nan))
    assert len(adapter.blocks(model)) == LAYERS
    with pytest.raises(ValueError, match=r"'llama'.*shape \(16, 16\).*must be \(32, 32\)"):
        write_pruned(
            cached("llama"),
            tmp_path / "o",
            start=1,
            length=1,
            variant="replaceme",
            transform=np.eye(16),
        )
    assert not (tmp_path / "o").exists()


def test_a_masked_lm_is_refused(tmp_path):
    model, _ = make("bert", layers=3)
    model.save_pretrained(tmp_path / "src")
    make_tokenizer("bert").save_pretrained(tmp_path / "src")
    cache_model("mlm", {"source": str(tmp_path / "src")}, tmp_path / "m")
    for variant, weight in (("drop", None), ("replaceme", random_transform())):
        with pytest.raises(UnsupportedArchitecture, match="'mlm'.*'bert'.*masked LM"):
            write_pruned(
                tmp_path / "m",
                tmp_path / "out",
                start=1,
                length=1,
                variant=variant,
                transform=weight,
            )
    assert not (tmp_path / "out").exists()


def test_a_non_empty_out_is_left_alone_without_force(cached, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    stat = (out / "mine.txt").stat()
    with pytest.raises(FileExistsError, match="not empty.*--force"):
        write_pruned(cached("llama"), out, start=START, length=LENGTH, variant="drop")
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    assert (out / "mine.txt").read_text() == "keep me"
    assert (out / "mine.txt").stat().st_mtime_ns == stat.st_mtime_ns
    write_pruned(cached("llama"), out, start=START, length=LENGTH, variant="drop", force=True)
    assert not (out / "mine.txt").exists() and (out / "pruning.json").exists()
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty folder needs no --force
    write_pruned(cached("llama"), empty, start=START, length=LENGTH, variant="drop")
    assert (empty / "model.safetensors").exists()


def test_a_failed_write_leaves_nothing(cached, tmp_path, monkeypatch):
    """A write that fails after the weights were saved (here: the check of the written folder)
    leaves neither the folder nor its temporary sibling, and an existing folder as it was."""

    def fail(*_args, **_kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(checkpoint, "check_export", fail)
    with pytest.raises(RuntimeError, match="interrupted"):
        write_pruned(cached("llama"), tmp_path / "out", start=START, length=LENGTH, variant="drop")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "x").write_text("old")
    with pytest.raises(RuntimeError, match="interrupted"):
        write_pruned(
            cached("llama"), tmp_path / "old", start=1, length=1, variant="drop", force=True
        )
    assert [p.name for p in tmp_path.iterdir()] == ["old"]
    assert (tmp_path / "old" / "x").read_text() == "old"


def test_variant_and_transform_must_agree(cached, tmp_path):
    with pytest.raises(ValueError, match="needs a transform"):
        write_pruned(cached("llama"), tmp_path / "o", start=1, length=1, variant="replaceme")
    with pytest.raises(ValueError, match="takes no transform"):
        write_pruned(
            cached("llama"),
            tmp_path / "o",
            start=1,
            length=1,
            variant="drop",
            transform=random_transform(),
        )
    with pytest.raises(ValueError, match="'shortcut' is not one of drop, replaceme"):
        write_pruned(cached("llama"), tmp_path / "o", start=1, length=1, variant="shortcut")


def write_maps(path, spans, model_dir=None, name="llama"):
    """A span maps file of replaceme transforms, recording the model they were fitted on
    (`model_dir`'s fingerprint, as calibrate_pruning does; None: none, as an older jtc)."""
    meta = (
        {}
        if model_dir is None
        else {"model": name, "model_fingerprint": model_fingerprint(model_dir)}
    )
    with SpanMapWriter(path, meta) as writer:
        for s, n in spans:
            writer.add("replaceme", s, n, {"weight": random_transform(seed=s * 10 + n)})
    return path


def test_cli_prunes_a_cached_model(cached, tmp_path, capsys):
    model_dir = cached("llama")
    maps = write_maps(tmp_path / "maps.safetensors", [(START, LENGTH), (1, 3)], model_dir)
    argv = ["prune", "--model-dir", str(model_dir), "--start", str(START), "--length"]
    argv += [str(LENGTH), "--variant", "replaceme", "--maps", str(maps)]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == str(tmp_path / "out")
    assert lines[-1].startswith("replaceme: removed blocks 3..4 of 5 (3 left); parameters ")
    done = json.loads((tmp_path / "out/pruning.json").read_text())
    assert f"{done['parameters_before']:,} -> {done['parameters_after']:,}" in lines[-1]
    assert done["transform_source"].endswith("replaceme, start 2, length 2")
    assert done["caveat"] is None  # chosen by hand: nothing to say of a selection
    original, _, _ = load_cached(model_dir)
    adapter = find_adapter(original, "causal")
    weight = random_transform(seed=START * 10 + LENGTH)
    want = hooked(original, adapter, START, LENGTH, weight, logits)
    pruned = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert relative_error(logits(pruned), want) < 1e-4

    # the same again: --out now holds files
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("jtc prune: ") and "not empty" in err and "--force" in err

    # a span the maps file has no transform for
    wrong = ["--start", "1", "--length", "2"]
    assert main([*argv, *wrong, "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert "no replaceme map for start 1, length 2" in err
    assert "its replaceme spans: start 1 length 3, start 2 length 2" in err
    assert not (tmp_path / "o2").exists()

    # drop takes no maps; replaceme needs them
    drop = ["prune", "--model-dir", str(model_dir), "--start", "1", "--length", "1"]
    assert main([*drop, "--variant", "drop", "--out", str(tmp_path / "d")]) == 0
    assert "drop: removed blocks 2..2 of 5 (4 left)" in capsys.readouterr().out
    assert main([*drop, "--variant", "drop", "--maps", str(maps), "--out", "x"]) == 2
    assert "--variant drop takes no --maps" in capsys.readouterr().err
    assert main([*drop, "--variant", "replaceme", "--out", "x"]) == 2
    assert "--variant replaceme needs --maps" in capsys.readouterr().err


def test_maps_of_another_model_are_refused_naming_both(cached, tmp_path, capsys):
    """Maps fitted on a tiny Llama are refused for a tiny Qwen2 of the same width, by the CLI and
    by export (the export stage's call), naming both models and what to pass instead; a file
    that records no model fingerprint (an older jtc's) is refused with the rerun to do."""
    llama, qwen2 = cached("llama"), cached("qwen2")
    maps = write_maps(tmp_path / "maps.safetensors", [(START, LENGTH)], llama, "llama")
    argv = ["prune", "--model-dir", str(qwen2), "--start", str(START), "--length", str(LENGTH)]
    argv += ["--variant", "replaceme", "--maps", str(maps), "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "fitted on model 'llama'" in err and "not on model 'qwen2' being pruned" in err
    assert "calibrate_pruning fitted on model 'qwen2'" in err and "--maps" in err
    assert not (tmp_path / "out").exists()
    span = {"start": START, "length": LENGTH, "variant": "replaceme"}
    with pytest.raises(ValueError, match="fitted on model 'llama'.*not on model 'qwen2'"):
        export(qwen2, tmp_path / "out", maps=maps, **span)
    assert not (tmp_path / "out").exists()
    # the same name, other weights: an earlier copy of the model
    renamed = write_maps(tmp_path / "renamed.safetensors", [(START, LENGTH)], llama, "qwen2")
    with pytest.raises(ValueError, match="its weights changed since.*rerun calibrate_pruning"):
        export(qwen2, tmp_path / "out", maps=renamed, **span)
    old = write_maps(tmp_path / "old.safetensors", [(START, LENGTH)])
    with pytest.raises(ValueError, match="does not record which model.*rerun calibrate_pruning"):
        export(qwen2, tmp_path / "out", maps=old, **span)
    assert main([*argv[:-4], "--maps", str(old), "--out", str(tmp_path / "out")]) == 2
    assert "model 'qwen2'" in capsys.readouterr().err
    # its own maps are taken
    own = write_maps(tmp_path / "own.safetensors", [(START, LENGTH)], qwen2, "qwen2")
    assert export(qwen2, tmp_path / "out", maps=own, **span) == tmp_path / "out"


def test_checksummed_maps_are_verified(tmp_path):
    """A maps file written by jtc (checksums in its header) is checked on read."""
    path = write_maps(tmp_path / "maps.safetensors", [(2, 3)])
    np.testing.assert_array_equal(
        load_span_map(path, "replaceme", 2, 3).tensors["weight"], random_transform(seed=23)
    )
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # one byte of the tensor's data
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="does not match its checksum"):
        load_span_map(path, "replaceme", 2, 3).tensors["weight"]
    with pytest.raises(CorruptFileError, match="cannot read span map file"):
        load_span_map(tmp_path / "missing.safetensors", "replaceme", 2, 3)


@pytest.mark.slow  # converting SmolLM2's GGUF file: about 20 s
@pytest.mark.real_model
def test_real_packaged_smollm2_exports_drop_and_replaceme(tmp_path, smollm2_cache):
    cached, info = smollm2_cache  # (conftest.py: cached once per session)
    width, start, length = info["hidden_size"], 10, 2
    weight = random_transform(width)
    original, tokenizer, _ = load_cached(cached)
    adapter = find_adapter(original, "causal")
    inputs = tokenizer(["The river flows into the sea, and the city"], return_tensors="pt")

    def run(model):
        with torch.no_grad():
            return model(**inputs, use_cache=False).logits

    for variant, transform in (("drop", None), ("replaceme", weight)):
        out = write_pruned(
            cached,
            tmp_path / variant,
            start=start,
            length=length,
            variant=variant,
            transform=transform,
        )
        pruned = AutoModelForCausalLM.from_pretrained(out).eval()
        assert pruned.config.num_hidden_layers == info["num_layers"] - length
        want = hooked(original, adapter, start, length, transform, run)
        assert relative_error(run(pruned), want) < 1e-4, variant
        del pruned


# --- `jtc prune` given the wrong inputs: each named as what it is, nothing deleted ---------------


def files_under(folder):
    """{relative path: (size, mtime_ns, bytes)} of every file under a folder."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def run_folder(cached, tmp_path, monkeypatch):
    """tmp_path as a finished run's folder: results/models/llama (a copy of the tiny Llama's
    cache, with its times) and its span maps in results/pruning/llama/news/maps.safetensors;
    the working directory."""
    monkeypatch.chdir(tmp_path)
    model_dir = tmp_path / "results/models/llama"
    shutil.copytree(cached("llama"), model_dir)
    maps = tmp_path / "results/pruning/llama/news/maps.safetensors"
    maps.parent.mkdir(parents=True)
    write_maps(maps, [(START, LENGTH)], model_dir)
    return tmp_path


def prune(model_dir, maps, capsys, out="out"):
    """`jtc prune` (replaceme with `maps`, or drop without): (exit code, stderr)."""
    argv = ["prune", "--model-dir", str(model_dir), "--start", str(START), "--length"]
    argv += [str(LENGTH), "--out", out]
    argv += ["--variant", "replaceme", "--maps", str(maps)] if maps else ["--variant", "drop"]
    code = main(argv)
    return code, capsys.readouterr().err


EXPECTED_MODEL = "a cached model folder: results/models/NAME of a finished workflow run"


@pytest.mark.parametrize("maps", [True, False], ids=["replaceme", "drop"])
def test_prune_names_a_model_dir_that_does_not_exist_or_is_no_model_cache(
    run_folder, cached, capsys, maps
):
    """A missing --model-dir, a model's source folder (a plain Hugging Face folder) and a pruned
    checkpoint: each named as what it is, with what to pass instead; no advice to delete."""
    maps = "results/pruning/llama/news/maps.safetensors" if maps else None
    code, err = prune("results/models/lama", maps, capsys)
    assert code == 2
    assert err.startswith("jtc prune: --model-dir results/models/lama does not exist; ")
    assert EXPECTED_MODEL in err and "resolve_model" in err and "rm" not in err

    source = cached("llama").parent / "src"  # what the cache was made from
    before = files_under(source)
    code, err = prune(source, maps, capsys)
    assert code == 2
    assert f"--model-dir {source} is not a jtc model cache" in err
    assert "a Hugging Face model folder, a model's source, not its cache" in err
    assert EXPECTED_MODEL in err and f"models.NAME.source: {source}" in err
    assert "`snakemake results/models/NAME`" in err and "rm " not in err and "damaged" not in err
    assert files_under(source) == before

    # a pruned checkpoint where the workflow writes its own (jtc prune refuses to write there)
    export("results/models/llama", "results/pruned/llama/news", start=1, length=1, variant="drop")
    code, err = prune("results/pruned/llama/news", maps, capsys)
    assert code == 2
    assert "--model-dir results/pruned/llama/news is a pruned checkpoint" in err
    assert EXPECTED_MODEL in err and "rm " not in err
    assert not (run_folder / "out").exists()


@pytest.mark.parametrize("damage", ["weights", "manifest", "tokenizer"])
def test_prune_names_a_damaged_model_cache_with_the_command_that_caches_it_again(
    run_folder, capsys, damage
):
    model_dir = Path("results/models/llama")
    if damage == "weights":  # one byte of the last tensor: found as the weights are loaded
        weights = model_dir / "model.safetensors"
        data = bytearray(weights.read_bytes())
        data[-3] ^= 0x01
        weights.write_bytes(bytes(data))
        said = f"{weights} is damaged (its size or checksum differs from manifest.json)"
    elif damage == "manifest":
        (model_dir / "manifest.json").unlink()
        said = f"--model-dir {model_dir} is a damaged jtc model cache (it has no manifest.json"
    else:
        (model_dir / "tokenizer.json").write_text("{}")
        said = f"{model_dir}/tokenizer.json is damaged (its size differs from manifest.json)"
    before = files_under(run_folder / "results")
    code, err = prune(model_dir, "results/pruning/llama/news/maps.safetensors", capsys)
    assert code == 2
    assert said in err
    assert (
        f"delete the folder {model_dir} and rerun to cache the model again (rm -r {model_dir};"
        in err
    )
    assert f"then `snakemake {model_dir}` in the folder of its workflow run" in err
    assert "the same snakemake command" not in err
    assert files_under(run_folder / "results") == before and not Path("out").exists()


def test_prune_names_a_wrong_maps_file_as_the_wrong_input(run_folder, capsys):
    """The model's own model.safetensors, a shortcut method's map file, a text file, a missing
    file and the maps of another model given as --maps: each named as what it is and what
    --maps expects; the cached model is never said to be damaged nor to be deleted."""
    model_dir = "results/models/llama"
    own = f"{model_dir}/model.safetensors"
    shortcut = run_folder / "results/maps/llama/news/mat.safetensors"
    shortcut.parent.mkdir(parents=True)
    save_maps(shortcut, {0: {1: np.eye(3)}}, {"method": "mat"})
    (run_folder / "notes.txt").write_text("not a maps file\n")
    other = run_folder / "other.safetensors"  # span maps, of another model
    with SpanMapWriter(other, {"model": "qwen2", "model_fingerprint": "0123"}) as writer:
        writer.add("replaceme", START, LENGTH, {"weight": random_transform()})
    expected = "pass the span maps file calibrate_pruning wrote for the model pruned"
    expected += " (results/pruning/MODEL/CORPUS/maps.safetensors of a finished workflow run)"
    cases = {
        own: f"--maps {own} is a model's weights (",
        str(shortcut): f"--maps {shortcut} is a map file of a shortcut method",
        "notes.txt": "--maps notes.txt is not a safetensors file",
        "missing.safetensors": "--maps missing.safetensors does not exist",
    }
    before = files_under(run_folder / "results")
    for maps, said in cases.items():
        code, err = prune(model_dir, maps, capsys)
        assert code == 2, maps
        assert err.startswith(f"jtc prune: {said}") and expected in err, err
        assert "rm " not in err and "damaged" not in err and "delete" not in err, err
    assert (
        "tensors such as 'lm_head.weight', no jtc format; a model.safetensors?), not span "
        in (prune(model_dir, own, capsys)[1])
    )
    code, err = prune(model_dir, other, capsys)
    assert code == 2
    assert "fitted on model 'qwen2'" in err and "not on model 'llama' being pruned" in err
    assert "rm " not in err and "damaged" not in err
    assert files_under(run_folder / "results") == before and not Path("out").exists()


# --- `jtc prune --out`: never into a workflow's results or the model cache, --force never over
# a jtc output; what it writes is recorded in stamp.json ------------------------------------


def prune_out(capsys, out, *more, model_dir="results/models/llama"):
    """`jtc prune --variant drop` of blocks 2..2 to `out`: (exit code, stderr)."""
    argv = ["prune", "--model-dir", str(model_dir), "--start", "1", "--length", "1"]
    code = main([*argv, "--variant", "drop", "--out", str(out), *more])
    return code, capsys.readouterr().err


def stamped_states(folder):
    """A states folder as extract_hidden writes it (stamp.json naming it), at `folder`."""
    from jtc.files import stamps
    from jtc.files.io import atomic_dir

    name = "results/hidden/llama/news/train"
    stamps.begin("extract_hidden", {"model": "llama"}, {"code": "x"}, [name])
    try:
        with atomic_dir(name) as tmp:
            (tmp / "layer_000.parquet").write_bytes(b"states")
    finally:
        stamps.end()
    if Path(folder) != Path(name):
        shutil.copytree(name, folder)
    return Path(folder)


def test_prune_never_writes_into_a_run_or_over_the_model_cache(run_folder, capsys):
    """--out inside the run's results folder (a new folder, a new folder inside the model
    cache), equal to --model-dir (with --force too), holding --model-dir, or over a states
    folder with --force: each refused naming both paths, nothing written or deleted."""
    stamped_states("results/hidden/llama/news/train")
    before = files_under(run_folder / "results")
    cases = {
        ("results/pruned/llama/news",): "--out results/pruned/llama/news is inside "
        f"{run_folder / 'results'}, the results folder of a jtc workflow run (",
        ("results/models/llama/pruned",): "--out results/models/llama/pruned is inside "
        "--model-dir results/models/llama: it would be written into the model cache",
        ("results/models/llama",): "--out results/models/llama is --model-dir "
        "results/models/llama: the pruned checkpoint would replace the model cache",
        ("results/models/llama", "--force"): "--out results/models/llama is --model-dir "
        "results/models/llama",
        ("results", "--force"): "--model-dir results/models/llama is inside --out results:",
        ("results/hidden/llama/news/train", "--force"): "--out results/hidden/llama/news/train "
        "is inside",
    }
    for args, said in cases.items():
        code, err = prune_out(capsys, *args)
        assert code == 2, args
        assert err.startswith(f"jtc prune: {said}"), err
        assert "--out shared/NAME" in err and "snakemake pruned" in err, err
    assert files_under(run_folder / "results") == before
    assert not Path("results/pruned").exists() and not Path("results/models/llama/pruned").exists()


def test_force_never_replaces_a_jtc_output_outside_a_run(run_folder, capsys):
    """Copies outside results/ of a states folder and of a model cache, and a folder holding a
    workflow run: --force refuses each, naming what it is; nothing changes."""
    states = stamped_states("elsewhere/train")
    cache = Path("elsewhere/cache")
    shutil.copytree("results/models/llama", cache)
    run = Path("elsewhere/run")
    (run / ".snakemake").mkdir(parents=True)
    (run / "Snakefile").write_text("")
    before = files_under(run_folder / "elsewhere")
    for out, said in (
        (
            states,
            f"{states} is the workflow output results/hidden/llama/news/train "
            "(made by rule extract_hidden)",
        ),
        (cache, f"{cache} is a jtc model cache (it holds info.json and manifest.json)"),
        (run, f"{run} is a Snakemake workflow run's folder (it holds "),
        (Path("elsewhere"), "is a jtc model cache"),
    ):
        code, err = prune_out(capsys, out, "--force")
        assert code == 2, out
        assert err.startswith(f"jtc prune: --out {out} is not replaced even with --force: "), err
        assert said in err, err
    assert files_under(run_folder / "elsewhere") == before
    # the library's force=True refuses it too
    with pytest.raises(FileExistsError, match="is a jtc model cache"):
        write_pruned("results/models/llama", cache, start=1, length=1, variant="drop", force=True)


def test_out_in_a_results_folder_is_known_by_the_run_marks(tmp_path):
    """A folder named results is a run's when Snakemake's .snakemake is beside it, or it holds
    jtc's stamp records or a folder output; a plain one, or any other folder, is not."""
    from jtc.pruning.out_folder import out_problem

    model = tmp_path / "cache"
    for marks, refused in (
        ((), False),
        ((".snakemake",), True),
        (("results/.stamps",), True),
        (("results/figures",), False),
        (("results/models/x/info.json",), True),
    ):
        base = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        (base / "results").mkdir(parents=True)
        for mark in marks:
            path = base / mark
            if path.suffix:
                path.parent.mkdir(parents=True)
                path.write_text("{}")
            else:
                path.mkdir(parents=True)
        problem = out_problem(model, base / "results/new/pruned")
        assert (problem is not None) == refused, (marks, problem)
        if refused:
            assert f"is inside {base / 'results'}, the results folder of a jtc" in problem


def test_prune_records_its_files_and_force_replaces_a_folder_of_ones_own(run_folder, capsys):
    """jtc prune's folder has a stamp.json with each file's size and sha256, which
    verify_folders checks (a byte changed with its mtime put back is found); --force replaces
    a folder jtc prune wrote and a plain folder of the user's."""
    from jtc.files.stamps import StampError, verify_folders

    code, err = prune_out(capsys, "shared/drop")
    assert code == 0, err
    stamp = json.loads(Path("shared/drop/stamp.json").read_text())
    assert stamp["made_by"] == "jtc prune" and "rule" not in stamp
    assert {"model.safetensors", "config.json", "pruning.json"} <= set(stamp["files"])
    weights = Path("shared/drop/model.safetensors")
    assert stamp["files"]["model.safetensors"]["bytes"] == weights.stat().st_size
    verify_folders(["shared/drop"])
    data, times = bytearray(weights.read_bytes()), weights.stat()
    data[-3] ^= 0x01
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(times.st_atime_ns, times.st_mtime_ns))
    with pytest.raises(StampError, match="model.safetensors is not the file its job wrote"):
        verify_folders(["shared/drop"])

    assert prune_out(capsys, "shared/drop")[0] == 2  # holds files: --force needed
    code, err = prune_out(capsys, "shared/drop", "--force")  # its own: replaced
    assert code == 0, err
    verify_folders(["shared/drop"])
    mine = Path("mine")
    mine.mkdir()
    (mine / "notes.txt").write_text("old")
    code, err = prune_out(capsys, mine, "--force")
    assert code == 0, err
    assert not (mine / "notes.txt").exists() and (mine / "pruning.json").is_file()
