"""Finding an architecture's adapter from a loaded model: the block list, the final norm, the
decoder head and the block parts, for any causal or masked language model in `transformers`.

Every candidate is checked on the model itself before it is used: the head found must turn the
last block's output into the model's own logits, and the parts found must chain into the block
outputs through the residual adds. A model where no candidate passes is refused, naming what
failed. The declared adapters (jtc.model.adapters.ADAPTERS) are used as they are; discovery is for
every other architecture."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from jtc.model.adapters import (
    ADAPTERS,
    NOT_TRANSFORMERS,
    Adapter,
    Part,
    UnsupportedArchitecture,
    encoder_decoder_message,
    lookup,
    not_transformer_message,
)

# names of a block's parts, in the order they are tried (pre-norm blocks)
ATTN_NORMS = (
    "input_layernorm",
    "ln_1",
    "attention_norm",
    "attn_norm",
    "norm_1",
    "ln_attn",
    "norm1",
)
ATTENTIONS = ("self_attn", "attn", "attention", "self_attention", "mixer")
FFN_NORMS = (
    "pre_feedforward_layernorm",
    "post_attention_layernorm",
    "ln_2",
    "ffn_norm",
    "norm_2",
    "ln_mlp",
    "mlp_norm",
    "norm2",
)
FFNS = ("mlp", "feed_forward", "block_sparse_moe", "ffn")
# norms applied to a sub-layer's output before its residual add (Gemma 2 and 3, OLMo 2)
ATTN_OUT_NORMS = ("post_attention_layernorm",)
FFN_OUT_NORMS = ("post_feedforward_layernorm",)
# heads whose modules are called in another order than they are registered in
HEAD_TRANSFORMS = {"distilbert": ("vocab_transform", "activation", "vocab_layer_norm")}
CHECK_TOKENS = (2, 7)  # the random batch the candidates are checked on: sequences x tokens


def _has(module: nn.Module, path: str) -> bool:
    try:
        return isinstance(lookup(module, path), nn.Module)
    except AttributeError:
        return False


def _text_config(config):
    getter = getattr(config, "get_text_config", None)
    return getter() if getter else config


def num_layers(config) -> int | None:
    text = _text_config(config)
    for key in ("num_hidden_layers", "n_layer", "num_layers", "n_layers"):
        value = getattr(text, key, None)
        if isinstance(value, int):
            return value
    return None


def _backbone_attr(model: nn.Module) -> str:
    prefix = getattr(model, "base_model_prefix", "")
    return prefix if prefix and isinstance(getattr(model, prefix, None), nn.Module) else ""


def _blocks_path(backbone: nn.Module, layers: int | None) -> str:
    """The backbone's list of blocks: the ModuleList of `layers` modules nearest the top."""
    found = [
        (name.count("."), name)
        for name, module in backbone.named_modules()
        if isinstance(module, nn.ModuleList)
        and len(module) > 0
        and (layers is None or len(module) == layers)
        and len({type(block) for block in module}) == 1
    ]
    if not found:
        raise UnsupportedArchitecture(
            f"no list of {layers} blocks found in {type(backbone).__name__}"
        )
    return min(found)[1]


def _is_norm(module: nn.Module) -> bool:
    return isinstance(module, nn.LayerNorm) or "norm" in type(module).__name__.lower()


def _norm_candidates(backbone: nn.Module, blocks_path: str) -> list[str | None]:
    """Norms of the backbone outside its blocks and embeddings (the final norm is one of them),
    then None (no final norm)."""
    names = []
    for name, module in backbone.named_modules():
        if not name or name == blocks_path or name.startswith(blocks_path + "."):
            continue
        if "emb" in name.lower() or not _is_norm(module):
            continue
        if any(isinstance(child, nn.Module) for child in module.children()):
            continue  # a leaf norm, not a module holding one
        names.append(name)
    return [*names, None]


