"""What the closed-form methods' map files keep (config maps: the maps into the last layer or
every pair; float32, bfloat16 or float16) and the r² their fit job scores as it solves them:
the same table, bit for bit, as scoring a file of every pair afterwards, whatever is kept."""

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from jtc.data.states import LayerStates, StateWriter, layer_file
from jtc.evaluation.r2 import layer_r2_table
from jtc.files.io import CorruptFileError, read_table, write_json
from jtc.files.tensors import TensorWriter, read_tensor_file, rounded, stored
from jtc.shortcuts.maps import load_map, load_maps, read_metadata
from jtc.shortcuts.storage import KEPT, STORED_R2, MapStorage
from jtc.stages.fit import fit_map

LAYERS, WIDTH = 4, 6
SETTINGS = {"mat": {}, "rrr": {"rank": 2, "targets": "all"}}


def states_dir(folder, rows, seed):
    """Random states of layers 0..LAYERS, each layer a noisy nonlinear map of the one before."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    h = rng.normal(size=(rows, WIDTH))
    ids = np.arange(rows) // 4
    positions = (np.arange(rows) % 4).astype(np.int32)
    for layer in range(LAYERS + 1):
        writer = StateWriter(layer_file(folder, layer), WIDTH, "float32", 1000)
        writer.write(ids, positions, h.astype(np.float32))
        writer.close()
        h = np.tanh(h @ rng.normal(size=(WIDTH, WIDTH))) + 0.1 * rng.normal(size=h.shape)
    write_json(folder / "info.json", {"num_layers": LAYERS, "hidden_size": WIDTH})
    return str(folder)


def fitted(tmp_path, name, maps):
    """fit_map's map files and r² tables for the storage settings `maps` (the same training and
    validation states for every call in a test)."""
    train, val = tmp_path / "train", tmp_path / "val"
    if not train.exists():
        states_dir(train, 160, 0), states_dir(val, 60, 1)
    outs = {m: str(tmp_path / name / f"{m}.safetensors") for m in SETTINGS}
    r2s = {m: str(tmp_path / name / f"{m}_r2.parquet") for m in SETTINGS}
    fit_map(str(train), str(val), outs, r2s, settings=SETTINGS, maps=maps, seed=0, model="m",
            corpus="c", threads=1)  # fmt: skip
    return outs, r2s, str(val)


def test_the_r2_scored_while_fitting_is_the_table_of_every_pair_bit_for_bit(tmp_path):
    every, _, val = fitted(tmp_path, "all", {"pairs": "all", "dtype": "float32"})
    last, r2s, _ = fitted(tmp_path, "last", {"pairs": "last", "dtype": "float32"})
    states = LayerStates(val, np.float64)[:]
    # the table as the r2_table job made it from a file of every pair, and as it is made now
    before = layer_r2_table(states, {"id": None, **every}, model="m", corpus="c")
    scored = {m: read_table(p) for m, p in r2s.items()}
    after = layer_r2_table(states, {"id": None}, model="m", corpus="c", scored=scored)
    assert after.equals(before)
    assert len(before) == 3 * LAYERS * (LAYERS + 1) // 2
    # the kept maps are the same bytes; the others are not in the file, and asking says why
    for method in SETTINGS:
        assert read_metadata(last[method])[KEPT] == "last"
        for source in range(LAYERS):
            assert list(load_maps(last[method], source)) == [LAYERS]
            for part, value in load_map(last[method], source, LAYERS).tensors.items():
                assert np.array_equal(value, load_map(every[method], source, LAYERS).tensors[part])
        with pytest.raises(CorruptFileError, match="maps.pairs: all keeps every pair"):
            load_map(last[method], 0, 1)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_maps_record_their_own_r2_and_read_back_as_rounded(tmp_path, dtype):
    every, r2s, val = fitted(tmp_path, "f32", {"pairs": "last", "dtype": "float32"})
    half, half_r2s, _ = fitted(tmp_path, dtype, {"pairs": "last", "dtype": dtype})
    # the r² table is the float32 maps' whatever the type stored
    for method in SETTINGS:
        assert read_table(half_r2s[method]).equals(read_table(r2s[method]))
    for method in SETTINGS:
        meta = read_metadata(half[method])
        assert meta["dtype"] == dtype and set(meta[STORED_R2]) == {
            f"{s}->{LAYERS}" for s in range(LAYERS)
        }
        for source in range(LAYERS):
            full = load_map(every[method], source, LAYERS)
            small = load_map(half[method], source, LAYERS)
            for part, value in small.tensors.items():
                assert np.array_equal(value, rounded(full.tensors[part], dtype))
            # the stored map's r² is its own, a little off the float32 map's
            want = meta[STORED_R2][f"{source}->{LAYERS}"]
            table = read_table(r2s[method]).to_pylist()
            fitted_r2 = next(
                r["r2"] for r in table if (r["source_layer"], r["target_layer"]) == (source, LAYERS)
            )
            assert want != fitted_r2 and abs(want - fitted_r2) < 0.05
        # read by safetensors' own torch loader in its type
        tensors = load_file(half[method])
        assert all(t.dtype == getattr(torch, dtype) for t in tensors.values())


def test_tensor_files_in_16_bits_are_checked_and_refuse_what_they_cannot_hold(tmp_path):
    values = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32) * 100
    for dtype in ("float32", "float16", "bfloat16"):
        path = tmp_path / f"{dtype}.safetensors"
        writer = TensorWriter(path, dtype)
        writer.add("a", values)
        writer.close({"format": "test"})
        tensors, _ = read_tensor_file(path, "test", "test")
        assert np.array_equal(np.asarray(tensors["a"], np.float32), rounded(values, dtype))
        # torch rounds the same way
        torch_rounded = torch.from_numpy(values).to(getattr(torch, dtype)).float().numpy()
        assert np.array_equal(rounded(values, dtype), torch_rounded)
        # one byte of the data changed: the checksum names the tensor
        raw = bytearray(path.read_bytes())
        raw[-3] ^= 0x10
        path.write_bytes(bytes(raw))
        with pytest.raises(CorruptFileError, match="'a' does not match its checksum"):
            read_tensor_file(path, "test", "test")
    with pytest.raises(OverflowError, match="float16 cannot hold a value of magnitude 1e"):
        stored(np.array([1e5], np.float32), "float16")
    assert np.isfinite(rounded(np.array([1e5, 3e38], np.float32), "bfloat16")).all()


def test_a_map_storage_setting_is_checked():
    assert MapStorage.of({"pairs": "last", "dtype": "bfloat16"}).keeps(3, 3)
    assert not MapStorage.of({"pairs": "last", "dtype": "float32"}).keeps(2, 3)
    assert MapStorage().keeps(1, 3)
    with pytest.raises(ValueError, match="maps.dtype 'int8'"):
        MapStorage(dtype="int8")


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param("cuda", marks=pytest.mark.cuda),
    ],
)
def test_scoring_while_fitting_on_a_torch_device_agrees_with_the_cpu(tmp_path, monkeypatch, device):
    """The torch path (the GPU's; here also on the CPU through torch) scores the same r² to
    1e-6 and keeps the same pairs, in 16 bits too."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    maps = {"pairs": "last", "dtype": "bfloat16"}
    _, numpy_r2s, _ = fitted(tmp_path, "numpy", maps)
    monkeypatch.setattr("jtc.devices.linalg_device", lambda: torch.device(device))
    torch_maps, torch_r2s, _ = fitted(tmp_path, "torch", maps)
    for method in SETTINGS:
        want, got = (read_table(f[method]) for f in (numpy_r2s, torch_r2s))
        assert got.drop(["r2"]).equals(want.drop(["r2"]))
        np.testing.assert_allclose(got["r2"].to_numpy(), want["r2"].to_numpy(), atol=1e-6)
        assert len(read_metadata(torch_maps[method])[STORED_R2]) == LAYERS
