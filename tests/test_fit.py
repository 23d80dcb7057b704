"""mat against scikit-learn; r² against r2_score."""

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression
from sklearn.metrics import r2_score as sk_r2

from jtc.fit import SourceSolver, fit_source
from jtc.io import CorruptFileError
from jtc.maps import ShortcutMap, load_maps, save_maps
from jtc.metrics import r2_score


def problem(n=400, d=24, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * rng.uniform(0.1, 10, size=d) + rng.normal(size=d) * 3
    ys = {t: x @ rng.normal(size=(d, d)) + rng.normal(size=(n, d)) * t + 2.0 for t in (1, 2, 3)}
    return x, ys


def test_mat_equals_sklearn_without_intercept():
    x, ys = problem()
    weights, method = fit_source(x, ys.items())
    assert method == "cholesky"
    for t, y in ys.items():
        ref = LinearRegression(fit_intercept=False).fit(x, y)
        np.testing.assert_allclose(weights[t], ref.coef_, rtol=1e-6, atol=1e-8)
        pred = ShortcutMap({"weight": weights[t]})(x)
        np.testing.assert_allclose(pred, ref.predict(x), rtol=1e-6, atol=1e-6)


def test_r2_equals_sklearn_uniform_average():
    x, ys = problem()
    weights, _ = fit_source(x[:300], ((t, y[:300]) for t, y in ys.items()))
    for t, y in ys.items():
        pred = ShortcutMap({"weight": weights[t]})(x[300:])
        assert abs(r2_score(y[300:], pred) - sk_r2(y[300:], pred)) < 1e-5
        assert abs(r2_score(y[300:], x[300:]) - sk_r2(y[300:], x[300:])) < 1e-5


def test_r2_constant_coordinates_follow_sklearn():
    rng = np.random.default_rng(1)
    y = rng.normal(size=(50, 4))
    y[:, 1] = 3.0
    pred = y + rng.normal(size=y.shape) * 0.1
    pred[:, 1] = 3.0  # exact on the constant coordinate
    assert abs(r2_score(y, pred) - sk_r2(y, pred)) < 1e-12
    pred[:, 1] = 2.0  # wrong on it
    assert abs(r2_score(y, pred) - sk_r2(y, pred)) < 1e-12


def test_dead_coordinates_count_as_constant():
    """A coordinate with values ~1e-32 (a dead dimension) must not swamp the mean."""
    rng = np.random.default_rng(3)
    y = rng.normal(size=(80, 4))
    y[:, 2] = rng.normal(size=80) * 1e-32
    pred = y + rng.normal(size=y.shape) * 0.1
    assert sk_r2(y, pred) < -1e20  # the plain formula explodes
    live = [0, 1, 3]
    expected = (sk_r2(y[:, live], pred[:, live]) * 3 + 0.0) / 4  # dead one: not exact -> 0
    assert abs(r2_score(y, pred) - expected) < 1e-12
    pred[:, 2] = y[:, 2] + 1e-40  # predicted to within the tolerance -> 1
    assert abs(r2_score(y, pred) - (expected * 4 + 1.0) / 4) < 1e-12


@pytest.mark.parametrize(
    "case", ["constant_dimension", "fewer_samples_than_width", "few_distinct_rows"]
)
def test_singular_gram_gives_minimum_norm_solution(case):
    rng = np.random.default_rng(2)
    if case == "constant_dimension":
        x = rng.normal(size=(100, 10))
        x[:, 3] = 0.0
    elif case == "few_distinct_rows":
        # like a masked LM's layer 0 at the mask: one state per position, repeated, plus
        # rounding-level noise that a plain pinv (cutoff 1e-15·σ_max) would invert
        states = rng.normal(size=(60, 128))
        x = states[rng.integers(60, size=2000)] + 1e-14 * rng.normal(size=(2000, 128))
    else:
        x = rng.normal(size=(6, 10))
    y = rng.normal(size=(len(x), 5))
    solver = SourceSolver(x)
    assert solver.method == "pinv"
    w = solver.solve(y)
    ref = np.linalg.lstsq(x, y, rcond=None)[0]
    np.testing.assert_allclose(w, ref, atol=1e-8)
    assert np.isfinite(w).all()
    # a state outside the training span gets a bounded prediction
    assert np.abs(rng.normal(size=x.shape[1]) @ w).max() < 100 * np.abs(y).max()


def test_maps_round_trip_and_corrupt_file(tmp_path):
    x, ys = problem(d=8)
    weights, _ = fit_source(x, ys.items())
    path = tmp_path / "from_0.safetensors"
    save_maps(path, weights, {"method": "mat", "source_layer": 0})
    loaded = load_maps(path)
    assert sorted(loaded) == [1, 2, 3]
    np.testing.assert_allclose(loaded[2].tensors["weight"], weights[2], rtol=1e-6)
    np.testing.assert_allclose(loaded[2](x), x @ weights[2].T, rtol=1e-5, atol=1e-4)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CorruptFileError, match="from_0.safetensors"):
        load_maps(path)