def _module_path(model: nn.Module, target: nn.Module) -> str | None:
    for name, module in model.named_modules(remove_duplicate=False):
        if module is target:
            return name
    return None


def _head_transforms(model: nn.Module, backbone_attr: str, unembedding: str) -> list:
    """Candidate (head_transform, head_capture) pairs for the modules between the final norm
    and the unembedding: none; the unembedding's siblings before it (BERT's transform, ELECTRA's
    generator_predictions, ModernBERT's head); or the unembedding's parent run whole, its
    input captured (RoBERTa's lm_head, whose activation is a function call, not a module)."""
    parent, _, name = unembedding.rpartition(".")
    holder = lookup(model, parent)
    siblings = []
    for child_name, child in holder.named_children():
        if child_name == name:
            break
        if parent == "" and child_name == backbone_attr:
            continue
        if any(True for _ in child.parameters()) or isinstance(child, nn.Dropout):
            siblings.append(f"{parent}.{child_name}" if parent else child_name)
    candidates: list[tuple[tuple[str, ...], str | None]] = [((), None)]
    declared = HEAD_TRANSFORMS.get(str(model.config.model_type))
    if declared:
        candidates.append((declared, None))
    if siblings:
        candidates.append((tuple(siblings), None))
    if parent:
        candidates.append(((), parent))
    return candidates


@contextlib.contextmanager
def _last_block_output(blocks: nn.ModuleList) -> Iterator[list]:
    captured: list = []

    def hook(_module, _args, output):
        captured.append(output[0] if isinstance(output, tuple) else output)

    handle = blocks[-1].register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


def _check_batch(model: nn.Module) -> dict[str, torch.Tensor]:
    vocab = model.get_input_embeddings().num_embeddings
    generator = torch.Generator().manual_seed(0)
    rows, tokens = CHECK_TOKENS
    ids = torch.randint(3, max(4, vocab - 1), (rows, tokens), generator=generator)
    device = next(model.parameters()).device
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    if got.shape != want.shape:
        return False
    scale = float(want.abs().max()) or 1.0
    return bool(torch.allclose(got.float(), want.float(), rtol=1e-3, atol=1e-4 * scale))


def discover(model: nn.Module, task: str) -> Adapter:
    """The adapter of a loaded model whose architecture has no declared one (see the module's
    docstring). UnsupportedArchitecture, naming the model type and what failed, if none fits."""
    config = model.config
    model_type = str(config.model_type)
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedArchitecture(encoder_decoder_message(model_type))
    if model_type in NOT_TRANSFORMERS:
        raise UnsupportedArchitecture(not_transformer_message(model_type))
    backbone_attr = _backbone_attr(model)
    backbone = getattr(model, backbone_attr) if backbone_attr else model
    blocks_path = _blocks_path(backbone, num_layers(config))
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    unembedding = _module_path(model, output) if isinstance(output, nn.Linear) else None
    base = Adapter(model_type, task, backbone_attr, blocks_path, None, (), "", ())
    if unembedding is None:  # a bare backbone (r² only): its last block's output is h_L
        return base
    blocks = lookup(backbone, blocks_path)
    with torch.no_grad(), _last_block_output(blocks) as captured:
        logits = model(**_check_batch(model)).logits
    last = captured[-1]
    tried = []
    for norm in _norm_candidates(backbone, blocks_path):
        for transform, capture in _head_transforms(model, backbone_attr, unembedding):
            adapter = Adapter(
                model_type,
                task,
                backbone_attr,
                blocks_path,
                norm,
                transform,
                unembedding,
                (),
                head_capture=capture,
                logit_scale=adapter_logit_scale(config),
                logit_softcap=getattr(_text_config(config), "final_logit_softcapping", None),
            )
            tried.append(adapter.describe_head())
            try:
                with torch.no_grad():
                    head_transform, unembed = adapter.head(model)
                    features = last if head_transform is None else head_transform(last)
                    got = unembed(features) * adapter.logit_scale
                    if adapter.logit_softcap:
                        got = adapter.logit_softcap * torch.tanh(got / adapter.logit_softcap)
            except Exception:  # noqa: BLE001 - a candidate that does not run does not fit
                continue
            if _close(got, logits):
                return _with_parts(model, adapter)
    raise UnsupportedArchitecture(
        f"architecture '{model_type}' ({type(model).__name__}): no decoder head found that gives "
        f"the model's own logits from its last block's output; tried {'; '.join(tried)}"
    )


