"""The machine's GPU as the workflow reads it while planning (nvidia-smi, faked here), and what
it refuses before any job runs: a device_map where the jobs see no GPU, bfloat16 on a GPU
without it."""

import pytest
from fake_gpu import fake_nvidia_smi

from jtc.pipeline import gpus
from jtc.pipeline.gpus import MIB, QUERIES, LocalGpu, first_visible, local_gpu, no_gpu_for_jobs
from jtc.pipeline.planning import gpu_problem

FIELDS = QUERIES[0]  # index, uuid, name, memory.total, mig.mode.current, compute_cap
LISTING = (
    "0, GPU-1111-aaaa, Tesla V100-SXM2-32GB, 32768, [N/A], 7.0\n"
    "1, GPU-2222-bbbb, NVIDIA H100 80GB HBM3, 81559, Disabled, 9.0\n"
)
V100 = LocalGpu("Tesla V100-SXM2-32GB", 32768 * MIB, (7, 0))
H100 = LocalGpu("NVIDIA H100 80GB HBM3", 81559 * MIB, (9, 0))
# CUDA numbers these two fastest first, nvidia-smi by bus: by index, either may be device 0
EITHER = LocalGpu("one of NVIDIA H100 80GB HBM3, Tesla V100-SXM2-32GB", 32768 * MIB, None)


@pytest.mark.parametrize(
    ("visible", "order", "gpu"),
    [
        (None, "PCI_BUS_ID", V100),  # every GPU visible: the job's "cuda" is device 0
        ("1", "PCI_BUS_ID", H100),
        ("1,0", "PCI_BUS_ID", H100),
        ("GPU-2222-bbbb", None, H100),  # a UUID names one GPU whatever the order
        ("GPU-2222", None, H100),  # a UUID's prefix, as CUDA takes it
        (None, None, EITHER),
        ("1", None, EITHER),
        ("MIG-3333", None, None),  # a MIG slice: its memory is not in the listing
        ("GPU-9999", None, None),  # not listed
        ("", None, None),
        ("-1", "PCI_BUS_ID", None),
    ],
)
def test_the_gpu_is_the_first_of_cuda_visible_devices(visible, order, gpu):
    assert first_visible(LISTING, FIELDS, visible, order) == gpu


def test_identical_gpus_need_no_device_order():
    twins = "".join(f"{i}, GPU-{i}, NVIDIA H100 80GB HBM3, 81559, Disabled, 9.0\n" for i in (0, 1))
    assert first_visible(twins, FIELDS, "1") == H100


def test_unreadable_lines_mig_old_drivers_and_commas_in_names():
    bad_other = (
        "0, GPU-1, Odd GPU, [N/A], [N/A], [N/A]\n"
        "1, GPU-2, NVIDIA H100 80GB HBM3, 81559, Disabled, 9.0\n"
    )
    assert first_visible(bad_other, FIELDS, "1", "PCI_BUS_ID") == H100  # its own line is fine
    assert first_visible(bad_other, FIELDS, "0", "PCI_BUS_ID") is None
    assert first_visible(bad_other, FIELDS, None) is None  # device 0 may be the unreadable one
    mig = "0, GPU-1, NVIDIA A100-SXM4-80GB, 81920, Enabled, 8.0\n"
    assert first_visible(mig, FIELDS, None) is None  # CUDA's device 0 is a slice of it
    old = "0, GPU-1, Tesla K80, 11441\n"
    assert first_visible(old, QUERIES[1], None) == LocalGpu("Tesla K80", 11441 * MIB, None)
    gpu = first_visible("0, GPU-1, Odd, Name, 24576, Disabled, 8.6\n", FIELDS, None)
    assert gpu == LocalGpu("Odd, Name", 24576 * MIB, (8, 6))
    assert first_visible("", FIELDS, None) is None


def test_local_gpu_asks_nvidia_smi_and_falls_back_for_an_old_driver(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert local_gpu() is None  # no nvidia-smi
    for key, value in fake_nvidia_smi(tmp_path / "new", 40960, "8.0", "NVIDIA A100").items():
        monkeypatch.setenv(key, value)
    assert local_gpu() == LocalGpu("NVIDIA A100", 40960 * MIB, (8, 0))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert local_gpu() is None
    for key, value in fake_nvidia_smi(tmp_path / "mig", mig=True).items():
        monkeypatch.setenv(key, value)
    assert local_gpu() is None
    for key, value in fake_nvidia_smi(tmp_path / "old", 12288, old_driver=True).items():
        monkeypatch.setenv(key, value)
    assert local_gpu().capability is None and local_gpu().memory_mb == 12288 * MIB
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
