"""Greedy generation with early exit, as it would be deployed, for the Llama family.

The prompt runs through the whole model (filling every layer's key/value cache); so does the
first new token. Each later token runs block after block; after each checked block (early_exit's
check_layers: min_layer, min_layer + k, ...) its state is mapped to the last layer by the
shortcut and decoded, and if the confidence (top-1 minus top-2 probability) exceeds the
threshold, the token is that decode's top-1 and the remaining blocks are skipped (with a
shortlist check, jtc.evaluation.shortlist, the confidence and token are the shortlist's). The
skipped layers still need this position's keys and values for the tokens after it: as CALM does
(Schuster et al. 2022, "state propagation"), they are computed from the exited state, each
skipped layer projecting it through its own input norm, key and value projections and rotary
embedding: two projections per skipped layer instead of a whole block. With a threshold no
confidence can pass, the loop is plain greedy decoding and gives the model's own tokens.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from jtc.evaluation.early_exit import check_layers
from jtc.evaluation.shortlist import Shortlist
from jtc.model.adapters import Adapter, UnsupportedArchitecture
from jtc.model.head import Head

# the architectures whose skipped layers' caches this loop can fill (Llama's attention layout)
LLAMA_FAMILY = ("llama", "mistral", "qwen2")


@dataclass
class Generation:
    tokens: list[int] = field(default_factory=list)  # the new tokens
    exit_layers: list[int] = field(default_factory=list)  # per new token (L: no exit)
    seconds: float = 0.0  # wall time of the new tokens, the prompt excluded

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds else float("nan")


def generation_problem(model: nn.Module, adapter: Adapter) -> str | None:
    """Why this loop cannot run the model (None: it can)."""
    model_type = str(model.config.model_type)
    if adapter.task != "causal":
        return f"generation needs a causal LM; '{model_type}' is a masked LM"
    if model_type not in LLAMA_FAMILY:
        return (
            f"the exiting generation loop fills skipped layers' key/value caches for the Llama "
            f"family ({', '.join(LLAMA_FAMILY)}) only, not '{model_type}'"
        )
    return None


def _out(hidden) -> torch.Tensor:
    return hidden[0] if isinstance(hidden, tuple) else hidden


def _fill_cache(layer: nn.Module, index: int, state, position_embeddings, cache, position):
    """This position's key and value at a skipped layer, from the exited state."""
    attn = layer.self_attn
    x = layer.input_layernorm(state)
    shape = (*x.shape[:-1], -1, attn.head_dim)
    key = attn.k_proj(x).view(shape).transpose(1, 2)
    value = attn.v_proj(x).view(shape).transpose(1, 2)
    cos, sin = position_embeddings
    rotary = sys.modules[type(attn).__module__].apply_rotary_pos_emb
    key = rotary(key, key, cos, sin)[1]
    cache.update(key, value, index, {"sin": sin, "cos": cos, "cache_position": position})


@torch.inference_mode()
def generate(
    model: nn.Module,
    adapter: Adapter,
    head: Head,
    shortcut: Callable[[int, torch.Tensor], torch.Tensor],
    prompt: list[int] | np.ndarray,
    new_tokens: int,
    threshold: Callable[[int], float] | None = None,
    min_layer: int = 1,
    every: int = 1,
    shortlist: Shortlist | None = None,
) -> Generation:
    """`new_tokens` greedy tokens after `prompt`; `shortcut(l, h)` maps states (1, d) of layer
    l to the last layer; `threshold(t)` is the exit threshold at position t (None: no exit);
    `shortlist`: the check that decides (None: the full check, the whole vocabulary)."""
    from transformers import DynamicCache

    problem = generation_problem(model, adapter)
    if problem:
        raise UnsupportedArchitecture(problem)
    backbone = adapter.backbone(model)
    blocks = adapter.blocks(model)
    last = len(blocks)
    checked = set(check_layers(min_layer, last, every).tolist())
    device = next(model.parameters()).device
    cache = DynamicCache(config=model.config)
    ids = torch.as_tensor(np.asarray(prompt), device=device)[None]
    hidden = backbone(input_ids=ids, past_key_values=cache, use_cache=True).last_hidden_state
    # the first new token: the whole model (the prompt's last state, through the final norm,
    # is what the backbone returns; the head's own final norm is not applied twice)
    token = int(_full_logits(model, hidden[0, -1:]).argmax())
    result = Generation(tokens=[token], exit_layers=[last])
    started = time.perf_counter()
    position = ids.shape[1]
    while len(result.tokens) < new_tokens:
        where = torch.tensor([position], device=device)
        state = backbone.embed_tokens(torch.tensor([[token]], device=device))
        position_embeddings = backbone.rotary_emb(state, position_ids=where[None])
        exited = last
        for index, block in enumerate(blocks):
            state = _out(
                block(
                    state,
                    attention_mask=None,
                    position_embeddings=position_embeddings,
                    position_ids=where[None],
                    past_key_values=cache,
                    use_cache=True,
                    cache_position=where,
                )
            )
            layer = index + 1
            if threshold is None or layer not in checked:
                continue
            candidate, confidence = _check(head, shortlist, shortcut(layer, state[0].float()))
            if confidence > threshold(position):
                exited, token = layer, candidate
                for skipped in range(layer, last):
                    _fill_cache(blocks[skipped], skipped, state, position_embeddings, cache, where)
                break
        if exited == last:
            token = int(head.logits(state[0].float()).argmax())
        result.tokens.append(token)
        result.exit_layers.append(exited)
        position += 1
    result.seconds = time.perf_counter() - started
    return result


def _check(head: Head, shortlist: Shortlist | None, mapped: torch.Tensor) -> tuple[int, float]:
    """(token, confidence) of a mapped state (1, d): the full check's or the shortlist's."""
    if shortlist is None:
        top = torch.softmax(head.logits(mapped), dim=-1).topk(2, dim=-1)
        return int(top.indices[0, 0]), float(top.values[0, 0] - top.values[0, 1])
    token, first, second = shortlist.check(head.features(mapped))
    return int(token[0]), float(first[0] - second[0])


def _full_logits(model: nn.Module, normed: torch.Tensor) -> torch.Tensor:
    """The model's own logits of states that already went through its final norm."""
    return model.get_output_embeddings()(normed)
