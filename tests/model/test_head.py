"""The decoder head as plain operations (jtc.model.head): described when a model is cached, it gives
the model's own head without transformers, and a head it cannot describe falls back to the
transformers path."""

import json
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch
from tiny import make_model
from torch import nn

from jtc.files.io import CorruptFileError, read_json, write_json
from jtc.model.cache import cache_model, load_cached
from jtc.model.head import describe, load_decoder_head
from jtc.model.manifest import write_manifest


def cached(kind, folder, edit=None):
    """A tiny model of `kind` cached under folder/m (edit(model) first, if given)."""
    model, tokenizer = make_model(kind.removesuffix("-tied"))
    if kind == "llama-tied":
        model.config.tie_word_embeddings = True
        model.tie_weights()
    if edit is not None:
        edit(model)
    model.save_pretrained(folder / "src")
    tokenizer.save_pretrained(folder / "src")
    info = cache_model("m", {"source": str(folder / "src")}, folder / "m")
    return folder / "m", info


def assert_same_head(head, whole):
    states = torch.randn(9, whole.weight.shape[1], generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(head.logits(states).cpu(), whole.logits(states), rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "llama-tied", "bert-mlm"])
def test_described_head_equals_the_models_own(tmp_path, kind):
    folder, info = cached(kind, tmp_path)
    ops = [op["op"] for op in info["head"]["transform"]]
    assert (
        ops
        == {
            "gpt2": ["layer_norm"],
            "llama": ["rms_norm"],
            "llama-tied": ["rms_norm"],
            "bert-mlm": ["linear", "activation", "layer_norm"],
        }[kind]
    )
    net, _, _ = load_cached(folder)
    assert_same_head(
        load_decoder_head(folder, "m", threads=1), load_decoder_head(folder, "m", 1, net)
    )


def test_an_untied_head_of_a_tying_config_is_read_under_its_own_name(tmp_path):
    def untie(model):
        with torch.no_grad():
            model.lm_head.weight = nn.Parameter(model.lm_head.weight.detach() * 2.0 + 0.1)

    folder, info = cached("gpt2", tmp_path, untie)
    assert info["head"]["unembedding"]["weight"] == ["lm_head.weight"]
    net, _, _ = load_cached(folder)
    assert_same_head(
        load_decoder_head(folder, "m", threads=1), load_decoder_head(folder, "m", 1, net)
    )


class OffsetRMSNorm(nn.Module):
    """Gemma's norm: (1 + weight) * normalised, which a plain RMS norm is not."""

    def __init__(self, weight, eps):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(weight.detach().clone()), eps

    def forward(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (1.0 + self.weight) * x


def test_a_head_the_description_would_get_wrong_is_not_described():
    model, _ = make_model("llama")
    norm = model.model.norm
    model.model.norm = OffsetRMSNorm(norm.weight + 0.5, norm.variance_epsilon)
    assert describe(model, model.model.norm, model.lm_head) is None  # fails the logits check
    model.model.norm = nn.Identity()  # a transform it does not know
    assert describe(model, model.model.norm, model.lm_head) is None


def test_without_a_description_the_head_comes_through_transformers(tmp_path):
    folder, info = cached("gpt2", tmp_path)
    del info["head"]
    write_json(folder / "info.json", info)
    write_manifest(folder)
    net, _, _ = load_cached(folder)
    assert_same_head(
        load_decoder_head(folder, "m", threads=1), load_decoder_head(folder, "m", 1, net)
    )


def test_a_decoding_job_imports_no_transformers(tmp_path):
    folder, _ = cached("llama", tmp_path)
    code = (
        "import sys; from jtc.model.head import load_decoder_head; "
        f"head = load_decoder_head({str(folder)!r}, 'm', 1); "
        "assert head.transform is not None; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
    assert read_json(folder / "info.json")["head"]["transform"][0]["op"] == "rms_norm"


def _flip_tensor_byte(folder, name):
    """Flip one byte inside tensor `name`'s data in the cached weights."""
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    length = struct.unpack("<Q", data[:8])[0]
    first, last = json.loads(data[8 : 8 + length])[name]["data_offsets"]
    data[8 + length + (first + last) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _weights_entry(folder):
    return json.loads((folder / "manifest.json").read_text())["model.safetensors"]


def test_a_head_only_job_checks_the_tensors_it_reads_and_not_the_others(tmp_path):
    folder, _ = cached("llama", tmp_path)
    entry = _weights_entry(folder)
    assert {"header_crc32", "tensors", "crc32"} <= set(entry)
    # damage in a block's weights: the head job reads none of them and goes on; loading the
    # whole model refuses it
    _flip_tensor_byte(folder, "model.layers.0.mlp.up_proj.weight")
    load_decoder_head(folder, "m", threads=1)
    with pytest.raises(CorruptFileError, match="model.safetensors is damaged"):
        load_cached(folder)
    # damage in the head's unembedding: refused, naming the tensor and the rebuild
    _flip_tensor_byte(folder, "lm_head.weight")
    with pytest.raises(CorruptFileError, match=r"checksum of tensor lm_head.weight.*rm -r"):
        load_decoder_head(folder, "m", threads=1)


def test_a_damaged_weights_header_is_refused_before_any_tensor_is_read(tmp_path):
    folder, _ = cached("llama", tmp_path)
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[12] ^= 0x01  # inside the JSON header
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match=r"damaged \(its header differs"):
        load_decoder_head(folder, "m", threads=1)


def test_a_manifest_without_tensor_checksums_checks_the_whole_file(tmp_path):
    """A model cached before tensors had checksums of their own: the whole file is checked."""
    folder, _ = cached("llama", tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    for key in ("tensors", "header_crc32"):
        del manifest["model.safetensors"][key]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    load_decoder_head(folder, "m", threads=1)
    _flip_tensor_byte(folder, "model.layers.0.mlp.up_proj.weight")  # not a head tensor
    with pytest.raises(CorruptFileError, match="model.safetensors is damaged"):
        load_decoder_head(folder, "m", threads=1)


def test_the_head_through_transformers_checks_its_tensors_too(tmp_path):
    folder, info = cached("gpt2", tmp_path)
    del info["head"]
    write_json(folder / "info.json", info)
    write_manifest(folder)
    load_decoder_head(folder, "m", threads=1)
    _flip_tensor_byte(folder, "transformer.h.0.mlp.c_fc.weight")  # not read by the head
    load_decoder_head(folder, "m", threads=1)
    _flip_tensor_byte(folder, "transformer.ln_f.weight")  # the final norm: the head's
    with pytest.raises(CorruptFileError, match="checksum of tensor transformer.ln_f.weight"):
        load_decoder_head(folder, "m", threads=1)


def test_the_manifests_checksums_in_one_pass_are_those_of_the_bytes_they_name(tmp_path):
    from safetensors.numpy import save_file

    from jtc.model import manifest

    path = tmp_path / "model.safetensors"
    tensors = {"a": np.arange(1000, dtype=np.float32), "b": np.ones((7, 3), np.float16)}
    save_file({**tensors, "empty": np.zeros(0, np.float32)}, str(path), metadata={"k": "v"})
    entry = manifest._weights_entry(path)
    start, header = manifest._header(path)
    assert entry["crc32"] == manifest._crc32(path)
    assert entry["header_crc32"] == manifest._crc32(path, 0, start)
    for name, spec in header.items():
        first, last = spec["data_offsets"]
        assert entry["tensors"][name] == manifest._crc32(path, start + first, last - first)
    assert set(entry["tensors"]) == {"a", "b", "empty"}  # not the metadata
