"""Stage of workflow/rules/models.smk: resolve a model entry and cache it as safetensors."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def resolve_model(name: str, spec: dict, out: str) -> None:
    """Load the model from its source (hub id, folder, GGUF file, package folder) and cache it
    with its tokenizer and info.json."""
    from jtc.logs import ready
    from jtc.model.cache import cache_model

    ready()
    log.info("cached %s: %s", name, cache_model(name, spec, out))
