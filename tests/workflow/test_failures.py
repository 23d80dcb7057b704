"""Corrupt, hostile and odd inputs: each gives a clear error naming the file (or a documented
rule), and nothing is built from it."""

import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from archives import make_tar
from damage import flip_data_page_byte
from fits import fit_map
from tiny import make_model, save_model

from jtc.data import corpus, sources
from jtc.data.corpus import CorpusError
from jtc.data.extract import extract, prepare_inputs
from jtc.data.states import StateWriter, layer_file, read_states
from jtc.files.io import CorruptFileError, write_json
from jtc.files.tensors import TensorWriter
from jtc.model.cache import cache_model, load_cached, model_info
from jtc.model.sources import ModelSourceError
from jtc.shortcuts.maps import FORMAT, load_map, load_part_maps, save_maps, save_part_maps

ROOT = Path(__file__).parents[2]


def states_dir(folder, layers=3, n=300, width=8):
    rng = np.random.default_rng(0)
    folder.mkdir()
    for layer in range(layers):
        writer = StateWriter(layer_file(folder, layer), width, "float32", 1000)
        states = rng.normal(size=(n, width)).astype(np.float32)
        writer.write(np.arange(n), np.zeros(n, dtype=np.int32), states)
        writer.close()
    write_json(folder / "info.json", {"num_layers": layers - 1})
    return folder