# The GPU path (torch, float64) against the CPU path (numpy, scipy): run on the CPU device
# everywhere, and on CUDA where a GPU is visible.
TORCH_DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(
                not __import__("torch").cuda.is_available(), reason="needs a CUDA device"
            ),
        ],
    ),
]


@pytest.mark.parametrize("device", TORCH_DEVICES)
@pytest.mark.parametrize("case", ["regular", "constant_dimension", "fewer_samples_than_width"])
def test_torch_fit_equals_the_cpu_path(device, case):
    import torch

    x, ys = problem()
    if case == "constant_dimension":
        x[:, 3] = 0.0
    elif case == "fewer_samples_than_width":
        x, ys = x[:10], {t: y[:10] for t, y in ys.items()}
    on_cpu, method = fit_source(x, ys.items())
    on_device, device_method = fit_source(x.astype(np.float32), ys.items(), torch.device(device))
    cpu32, _ = fit_source(x.astype(np.float32), ys.items())
    assert device_method == method == ("cholesky" if case == "regular" else "pinv")
    for t in ys:
        assert on_device[t].dtype == np.float32 and on_device[t].shape == (24, 24)
        scale = np.abs(cpu32[t]).max()
        assert np.abs(on_device[t] - cpu32[t]).max() <= 1e-6 * scale


@pytest.mark.parametrize("device", TORCH_DEVICES)
def test_torch_r2_equals_the_cpu_path(device, tmp_path):
    """r² on a torch device equals numpy's to 1e-8: fitted, low-rank normalised and id maps,
    constant and dead coordinates included."""
    import torch

    from jtc.metrics import layer_r2_table, shortcut_r2

    rng = np.random.default_rng(4)
    y = rng.normal(size=(80, 4))
    y[:, 1] = 3.0
    y[:, 2] = rng.normal(size=80) * 1e-32
    pred = y + rng.normal(size=y.shape) * 0.1
    pred[:, 1] = 3.0
    dev = torch.device(device)
    assert abs(shortcut_r2(y, pred, None, dev) - r2_score(y, pred)) < 1e-12
    x, ys = problem(d=8)
    states = [x.astype(np.float32)] + [ys[t].astype(np.float32) for t in (1, 2, 3)]
    mat, _ = fit_source(states[0], ((t, states[t]) for t in (1, 2, 3)))
    save_maps(tmp_path / "mat0.safetensors", mat, {"method": "mat", "source_layer": 0})
    low_rank = {
        t: {
            "norm.weight": rng.uniform(0.5, 2, 8),
            "norm.bias": rng.normal(size=8),
            "norm.running_mean": rng.normal(size=8),
            "norm.running_var": rng.uniform(0.5, 2, 8),
            "down.weight": rng.normal(size=(3, 8)),
            "up.weight": rng.normal(size=(8, 3)),
        }
        for t in (1, 2, 3)
    }
    save_maps(tmp_path / "nn0.safetensors", low_rank, {"method": "nnjtc", "source_layer": 0})
    for source in (1, 2):  # the later source layers' maps: mat's
        fitted, _ = fit_source(states[source], ((t, states[t]) for t in range(source + 1, 4)))
        save_maps(tmp_path / f"mat{source}.safetensors", fitted, {"source_layer": source})
    maps = {
        "id": [],
        "mat": [str(tmp_path / f"mat{s}.safetensors") for s in range(3)],
        "nnjtc": [str(tmp_path / "nn0.safetensors")]
        + [str(tmp_path / f"mat{s}.safetensors") for s in (1, 2)],
    }
    want = layer_r2_table(states, maps, model="m", corpus="c")
    got = layer_r2_table(states, maps, model="m", corpus="c", device=dev)
    assert got.drop(["r2"]).equals(want.drop(["r2"])) and len(want) == 18
    np.testing.assert_allclose(got["r2"].to_numpy(), want["r2"].to_numpy(), rtol=0, atol=1e-8)
