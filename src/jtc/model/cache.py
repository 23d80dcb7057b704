"""Models: resolve a config entry to weights (see sources.py for where they are looked for),
cache them once as safetensors, load the cache. A cached model's decoder head alone comes from
jtc.model.head.load_decoder_head."""

from __future__ import annotations

import importlib.util
import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors.torch import save_model
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel

from jtc.devices import job_device
from jtc.files.io import atomic_dir, read_json
from jtc.model.adapters import Adapter, UnsupportedArchitecture
from jtc.model.classes import auto_class, task_of
from jtc.model.discover import find_adapter
from jtc.model.gguf_header import GGUFHeaderError, read_shape
from jtc.model.head import describe
from jtc.model.joined import join
from jtc.model.manifest import check_manifest, write_manifest
from jtc.model.sources import (
    Candidate,
    ModelSourceError,
    candidates,
    reference_problem,
    referenced_files,
)

# a model's compute dtype (models.NAME.dtype): the type of its cached weights and forward passes
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ComputeError(RuntimeError):
    """A model's dtype or device_map that this job's machine cannot run."""


def compute_problem(
    name: str, dtype: str, device_map: str | None, device: torch.device
) -> str | None:
    """Why a model cannot run in `dtype` (and with `device_map`) on `device`, or None."""
    if dtype not in DTYPES:
        return f"model '{name}': models.{name}.dtype '{dtype}' is not one of {', '.join(DTYPES)}"
    if device_map is not None:
        if device.type != "cuda":
            return (
                f"model '{name}': models.{name}.device_map '{device_map}' spreads the model "
                "over GPUs, but this job sees no CUDA device"
            )
        if importlib.util.find_spec("accelerate") is None:
            return f"model '{name}': models.{name}.device_map needs the accelerate package"
    if device.type == "cuda" and dtype == "bfloat16" and not _native_bf16():
        return (
            f"model '{name}': models.{name}.dtype bfloat16 is not supported by this GPU "
            f"({torch.cuda.get_device_name(device)}); use float16 or float32"
        )
    return None


def _native_bf16() -> bool:
    """Whether the GPU computes in bfloat16 itself (NVIDIA Ampere and later), not emulated."""
    try:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:  # a torch without the argument never counted emulation
        return torch.cuda.is_bf16_supported()


