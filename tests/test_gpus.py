"""The machine's GPU as the workflow reads it while planning (nvidia-smi, faked here), and what
it refuses before any job runs: a device_map where the jobs see no GPU, bfloat16 on a GPU
without it."""

import pytest
from fake_gpu import fake_nvidia_smi

from jtc import gpus
from jtc.gpus import MIB, LocalGpu, first_visible, local_gpu, no_gpu_for_jobs
from jtc.planning import gpu_problem

LISTING = (
    "0, GPU-1111-aaaa, NVIDIA H100 80GB HBM3, 81559, 9.0\n"
    "1, GPU-2222-bbbb, Tesla V100-SXM2-32GB, 32768, 7.0\n"
)
H100 = LocalGpu("NVIDIA H100 80GB HBM3", 81559 * MIB, (9, 0))
V100 = LocalGpu("Tesla V100-SXM2-32GB", 32768 * MIB, (7, 0))


@pytest.mark.parametrize(
    ("visible", "gpu"),
    [
        (None, H100),  # every GPU visible: the job's "cuda" is GPU 0
        ("1", V100),
        ("1,0", V100),
        ("GPU-2222-bbbb", V100),
        ("GPU-2222", V100),  # a UUID prefix, as CUDA takes it
        ("MIG-3333", None),  # a MIG slice: its memory is not in the listing
        ("", None),
        ("-1", None),
    ],
)
def test_the_gpu_is_the_first_of_cuda_visible_devices(visible, gpu):
    found = first_visible(LISTING, visible)
    assert found == (None if gpu is None else pytest.approx(gpu))


def test_a_listing_without_compute_capability_or_with_a_comma_in_the_name():
    assert first_visible("0, GPU-1, Tesla K80, 11441\n", None) == LocalGpu(
        "Tesla K80", pytest.approx(11441 * MIB), None
    )
    gpu = first_visible("0, GPU-1, Odd, Name, 24576, 8.6\n", None)
    assert gpu.name == "Odd, Name" and gpu.capability == (8, 6)
    assert first_visible("", None) is None


def test_local_gpu_asks_nvidia_smi_and_falls_back_for_an_old_driver(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert local_gpu() is None  # no nvidia-smi
    for key, value in fake_nvidia_smi(tmp_path / "new", 40960, "8.0", "NVIDIA A100").items():
        monkeypatch.setenv(key, value)
    assert local_gpu() == LocalGpu("NVIDIA A100", pytest.approx(40960 * MIB), (8, 0))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert local_gpu() is None
    for key, value in fake_nvidia_smi(tmp_path / "old", 12288, old_driver=True).items():
        monkeypatch.setenv(key, value)
    assert local_gpu().capability is None and local_gpu().memory_mb == pytest.approx(12288 * MIB)
    (tmp_path / "old" / "nvidia-smi").write_text("#!/bin/sh\necho 'no driver' >&2\nexit 9\n")
    assert local_gpu() is None


def test_no_gpu_for_jobs_needs_neither_a_listed_gpu_nor_a_driver(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(gpus, "DRIVER_DEVICES", (tmp_path / "nvidiactl",))
    assert no_gpu_for_jobs(None)
    assert not no_gpu_for_jobs(H100)
    (tmp_path / "nvidiactl").touch()  # a driver, though nvidia-smi is missing
    assert not no_gpu_for_jobs(None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert no_gpu_for_jobs(H100)


def test_planning_refuses_what_this_machines_gpu_cannot_run(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(gpus, "DRIVER_DEVICES", (tmp_path / "nvidiactl",))
    asked = []

    def finder(gpu):
        return lambda: asked.append(gpu) or gpu

    plain = {"m": {"dtype": "float32"}}
    assert gpu_problem(plain, finder(None)) is None and not asked  # nvidia-smi not even asked
    spread = {"big": {"dtype": "bfloat16", "device_map": "auto"}}
    message = gpu_problem(spread, finder(None))
    assert "model 'big': models.big.device_map 'auto'" in message and "no CUDA device" in message
    assert gpu_problem(spread, finder(H100)) is None
    half = {"m": {"dtype": "bfloat16"}}
    message = gpu_problem(half, finder(V100))
    assert "models.m.dtype bfloat16 is not supported by this GPU" in message
    assert "Tesla V100-SXM2-32GB, compute capability 7.0" in message
    assert gpu_problem(half, finder(H100)) is None
    assert gpu_problem(half, finder(None)) is None  # bfloat16 on the CPU: slow, but it runs
    old_driver = LocalGpu("Tesla V100", 16e3, None)
    assert gpu_problem(half, finder(old_driver)) is None  # unknown: the job checks it