def adapter_logit_scale(config) -> float:
    """A constant the model multiplies its logits by (Cohere's logit_scale, Granite's
    1 / logits_scaling); 1 for most models."""
    scale = getattr(config, "logit_scale", None)
    if isinstance(scale, (int, float)):
        return float(scale)
    scaling = getattr(config, "logits_scaling", None)
    if isinstance(scaling, (int, float)) and scaling:
        return 1.0 / float(scaling)
    return 1.0


# --- block parts ------------------------------------------------------------------------------


def _first(block: nn.Module, names: tuple[str, ...]) -> str | None:
    return next((name for name in names if _has(block, name)), None)


# post-norm encoders, each norm after its residual add: (attn, attn_norm, ffn, ffn_norm) as
# (input module, output module); BERT's layout (RoBERTa, ELECTRA, DeBERTa-v2) and DistilBERT's
POST_NORM_LAYOUTS = (
    (
        ("attention.self", "attention.output.dense"),
        ("attention.output.LayerNorm", None),
        ("intermediate", "output.dense"),
        ("output.LayerNorm", None),
    ),
    (("attention", None), ("sa_layer_norm", None), ("ffn", None), ("output_layer_norm", None)),
)


def _part_candidates(block: nn.Module) -> list[tuple[Part, ...]]:
    """Pre-norm layouts (attn_norm, attn, ffn_norm, ffn) by the usual module names, then the
    post-norm layouts (attn, attn_norm, ffn, ffn_norm); each is checked by _chains."""
    candidates = []
    for layout in POST_NORM_LAYOUTS:
        paths = [path for pair in layout for path in pair if path]
        if all(_has(block, path) for path in paths):
            names = ("attn", "attn_norm", "ffn", "ffn_norm")
            candidates.append(tuple(Part(n, i, o) for n, (i, o) in zip(names, layout, strict=True)))
    attn_norm, attn, ffn = _first(block, ATTN_NORMS), _first(block, ATTENTIONS), _first(block, FFNS)
    if not (attn_norm and attn and ffn):
        return candidates
    attn_out = _first(block, ATTN_OUT_NORMS) if _has(block, "pre_feedforward_layernorm") else None
    ffn_out = _first(block, FFN_OUT_NORMS)
    for ffn_norm in FFN_NORMS:
        if not _has(block, ffn_norm) or ffn_norm == attn_out:
            continue
        candidates.append(
            (
                Part("attn_norm", attn_norm),
                Part("attn", attn, attn_out),
                Part("ffn_norm", ffn_norm),
                Part("ffn", ffn, ffn_out),
            )
        )
    return candidates


def _recorded(
    model: nn.Module, adapter: Adapter, parts: tuple[Part, ...]
) -> tuple[list, list] | None:
    """(h_0..h_L, the input and output of every part of every block) on a random batch, each
    (tokens, d); None where a candidate cannot even be recorded."""
    from jtc.model.hooks import PartRecorder, StateRecorder

    blocks = adapter.blocks(model)
    batch = _check_batch(model)
    rows, tokens = batch["input_ids"].shape
    index = (torch.arange(rows).repeat_interleave(tokens), torch.arange(tokens).repeat(rows))
    recorders = [StateRecorder(blocks), PartRecorder(blocks, parts)]
    try:
        for recorder in recorders:
            recorder.index = index
        with torch.no_grad():
            adapter.backbone(model)(**batch, use_cache=False)
    except Exception:  # noqa: BLE001 - a candidate that cannot even be recorded does not chain
        return None
    finally:
        for recorder in recorders:
            recorder.remove()
    states, sites = recorders[0].states, recorders[1].states
    if any(s is None for s in (*states, *sites)):
        return None
    return states, sites