def _load(cand: Candidate, trust_remote_code: bool, dtype: str = "float32"):
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if cand.gguf_file:
        kwargs["gguf_file"] = cand.gguf_file
    if cand.revision:
        kwargs["revision"] = cand.revision
    config = AutoConfig.from_pretrained(cand.location, **kwargs)
    task = task_of(config)  # fails early on an unsupported architecture
    model = auto_class(config).from_pretrained(cand.location, dtype=DTYPES[dtype], **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(cand.location, **kwargs)
    return model.eval(), tokenizer, find_adapter(model.eval(), task)


# a GGUF model's peak while transformers dequantises it, over its weights in the compute dtype
# (measured on Qwen2.5 0.5B and 1.5B, float32, 2026-11-28: 1.55 and 1.28)
LOAD_PEAK = 1.3


def available_memory() -> int | None:
    """Bytes this process may still allocate: the lesser of MemAvailable (/proc/meminfo) and
    its cgroup's limit less its usage; None where neither can be read."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max":
            found.append(int(limit) - used)
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def memory_problem(name: str, cand: Candidate, dtype: str) -> str | None:
    """Before loading a GGUF model: too little memory to load it (its parameters, from the
    file's header, in the compute dtype, times LOAD_PEAK), said with the model's size."""
    if not cand.gguf_file:
        return None
    path = Path(cand.location) / cand.gguf_file
    try:
        parameters = read_shape(path).parameters
    except (OSError, GGUFHeaderError):
        return None  # transformers reports what is wrong with the file
    weights = parameters * DTYPES[dtype].itemsize
    need, free = weights * LOAD_PEAK, available_memory()
    if free is None or free >= need:
        return None
    return (
        f"model '{name}': {parameters / 1e9:.2f}B parameters, {weights / 1e9:.1f} GB in {dtype}; "
        f"loading them needs about {need / 1e9:.1f} GB and this machine has "
        f"{free / 1e9:.1f} GB available: free memory, run fewer jobs at once (--cores), or set "
        f"models.{name}.dtype: bfloat16 (half the memory)"
    )


def load_from_source(name: str, spec: dict[str, Any]):
    """Load (model, tokenizer, candidate, adapter) from the first source that works: a
    "parts:" source joined first, a GGUF file's size checked against the memory there is."""
    cands, tried = candidates(spec)
    dtype = spec.get("dtype", "float32")
    for cand in cands:
        if cand.kind == "parts":
            join(name, spec)  # a wrong or missing part is refused, naming it
        problem = memory_problem(name, cand, dtype)
        if problem:
            raise ModelSourceError(problem)
        try:
            trust = bool(spec.get("trust_remote_code", False))
            model, tokenizer, adapter = _load(cand, trust, dtype)
            return model, tokenizer, cand, adapter
        except UnsupportedArchitecture as exc:  # the same wherever the weights come from
            raise UnsupportedArchitecture(f"model '{name}': {exc}") from None
        except Exception as exc:  # noqa: BLE001 - each failure is reported to the user
            reason = " ".join(str(exc).split())[:300]
            tried.append(f"{cand.describe()} ({type(exc).__name__}: {reason})")
    raise ModelSourceError(
        f"model '{name}' (source '{spec['source']}') could not be loaded; tried: "
        + "; ".join(tried)
    )


def has_decoder_head(model: PreTrainedModel, adapter: Adapter) -> bool:
    try:
        adapter.head(model)
    except AttributeError:
        return False
    return True


def model_info(
    name: str, model: PreTrainedModel, tokenizer, source: str, adapter: Adapter | None = None
) -> dict[str, Any]:
    """What info.json says of a loaded model (`adapter`: found from the model if not given)."""
    config = model.config
    adapter = adapter or find_adapter(model, task_of(config))
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
        "has_lm_head": has_decoder_head(model, adapter),
        "adapter": adapter.to_json(),
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


def _same_tensors_problem(model: PreTrainedModel, files: list[Path]) -> str | None:
    """Why the model as loaded does not hold exactly the tensors of the safetensors files it
    would reference (cache: reference), or None: each of its tensors (one name of each tied
    group) must be stored under its name, in its shape, with its values. Not so where
    transformers renames, fuses or converts a checkpoint's tensors as it loads them: the head
    and the model would then not read what the cache says."""
    from safetensors import safe_open

    with ExitStack() as stack:
        where = {}  # tensor name: the open file that holds it
        for path in files:
            if path.suffix == ".safetensors":
                handle = stack.enter_context(safe_open(path, "pt"))
                where.update(dict.fromkeys(handle.keys(), handle))
        groups: dict[int, list[str]] = {}
        state = model.state_dict(keep_vars=True)  # the parameters themselves: tied ones are one
        for tensor_name, tensor in state.items():
            groups.setdefault(id(tensor), []).append(tensor_name)
        for names in groups.values():
            present = [n for n in names if n in where]
            if not present:
                return f"tensor {names[0]} is not in the source's safetensors files"
            stored, held = where[present[0]].get_tensor(present[0]), state[names[0]].detach()
            if stored.shape != held.shape or not torch.equal(stored.to(held.dtype), held.cpu()):
                return (
                    f"tensor {present[0]} is stored as {stored.dtype} {list(stored.shape)} and "
                    f"loaded as {held.dtype} {list(held.shape)}, or with other values"
                )
    return None


def cache_model(name: str, spec: dict[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """Resolve a model; write config, safetensors weights, tokenizer and info.json to `out_dir`.
    With models.NAME.cache: reference, no weights: the manifest lists the source folder's
    weights files (their paths, sizes, checksums), which load_cached reads in place."""
    reference = spec.get("cache", "copy") == "reference"
    problem = reference_problem(name, spec)
    if problem:
        raise ModelSourceError(problem)
    model, tokenizer, cand, adapter = load_from_source(name, spec)
    config = model.config
    if hasattr(config, "quantization_config"):  # GGUF weights are dequantised on load
        del config.quantization_config
    referenced: list[Path] = []
    if reference:
        found = referenced_files(Path(cand.location))
        if isinstance(found, str):  # (changed since reference_problem read it)
            raise ModelSourceError(f"model '{name}': the source '{spec['source']}': {found}")
        referenced = found
        problem = _same_tensors_problem(model, referenced)
        if problem:
            raise ModelSourceError(
                f"config key 'models.{name}.cache': reference reads the weights in place, but "
                f"transformers changes them as it loads them from '{spec['source']}' "
                f"({problem}); set models.{name}.cache: copy (the default) to cache them as "
                "loaded"
            )
    with atomic_dir(out_dir) as tmp:
        config.save_pretrained(tmp)
        if not reference:
            save_model(model, str(tmp / "model.safetensors"))
        tokenizer.save_pretrained(tmp)
        info = model_info(name, model, tokenizer, cand.describe(), adapter)
        info["dtype"] = spec.get("dtype", "float32")
        if reference:  # (a copy's info.json stays as it was before the key existed)
            info["cache"] = "reference"
            info["weights_folder"] = str(Path(cand.location).resolve())
        try:
            transform, unembedding = adapter.head(model)
        except AttributeError:  # no decoder head (r² only)
            pass
        else:  # the head as plain operations, for the jobs that only decode (jtc.model.head)
            head = describe(
                model, transform, unembedding, adapter.logit_scale, adapter.logit_softcap
            )
            if head is not None:
                info["head"] = head
        (tmp / "info.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        write_manifest(tmp, referenced)
    return info


def load_cached(
    model_dir: str | Path, device: torch.device | None = None, device_map: str | None = None
):
    """(model, tokenizer, info) from a folder written by cache_model, its files checked
    against its manifest first; no remote code is run. The model runs in its cached dtype
    (models.NAME.dtype), on `device` (default the CPU) or spread by `device_map`
    (models.NAME.device_map: where the model runs, not what is cached). A cache that
    references its weights (models.NAME.cache: reference) reads them from its source folder,
    checked against its manifest like its own files."""
    model_dir = Path(model_dir)
    check_manifest(model_dir)
    info = read_json(model_dir / "info.json")
    dtype = info.get("dtype", "float32")
    device = device or torch.device("cpu")
    problem = compute_problem(info.get("name", model_dir.name), dtype, device_map, device)
    if problem:
        raise ComputeError(problem)
    config = AutoConfig.from_pretrained(model_dir)
    kwargs: dict[str, Any] = {"dtype": DTYPES[dtype]}
    if device_map is not None:
        kwargs["device_map"] = device_map
    weights: Path = model_dir
    if info.get("cache") == "reference":  # the checked files, and no other (no hub, no pickle)
        weights = Path(info["weights_folder"])
        kwargs.update(config=config, use_safetensors=True, local_files_only=True)
    model = auto_class(config).from_pretrained(weights, **kwargs).eval()
    if device_map is None and device.type != "cpu":
        model = model.to(device)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return model, tokenizer, info


def load_model(model_dir: str | Path, threads: int, device_map: str | None = None):
    """(model, tokenizer, info) of a cached model for a workflow job: torch limited to the
    job's threads, the model on the GPU when the job has one (or spread by `device_map`)."""
    torch.set_num_threads(threads)
    return load_cached(model_dir, job_device(), device_map)
