"""Where a job's work runs: `job_device`, the one rule for torch work (the GPU when one is
visible, else the CPU), and `linalg_device` for linear algebra (the GPU when the job has one,
else None: the CPU with numpy and scipy). Torch is imported only inside these functions, and by
`linalg_device` only where a GPU driver is present, so the torch-free jobs (fits, r² tables)
stay torch-free, and fast to start, on a CPU machine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

NVIDIA_DRIVER = Path("/dev/nvidiactl")


def job_device() -> torch.device:
    """The device of a job's torch work: the GPU when one is visible, else the CPU."""
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def linalg_device() -> torch.device | None:
    """The job's CUDA device, or None for the CPU path (no driver, no visible GPU, or
    JTC_LINALG_DEVICE=cpu)."""
    if os.environ.get("JTC_LINALG_DEVICE") == "cpu" or not NVIDIA_DRIVER.exists():
        return None
    if os.environ.get("CUDA_VISIBLE_DEVICES", "0").strip() in ("", "-1"):
        return None
    device = job_device()
    return device if device.type == "cuda" else None


def float64_on(device: torch.device, array) -> torch.Tensor:
    """A float64 tensor on `device` of an array or tensor: copied there as it is (float32 moves
    half the bytes), cast there; never a view of a read-only array."""
    import warnings

    import numpy as np
    import torch

    if isinstance(array, torch.Tensor):
        return array.to(device).to(torch.float64)
    values = np.asarray(array)
    if not values.flags.writeable:  # a memory-mapped file's: torch warns, and it is copied here
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.as_tensor(values).to(device=device, dtype=torch.float64, copy=True)
    return torch.as_tensor(values).to(device).to(torch.float64)
