"""Models: resolve a config entry to weights (see sources.py for where they are looked for),
cache them once as safetensors, load the cache."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors.torch import save_model
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoTokenizer,
    PreTrainedModel,
)

from .adapters import get_adapter
from .decode import Head
from .io import CorruptFileError, atomic_dir, read_json
from .sources import Candidate, ModelSourceError, candidates


def _auto_class(config: transformers.PretrainedConfig) -> type:
    adapter = get_adapter(config.model_type)
    if adapter.task == "causal":
        return AutoModelForCausalLM
    if adapter.has_head(config.architectures or []):
        return AutoModelForMaskedLM
    return AutoModel


def _load(cand: Candidate, trust_remote_code: bool):
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if cand.gguf_file:
        kwargs["gguf_file"] = cand.gguf_file
    if cand.revision:
        kwargs["revision"] = cand.revision
    config = AutoConfig.from_pretrained(cand.location, **kwargs)
    get_adapter(config.model_type)  # fail early on an unsupported architecture
    model = _auto_class(config).from_pretrained(cand.location, dtype=torch.float32, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(cand.location, **kwargs)
    return model.eval(), tokenizer


def load_from_source(name: str, spec: dict[str, Any]):
    """Load (model, tokenizer, candidate) from the first source that works."""
    cands, tried = candidates(spec)
    for cand in cands:
        try:
            model, tokenizer = _load(cand, bool(spec.get("trust_remote_code", False)))
            return model, tokenizer, cand
        except Exception as exc:  # noqa: BLE001 - each failure is reported to the user
            reason = " ".join(str(exc).split())[:300]
            tried.append(f"{cand.describe()} ({type(exc).__name__}: {reason})")
    raise ModelSourceError(
        f"model '{name}' (source '{spec['source']}') could not be loaded; tried: "
        + "; ".join(tried)
    )


def has_decoder_head(model: PreTrainedModel) -> bool:
    try:
        get_adapter(model.config.model_type).head(model)
    except AttributeError:
        return False
    return True


def model_info(name: str, model: PreTrainedModel, tokenizer, source: str) -> dict[str, Any]:
    config = model.config
    adapter = get_adapter(config.model_type)
    blocks = adapter.blocks(model)
    max_pos = getattr(config, "max_position_embeddings", None) or getattr(
        config, "n_positions", None
    )
    embed = model.get_input_embeddings()
    return {
        "name": name,
        "source": source,
        "architecture": config.model_type,
        "model_class": type(model).__name__,
        "task": adapter.task,
        "has_lm_head": has_decoder_head(model),
        "num_layers": len(blocks),
        "hidden_size": int(config.hidden_size),
        "vocab_size": int(embed.num_embeddings),
        "max_positions": int(max_pos) if max_pos else None,
        "mask_token_id": tokenizer.mask_token_id,
        "parameters": sum(p.numel() for p in model.parameters()),
        "non_embedding_parameters": adapter.non_embedding_parameters(model),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }


MANIFEST = "manifest.json"  # {file: {"bytes": size, "crc32": checksum}} of a cached model


def _crc32(path: Path) -> str:
    value = 0
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 24):
            value = zlib.crc32(chunk, value)
    return f"{value:08x}"


def write_manifest(folder: Path) -> None:
    """List every file of a cached model with its size and checksum, in manifest.json."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != MANIFEST)
    manifest = {p.name: {"bytes": p.stat().st_size, "crc32": _crc32(p)} for p in files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def check_manifest(folder: str | Path) -> None:
    """Refuse a cached model whose files differ from its manifest (damaged, truncated, edited),
    naming the file and the command that rebuilds the cache."""
    folder = Path(folder)
    rebuild = f"delete the folder {folder} and rerun the workflow to cache the model again"
    if not (folder / MANIFEST).is_file():
        raise CorruptFileError(
            f"{folder}: no {MANIFEST} (damaged, or cached by an older jtc): {rebuild}"
        )
    for name, want in read_json(folder / MANIFEST).items():
        path = folder / name
        if not path.is_file():
            raise CorruptFileError(f"{path} is missing: {rebuild}")
        if path.stat().st_size != want["bytes"] or _crc32(path) != want["crc32"]:
            raise CorruptFileError(
                f"{path} is damaged (its size or checksum differs from {MANIFEST}): {rebuild}"
            )


def cache_model(name: str, spec: dict[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """Resolve a model; write config, safetensors weights, tokenizer and info.json to `out_dir`."""
    model, tokenizer, cand = load_from_source(name, spec)
    config = model.config
    if hasattr(config, "quantization_config"):  # GGUF weights are dequantised on load
        del config.quantization_config
    with atomic_dir(out_dir) as tmp:
        config.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"))
        tokenizer.save_pretrained(tmp)
        info = model_info(name, model, tokenizer, cand.describe())
        (tmp / "info.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        write_manifest(tmp)
    return info


def load_cached(model_dir: str | Path):
    """(model, tokenizer, info) from a folder written by cache_model, its files checked
    against its manifest first; no remote code is run."""
    model_dir = Path(model_dir)
    check_manifest(model_dir)
    info = read_json(model_dir / "info.json")
    config = AutoConfig.from_pretrained(model_dir)
    model = _auto_class(config).from_pretrained(model_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return model, tokenizer, info


def load_model(model_dir: str | Path, threads: int):
    """(model, tokenizer, info) of a cached model for a workflow job: torch limited to the
    job's threads, the model on the GPU when the job has one."""
    torch.set_num_threads(threads)
    net, tokenizer, info = load_cached(model_dir)
    if torch.cuda.is_available():
        net = net.cuda()
    return net, tokenizer, info


def model_head(net: PreTrainedModel, info: dict[str, Any], name: str) -> Head:
    """The decoder head of a loaded model (NoDecoderHead, naming `name`, if it has none)."""
    return Head.from_model(net, get_adapter(info["architecture"]), name)


def load_head(model_dir: str | Path, name: str, threads: int):
    """(decoder head, tokenizer, info) of a cached model, as load_model loads it."""
    net, tokenizer, info = load_model(model_dir, threads)
    return model_head(net, info, name), tokenizer, info
