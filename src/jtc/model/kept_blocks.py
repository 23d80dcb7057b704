"""A model run with only some of its blocks: its config's per-layer settings (such as
layer_types, which Qwen2's and Gemma 3's forward passes read by position in the block list) made
to follow the blocks kept, for a pruned checkpoint or for the duration of a run.

Torch-free: it edits a transformers config object, and swaps block lists through the adapter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

# per-layer config lists that hold layer indices rather than one entry per layer
INDEX_LISTS = ("mlp_only_layers", "moe_layers")


def prune_config(config: Any, kept: Sequence[int], num_layers: int) -> None:
    """The config of a model with only blocks `kept` (0-based, of `num_layers`), in place."""
    config.num_hidden_layers = len(kept)
    new_index = {old: new for new, old in enumerate(kept)}
    for key, value in list(vars(config).items()):
        if not isinstance(value, list) or "layer" not in key:
            continue
        if key in INDEX_LISTS:
            setattr(config, key, [new_index[i] for i in value if i in new_index])
        elif len(value) == num_layers:  # one entry per layer (layer_types, no_rope_layers)
            setattr(config, key, [value[i] for i in kept])


@contextlib.contextmanager
def config_of_kept(config: Any, kept: Sequence[int], num_layers: int) -> Iterator[None]:
    """The config as it would be with only blocks `kept`, for the duration."""
    saved = {key: value for key, value in vars(config).items() if isinstance(value, list)}
    try:
        prune_config(config, list(kept), num_layers)
        yield
    finally:
        config.num_hidden_layers = num_layers
        for key, value in saved.items():
            setattr(config, key, value)


@contextlib.contextmanager
def running_only(model: Any, adapter: Any, kept: Sequence[int]) -> Iterator[list]:
    """The model runs only blocks `kept` (0-based, in order) for the duration: they stand in
    the backbone's block list, and the config's per-layer settings are theirs. Yields them."""
    blocks = adapter.blocks(model)
    modules = [blocks[b] for b in kept]
    original = adapter.swap_blocks(model, modules)
    try:
        with config_of_kept(model.config.get_text_config(), kept, len(blocks)):
            yield modules
    finally:
        adapter.swap_blocks(model, original)