def _chains(model: nn.Module, adapter: Adapter, parts: tuple[Part, ...]) -> bool:
    """Whether the parts chain into the block outputs through the residual adds: pre-norm
    blocks attn_norm.in = h_{b-1}, attn_norm.out = attn.in, h_{b-1} + attn.out = ffn_norm.in,
    ffn_norm.out = ffn.in, ffn_norm.in + ffn.out = h_b; post-norm blocks (parts in the order
    attn, attn_norm, ffn, ffn_norm) attn.in = h_{b-1}, h_{b-1} + attn.out = attn_norm.in,
    attn_norm.out = ffn.in, attn_norm.out + ffn.out = ffn_norm.in, ffn_norm.out = h_b."""
    recorded = _recorded(model, adapter, parts)
    if recorded is None:
        return False
    states, sites = recorded
    blocks = adapter.blocks(model)
    per_block = 2 * len(parts)
    for b in range(len(blocks)):
        site = sites[b * per_block : (b + 1) * per_block]
        # (input, output) of each part by name
        io = {p.name: (site[2 * k], site[2 * k + 1]) for k, p in enumerate(parts)}
        attn, attn_norm, ffn, ffn_norm = (io[n] for n in ("attn", "attn_norm", "ffn", "ffn_norm"))
        before, after = states[b], states[b + 1]
        if parts[0].name == "attn":  # post-norm
            checks = [
                (attn[0], before),
                (before + attn[1], attn_norm[0]),
                (ffn[0], attn_norm[1]),
                (attn_norm[1] + ffn[1], ffn_norm[0]),
                (ffn_norm[1], after),
            ]
        else:  # pre-norm
            checks = [
                (attn_norm[0], before),
                (attn[0], attn_norm[1]),
                (before + attn[1], ffn_norm[0]),
                (ffn[0], ffn_norm[1]),
                (ffn_norm[0] + ffn[1], after),
            ]
        if not all(_close(got, want) for got, want in checks):
            return False
    return True


def _parallel_ffn(model: nn.Module, adapter: Adapter) -> str | None:
    """The feed-forward module of blocks whose attention and feed-forward read the same input
    in parallel (GPT-J, GPT-NeoX, Falcon, Phi, Cohere), found by the usual names and checked on
    every block: h_b = h_{b-1} + attn.out + ffn.out; None where no candidate passes."""
    block = adapter.blocks(model)[0]
    attn, ffn = _first(block, ATTENTIONS), _first(block, FFNS)
    if not (attn and ffn):
        return None
    recorded = _recorded(model, adapter, (Part("attn", attn), Part("ffn", ffn)))
    if recorded is None:
        return None
    states, sites = recorded
    for b in range(len(states) - 1):
        _, attn_out, _, ffn_out = sites[4 * b : 4 * b + 4]
        if not _close(states[b] + attn_out + ffn_out, states[b + 1]):
            return None
    return ffn


def _with_parts(model: nn.Module, adapter: Adapter) -> Adapter:
    """The adapter with the first candidate block parts that chain; where none does, with the
    feed-forward module of parallel blocks (`parallel_ffn`) if they are (attention and MLP
    reading one input, as in GPT-J, GPT-NeoX or Falcon), and no parts."""
    import dataclasses

    block = adapter.blocks(model)[0]
    for parts in _part_candidates(block):
        if _chains(model, adapter, parts):
            return dataclasses.replace(adapter, parts=parts)
    return dataclasses.replace(adapter, parallel_ffn=_parallel_ffn(model, adapter))


def find_adapter(model: nn.Module, task: str) -> Adapter:
    """The declared adapter of the model's architecture, else the one discovered from it."""
    declared = ADAPTERS.get(str(model.config.model_type))
    return declared if declared is not None else discover(model, task)
