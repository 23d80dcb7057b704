"""The machine's GPU as nvidia-smi describes it, read while planning (torch-free, fast): the
GPU that a local job's "cuda" device will be, with its memory and compute capability."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MIB = 1.048576  # MB
DRIVER_DEVICES = (Path("/dev/nvidiactl"), Path("/dev/kfd"))  # NVIDIA's driver, AMD's (ROCm)
FIELDS = "index,uuid,name,memory.total"
FORMAT = "--format=csv,noheader,nounits"


@dataclass(frozen=True)
class LocalGpu:
    name: str
    memory_mb: float
    capability: tuple[int, int] | None  # None where the driver does not report it


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


def first_visible(listing: str, visible: str | None) -> LocalGpu | None:
    """The GPU that is a job's "cuda" device: the first of CUDA_VISIBLE_DEVICES (`visible`:
    indices or UUIDs, or a UUID's prefix; unset means every GPU) among nvidia-smi's lines of
    `index, uuid, name, memory.total[, compute_cap]` (memory in MiB). None where none is
    visible, and where the first visible one is not listed: a MIG slice, whose memory and
    capability this listing of whole GPUs does not tell."""
    gpus: list[tuple[str, str, LocalGpu]] = []
    for line in listing.strip().splitlines():
        index, uuid, rest = (field.strip() for field in line.split(",", 2))
        fields = [field.strip() for field in rest.rsplit(",", 2)]
        capability = None
        if len(fields) == 3:  # name, memory, compute capability
            major, _, minor = fields.pop().partition(".")
            capability = (int(major), int(minor or 0))
        name, memory = ", ".join(fields[:-1]), fields[-1]
        gpus.append((index, uuid, LocalGpu(name, float(memory) * MIB, capability)))
    if not gpus or _hides_every_gpu(visible):
        return None
    if visible is None:
        return gpus[0][2]
    first = visible.split(",")[0].strip()
    for index, uuid, gpu in gpus:
        if first in (index, uuid) or (first.startswith("GPU-") and uuid.startswith(first)):
            return gpu
    return None


def local_gpu() -> LocalGpu | None:
    """This machine's GPU as its local jobs will see it, or None: no nvidia-smi, no GPU visible,
    or nvidia-smi failing (no driver loaded). A driver too old to report the compute capability
    gives it as None."""
    smi = shutil.which("nvidia-smi")
    if smi is None or hidden_by_environment():
        return None
    for fields in (FIELDS + ",compute_cap", FIELDS):
        try:
            listing = subprocess.run(
                [smi, f"--query-gpu={fields}", FORMAT],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
            return first_visible(listing, os.environ.get("CUDA_VISIBLE_DEVICES"))
        except (OSError, subprocess.SubprocessError, ValueError):
            continue
    return None