@pytest.mark.parametrize("damage", ["truncated", "bit_flip", "empty"])
def test_damaged_state_file_is_named_and_nothing_is_built(tmp_path, damage):
    train = states_dir(tmp_path / "train")
    path = layer_file(train, 1)
    if damage == "bit_flip":
        flip_data_page_byte(path, "state")  # inside the state column's first data page
    else:
        raw = path.read_bytes()
        path.write_bytes(raw[: len(raw) // 2] if damage == "truncated" else b"")
    with pytest.raises(CorruptFileError, match=re.escape(str(path))):
        read_states(train, 1)
    out = tmp_path / "maps" / "mat.safetensors"
    with pytest.raises(CorruptFileError, match=re.escape(str(path))):
        fit_map(
            str(train),
            {"mat": str(out)},
            settings={"mat": {}},
            seed=0,
            model="m",
            corpus="c",
            threads=1,
        )
    assert not out.exists() and list(out.parent.glob("*")) == []


def test_truncated_map_is_named(tmp_path):
    path = tmp_path / "mat.safetensors"
    save_maps(path, {0: {1: np.eye(4), 2: np.eye(4)}}, {"method": "mat"})
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(CorruptFileError, match=re.escape(str(path))):
        load_map(path, 0, 2)
    save_maps(path, {0: {1: np.eye(4)}}, {"method": "mat"})
    with pytest.raises(CorruptFileError, match="holds no map from layer 0 to layer 3"):
        load_map(path, 0, 3)


def test_a_map_file_of_the_old_layout_is_refused_by_name(tmp_path):
    """v1 stored one file per source layer (tensors to_{t}.*): refused, not misread."""
    path = tmp_path / "from_0.safetensors"
    writer = TensorWriter(path)
    writer.add("to_1.weight", np.eye(4))
    writer.close({"format": "jtc-shortcut-v1"})
    with pytest.raises(CorruptFileError, match="not a jtc shortcut map file.*jtc-shortcut-v1"):
        load_map(path, 0, 1)


def flip_tensor_bytes(path, name, count=8):
    """Flip `count` bytes in the middle of one tensor of a safetensors file."""
    import json

    raw = bytearray(path.read_bytes())
    size = int.from_bytes(raw[:8], "little")
    start, end = json.loads(raw[8 : 8 + size])[name]["data_offsets"]
    middle = 8 + size + (start + end) // 2
    for i in range(count):
        raw[middle + i] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_flipped_bytes_in_a_map_are_refused_not_turned_into_numbers(tmp_path):
    """safetensors has no checksum: before, 8 flipped bytes gave a mat r² of -3398 at exit 0."""
    path = tmp_path / "mat.safetensors"
    rng = np.random.default_rng(0)
    maps = {1: rng.normal(size=(16, 16)), 2: rng.normal(size=(16, 16))}
    save_maps(path, {0: maps}, {"method": "m"})
    intact = load_map(path, 0, 1).affine()[0]
    flip_tensor_bytes(path, "from_0.to_2.weight")
    with pytest.raises(CorruptFileError, match=re.escape(str(path)) + ".*'from_0.to_2.weight' do"):
        load_map(path, 0, 2)
    assert np.array_equal(load_map(path, 0, 1).affine()[0], intact)  # the intact map still reads


def test_flipped_bytes_in_part_maps_are_refused(tmp_path):
    path = tmp_path / "parts.safetensors"
    weights = {(1, "attn"): np.eye(16), (1, "ffn"): 2 * np.eye(16)}
    save_part_maps(path, weights, {"method": "mat"})
    assert np.array_equal(load_part_maps(path)[(1, "ffn")].affine()[0], 2 * np.eye(16))
    flip_tensor_bytes(path, "block_1.ffn")
    with pytest.raises(CorruptFileError, match="'block_1.ffn' does not match its checksum"):
        load_part_maps(path)


def test_a_map_without_checksums_is_refused(tmp_path):
    from safetensors.numpy import save_file

    path = tmp_path / "mat.safetensors"
    tensors = {"from_0.to_1.weight": np.eye(4, dtype=np.float32)}
    save_file(tensors, str(path), metadata={"format": FORMAT})
    with pytest.raises(CorruptFileError, match="no checksum for tensor 'from_0.to_1.weight'"):
        load_map(path, 0, 1)


@pytest.mark.parametrize(
    "damage",
    [
        ("config.json", b"garbage"),
        ("tokenizer.json", b"{}"),
        ("model.safetensors", None),  # cut in half
        ("info.json", None),
        ("manifest.json", "missing"),
    ],
)
def test_a_damaged_model_cache_is_named_with_the_command_that_rebuilds_it(tmp_path, damage):
    name, content = damage
    cache = tmp_path / "cache"
    cache_model("m", {"source": str(save_model("gpt2", tmp_path / "src", layers=1))}, cache)
    load_cached(cache)  # intact: loads
    path = cache / name
    if content == "missing":
        path.unlink()
    else:
        path.write_bytes(
            content if content is not None else path.read_bytes()[: path.stat().st_size // 2]
        )
    with pytest.raises(CorruptFileError) as raised:
        load_cached(cache)
    message = str(raised.value)
    assert name in message and f"delete the folder {cache} and rerun" in message


def test_corrupt_gguf_is_refused_with_its_name(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 40)
    with pytest.raises(ModelSourceError, match=r"model 'broken'.*model\.gguf"):
        cache_model("broken", {"source": str(gguf)}, tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_decompression_bomb_is_refused_before_inflating(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "MAX_SENTENCE_FILE_BYTES", 1 << 20)
    zeros = b"\0" * (8 << 20)  # 8 MB of zeros: a few kB compressed
    bomb = make_tar(tmp_path / "bomb.tar.gz", [("x/x-sentences.txt", zeros, "file")])
    assert bomb.stat().st_size < 100_000
    with pytest.raises(CorpusError, match="would inflate to 8388608 bytes"):
        list(sources.read_leipzig(bomb))
    monkeypatch.setattr(sources, "MAX_ARCHIVE_MEMBERS", 20)
    many = make_tar(tmp_path / "many.tar.gz", [(f"x/{i}.txt", b"a", "file") for i in range(30)])
    with pytest.raises(CorpusError, match="more than 20 members"):
        list(sources.read_leipzig(many))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.tar.gz", "many.tar.gz"]


def test_no_pickle_is_ever_loaded():
    """grep-able: no pickle.load, and torch.load only with weights_only=True."""
    offenders = []
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "workflow").rglob("*.py")]:
        text = path.read_text()
        if re.search(
            r"\bpickle\.loads?\(|\bjoblib\.load\(|\bnp\.load\([^)]*allow_pickle=True", text
        ):
            offenders.append(str(path))
        for call in re.findall(r"torch\.load\(([^)]*)\)", text):
            if "weights_only=True" not in call:
                offenders.append(f"{path}: unsafe torch load: {call}")
    assert offenders == []
    text = (ROOT / "src/jtc/model/cache.py").read_text()
    assert "trust_remote_code" in text and "trust_remote_code=True" not in text


def test_odd_text_follows_the_documented_rules(tmp_path):
    """Empty and blank lines are dropped; undecodable lines are dropped; a sentence longer than
    the context is truncated; a one-token sentence still gives its one position."""
    text = tmp_path / "odd.txt"
    long_line = " ".join(["the city"] * 200)
    text.write_bytes(
        b"\n   \n"
        + b"the king won the war .\n"
        + b"caf\xe9 broken bytes here and there\n"
        + long_line.encode()
        + b"\nking\n"
    )
    kept = [s for s, _ in sources.read_text_file(text)]
    assert len(kept) == 4  # the blank lines are gone
    cleaned = [c for c in (corpus.clean_sentence(s) for s in kept) if c]
    assert not any("\ufffd" in c for c in cleaned)  # the undecodable line is dropped
    model, tokenizer = make_model("gpt2")
    prepared = prepare_inputs(
        tokenizer, ["king", long_line], np.array([1, 2]), "causal", 0, 16, None
    )
    assert prepared.skipped == 0
    assert list(prepared.positions[:1]) == [0] and prepared.gold_ids[0] == -1  # no next token
    assert prepared.n_tokens[1] == 16 and len(prepared.inputs[1]) <= 16  # truncated
    info = model_info("g", model, tokenizer, "test")
    out = tmp_path / "states"
    out.mkdir()
    table = pa.table({"sentence_id": [1, 2, 3], "text": ["king", long_line, ""]})
    summary = extract(
        model, tokenizer, info, table, out, seed=0, batch_size=2, max_tokens=16, dtype="float32"
    )
    assert summary["sentences"] == 2 and summary["skipped"] == 1  # the empty one, counted


def test_model_folder_code_is_not_run(tmp_path):
    """A model folder asking for remote code is not loaded with it unless the config says so."""
    folder = save_model("gpt2", tmp_path / "m", layers=1, width=8)
    config = (folder / "config.json").read_text()
    (folder / "config.json").write_text(
        config.replace(
            '"model_type": "gpt2"',
            '"model_type": "gpt2", "auto_map": {"AutoModelForCausalLM": "evil.EvilModel"}',
        )
    )
    (folder / "evil.py").write_text("raise SystemExit('remote code ran')\n")
    info = cache_model("m", {"source": str(folder)}, tmp_path / "cache")
    assert info["architecture"] == "gpt2"  # loaded with transformers' own class
    assert info["model_class"] == "GPT2LMHeadModel"


@pytest.mark.workflow
def test_a_damaged_states_file_names_its_folder_and_deleting_it_recovers(tiny_run, tmp_path):
    """Bytes flipped inside a finished states folder, the file's mtime put back: the first job
    that reads it fails naming the folder to delete; with a new mtime (an ordinary write) the
    run is refused while it plans (the folder's stamp.json has every file's sha256). Deleting
    the folder and rerunning rebuilds the same tables."""
    import os

    import pyarrow.parquet as pq
    from harness import copy_run, run_snakemake

    work = copy_run(tiny_run, tmp_path / "work")
    folder = work / "results/hidden/gpt/mini/validation"
    named = f"delete the folder {folder.relative_to(work)} and rerun the workflow"
    path = layer_file(folder, 1)
    written = path.stat()
    flip_data_page_byte(path, "state")  # inside the state column's first data page
    os.utime(path, ns=(written.st_atime_ns, written.st_mtime_ns))
    table = "results/metrics/gpt/mini/r2.parquet"  # a reader of the damaged folder
    failed = run_snakemake(work, table, "--forcerun", "r2_table", check=False)
    assert failed.returncode != 0
    log = (work / "logs/r2_table/gpt/mini.log").read_text()
    assert named in log
    path.touch()
    refused = run_snakemake(work, table, "--forcerun", "r2_table", check=False)
    assert refused.returncode != 0 and named in refused.stderr, refused.stderr[-2000:]
    assert f"{path.relative_to(work)} is not the file its job wrote" in refused.stderr
    shutil.rmtree(folder)
    run_snakemake(work, table)
    assert pq.read_table(work / table).equals(pq.read_table(tiny_run / table))


@pytest.mark.workflow
def test_a_damaged_model_cache_is_named_and_deleting_it_recovers(tiny_run, tmp_path):
    """A cached model damaged after a finished run, named with the folder to delete: an edited
    JSON file or weights cut short (every file's size, mtime and sha256 are in the folder's
    stamp) while the run plans, nothing changed; a byte of the weights flipped with the mtime
    put back by the first job that loads them (its manifest; the outputs it had are put back).
    Deleting the folder and rerunning caches the model again and rebuilds the same tables."""
    import os

    import pyarrow.parquet as pq
    from damage import flip_byte
    from harness import copy_run, run_snakemake, snapshot

    from jtc.model.manifest import safetensors_header

    work = copy_run(tiny_run, tmp_path / "work")
    folder = work / "results/models/gpt"
    named = f"delete the folder {folder.relative_to(work)} and rerun"
    table = "results/metrics/gpt/mini/prediction.parquet"
    tokenizer = folder / "tokenizer.json"
    intact, written = tokenizer.read_bytes(), tokenizer.stat()
    tokenizer.write_bytes(b"{}")
    before = snapshot(work)
    refused = run_snakemake(work, table, "--forcerun", "decode_predictions", check=False)
    assert refused.returncode != 0 and named in refused.stderr, refused.stderr[-2000:]
    assert not (work / "logs/decode_predictions").exists()  # no job started
    assert snapshot(work) == before
    tokenizer.write_bytes(intact)
    os.utime(tokenizer, ns=(written.st_atime_ns, written.st_mtime_ns))  # as it was
    weights = folder / "model.safetensors"
    start, header = safetensors_header(weights)  # a byte of the head's weights, which it reads
    head = next(n for n in ("lm_head.weight", "transformer.wte.weight") if n in header)
    flip_byte(weights, start + header[head]["data_offsets"][0] + 5, keep_mtime=True)
    before = snapshot(work)
    failed = run_snakemake(work, table, "--forcerun", "decode_predictions", check=False)
    assert failed.returncode != 0
    logs = "".join(p.read_text() for p in (work / "logs/decode_predictions").rglob("*.log"))
    assert named in logs
    assert snapshot(work) == before  # the predictions the failed jobs had deleted are back
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    refused = run_snakemake(work, table, "--forcerun", "decode_predictions", check=False)
    assert refused.returncode != 0 and named in refused.stderr, refused.stderr[-2000:]
    assert f"{weights.relative_to(work)} is not the file its job wrote" in refused.stderr
    shutil.rmtree(folder)
    run_snakemake(work, table)
    assert pq.read_table(work / table).equals(pq.read_table(tiny_run / table))


def test_the_damage_helper_flips_one_byte_inside_a_data_page(tmp_path):
    """tests/helpers/damage.py: the pages it reads fill the chunk exactly (a dictionary page
    first, as in the workflow's states files), and the one byte it changes is in a data page's
    payload."""
    from damage import column_chunk

    path = layer_file(states_dir(tmp_path / "train", layers=2, n=16, width=16), 1)
    chunk = column_chunk(path, "state")
    assert [p.kind for p in chunk.pages][:2] == ["dictionary", "data"]
    before = path.read_bytes()
    offset = flip_data_page_byte(path, "state")
    after = path.read_bytes()
    assert len(after) == len(before)
    assert [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b] == [offset]
    data = chunk.pages[1]
    assert chunk.start < data.header < data.start <= offset < data.end <= chunk.end
