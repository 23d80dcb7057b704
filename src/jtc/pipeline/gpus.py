"""The machine's GPU as nvidia-smi describes it, read once a run's executor is known (torch-free,
fast): the GPU that a local job's "cuda" device will be, with its memory and compute
capability."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MIB = 1.048576  # MB
DRIVER_DEVICES = (Path("/dev/nvidiactl"), Path("/dev/kfd"))  # NVIDIA's driver, AMD's (ROCm)
# what is asked of nvidia-smi: everything, then what a driver too old for the rest still tells
QUERIES = (
    ("index", "uuid", "name", "memory.total", "mig.mode.current", "compute_cap"),
    ("index", "uuid", "name", "memory.total"),
)


@dataclass(frozen=True)
class LocalGpu:
    name: str
    memory_mb: float
    capability: tuple[int, int] | None  # None where the driver does not report it


@dataclass(frozen=True)
class _Listed:
    index: str
    uuid: str
    gpu: LocalGpu
    mig: bool  # split into MIG slices: CUDA's devices are the slices, not this GPU


def _hides_every_gpu(visible: str | None) -> bool:
    return visible is not None and visible.split(",")[0].strip() in ("", "-1")


def hidden_by_environment() -> bool:
    """Whether CUDA_VISIBLE_DEVICES hides every GPU from the jobs ("" or -1)."""
    return _hides_every_gpu(os.environ.get("CUDA_VISIBLE_DEVICES"))


def no_gpu_for_jobs(gpu: LocalGpu | None) -> bool:
    """Whether this machine's jobs surely see no GPU (`gpu`: local_gpu()'s answer):
    CUDA_VISIBLE_DEVICES hides them all, or nvidia-smi found none and there is no GPU driver."""
    return hidden_by_environment() or (
        gpu is None and not any(device.exists() for device in DRIVER_DEVICES)
    )


def _parse_line(line: str, fields: tuple[str, ...]) -> _Listed | None:
    """One line of nvidia-smi's csv listing of `fields` (index, uuid, name, then the rest);
    None where a value is missing ([N/A]) or malformed. A name may hold commas: the fields
    after it are counted from the end."""
    values = [value.strip() for value in line.split(",")]
    rest = len(fields) - 3
    if len(values) < len(fields):
        return None
    named = dict(zip(fields[3:], values[len(values) - rest :], strict=True))
    try:
        memory = float(named["memory.total"]) * MIB
        capability = None
        if "compute_cap" in named:
            major, minor = named["compute_cap"].split(".")
            capability = (int(major), int(minor))
    except ValueError:
        return None
    return _Listed(
        index=values[0],
        uuid=values[1],
        gpu=LocalGpu(", ".join(values[2 : len(values) - rest]), memory, capability),
        mig=named.get("mig.mode.current", "").lower() == "enabled",
    )


def first_visible(
    listing: str, fields: tuple[str, ...], visible: str | None, order: str | None = None
) -> LocalGpu | None:
    """The GPU that is a job's "cuda" device, from nvidia-smi's csv listing of `fields`: the
    first of CUDA_VISIBLE_DEVICES (`visible`: indices, UUIDs or a UUID's prefix; unset means
    every GPU, so device 0), with CUDA_DEVICE_ORDER `order`. None where it cannot be told: no
    GPU visible; a MIG slice (its memory is not in this listing of whole GPUs); its line
    unreadable. nvidia-smi numbers GPUs by bus, CUDA fastest first unless `order` is
    PCI_BUS_ID: where an index decides and the GPUs differ, the answer is the least of them
    (the smallest memory; the capability only where all agree)."""
    if _hides_every_gpu(visible):
        return None
    listed = [_parse_line(line, fields) for line in listing.strip().splitlines() if line.strip()]
    first = "0" if visible is None else visible.split(",")[0].strip()
    if first.startswith("MIG-"):
        return None
    if first.startswith("GPU-"):
        chosen = [x for x in listed if x is not None and x.uuid.startswith(first)]
    elif order == "PCI_BUS_ID" or (None not in listed and len({x.gpu for x in listed}) == 1):
        chosen = [x for x in listed if x is not None and x.index == first]
    else:  # the index may name any of these GPUs
        chosen = listed
    if not chosen or any(x is None or x.mig for x in chosen):
        return None
    if len(chosen) == 1:
        return chosen[0].gpu
    capabilities = {x.gpu.capability for x in chosen}
    return LocalGpu(
        "one of " + ", ".join(sorted({x.gpu.name for x in chosen})),
        min(x.gpu.memory_mb for x in chosen),
        capabilities.pop() if len(capabilities) == 1 else None,
    )


def local_gpu() -> LocalGpu | None:
    """This machine's GPU as its local jobs will see it, or None: no nvidia-smi, no GPU visible,
    one that cannot be told (first_visible), or nvidia-smi failing (no driver loaded)."""
    smi = shutil.which("nvidia-smi")
    if smi is None or hidden_by_environment():
        return None
    for fields in QUERIES:
        try:
            listing = subprocess.run(
                [smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        return first_visible(
            listing,
            fields,
            os.environ.get("CUDA_VISIBLE_DEVICES"),
            os.environ.get("CUDA_DEVICE_ORDER"),
        )
    return None
