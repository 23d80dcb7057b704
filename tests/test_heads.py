"""The decoder head as plain operations (jtc.model.head): described when a model is cached, it gives
the model's own head without transformers, and a head it cannot describe falls back to the
transformers path."""

import subprocess
import sys

import pytest
import torch
from tiny import make_model
from torch import nn

from jtc.files.io import read_json, write_json
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
