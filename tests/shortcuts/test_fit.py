"""mat against scikit-learn; rrr against a plain numpy reduced-rank regression; r² against
r2_score."""

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression
from sklearn.metrics import r2_score as sk_r2

from jtc.files.io import CorruptFileError
from jtc.shortcuts.closed_form import (
    SourceSolver,
    fit_source,
    fit_source_reduced_rank,
    least_squares_affine,
    reduced_rank,
    reduced_rank_affine,
)
from jtc.shortcuts.maps import ShortcutMap, load_maps, save_maps
from jtc.shortcuts.quality import r2_score


def problem(n=400, d=24, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * rng.uniform(0.1, 10, size=d) + rng.normal(size=d) * 3
    ys = {t: x @ rng.normal(size=(d, d)) + rng.normal(size=(n, d)) * t + 2.0 for t in (1, 2, 3)}
    return x, ys


def test_mat_equals_sklearn_without_intercept():
    x, ys = problem()
    weights, method, _ = fit_source(x, ys.items())
    assert method == "cholesky"
    for t, y in ys.items():
        ref = LinearRegression(fit_intercept=False).fit(x, y)
        np.testing.assert_allclose(weights[t], ref.coef_, rtol=1e-6, atol=1e-8)
        pred = ShortcutMap({"weight": weights[t]})(x)
        np.testing.assert_allclose(pred, ref.predict(x), rtol=1e-6, atol=1e-6)


def test_r2_equals_sklearn_uniform_average():
    x, ys = problem()
    weights, _, _ = fit_source(x[:300], ((t, y[:300]) for t, y in ys.items()))
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
    weights, _, _ = fit_source(x, ys.items())
    path = tmp_path / "mat.safetensors"
    save_maps(path, {0: weights}, {"method": "mat"})
    loaded = load_maps(path, 0)
    assert sorted(loaded) == [1, 2, 3]
    np.testing.assert_allclose(loaded[2].tensors["weight"], weights[2], rtol=1e-6)
    np.testing.assert_allclose(loaded[2](x), x @ weights[2].T, rtol=1e-5, atol=1e-4)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CorruptFileError, match="mat.safetensors"):
        load_maps(path, 0)


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
    on_cpu, method, _ = fit_source(x, ys.items())
    on_device, device_method, _ = fit_source(x.astype(np.float32), ys.items(), torch.device(device))
    cpu32, _, _ = fit_source(x.astype(np.float32), ys.items())
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

    from jtc.evaluation.r2 import layer_r2_table
    from jtc.shortcuts.quality import shortcut_r2

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
    mat = {
        source: fit_source(states[source], ((t, states[t]) for t in range(source + 1, 4)))[0]
        for source in range(3)
    }
    save_maps(tmp_path / "mat.safetensors", mat, {"method": "mat"})
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
    # from layer 0 low-rank normalised maps, from the later layers mat's
    save_maps(tmp_path / "nnjtc.safetensors", {**mat, 0: low_rank}, {"method": "nnjtc"})
    maps = {
        "id": None,
        "mat": str(tmp_path / "mat.safetensors"),
        "nnjtc": str(tmp_path / "nnjtc.safetensors"),
    }
    want = layer_r2_table(states, maps, model="m", corpus="c")
    got = layer_r2_table(states, maps, model="m", corpus="c", device=dev)
    assert got.drop(["r2"]).equals(want.drop(["r2"])) and len(want) == 18
    np.testing.assert_allclose(got["r2"].to_numpy(), want["r2"].to_numpy(), rtol=0, atol=1e-8)


# --- rrr: reduced-rank regression ---------------------------------------------------------------


def numpy_rrr(x, y, rank):
    """The textbook reduced-rank regression, (d_in, d_out) in x @ C form: the least-squares W
    (np.linalg.lstsq: minimum norm), truncated to the top-r right singular vectors of X W."""
    w = np.linalg.lstsq(x, y, rcond=None)[0]
    _, _, vt = np.linalg.svd(x @ w, full_matrices=False)
    return w @ vt[:rank].T @ vt[:rank]


def spread_problem(n=600, d=32, seed=5, case="regular"):
    """States with singular values spread over three orders of magnitude and an offset, targets
    through maps of decaying spectrum plus noise: a clear but not huge gap at every rank."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(d, d)))[0]
    x = (rng.normal(size=(n, d)) * np.logspace(1, -2, d)) @ basis + rng.normal(size=d)
    if case == "constant_dimension":
        x[:, 3] = 0.0
    elif case == "fewer_samples_than_width":
        x = x[: d // 2]
    ys = {}
    for t in (1, 2, 3):
        u, v = (np.linalg.qr(rng.normal(size=(d, d)))[0] for _ in range(2))
        mix = u @ np.diag(np.logspace(0.5, -1.5, d) * t) @ v
        ys[t] = x @ mix + 0.05 * t * rng.normal(size=(len(x), d))
    return x, ys


def low_rank_matrix(parts):
    """The map of low-rank parts in x @ C form: C = down^T up^T."""
    return parts["down.weight"].astype(np.float64).T @ parts["up.weight"].astype(np.float64).T


@pytest.mark.parametrize("case", ["regular", "constant_dimension", "fewer_samples_than_width"])
@pytest.mark.parametrize("rank", [1, 4, 32])
def test_rrr_equals_numpy_reduced_rank_regression(rank, case):
    x, ys = spread_problem(case=case)
    maps, method, _ = fit_source_reduced_rank(x, ys.items(), rank)
    assert method == ("cholesky" if case == "regular" else "pinv")
    for t, y in ys.items():
        parts = maps[t]
        assert parts["down.weight"].shape == (rank, 32) and parts["up.weight"].shape == (32, rank)
        assert parts["down.weight"].dtype == parts["up.weight"].dtype == np.float32
        reference = numpy_rrr(x, y, rank)
        error = np.abs(low_rank_matrix(parts) - reference).max() / np.abs(reference).max()
        assert error <= 1e-6, (t, error)
        # and the stored parts predict as the reference does
        pred = ShortcutMap(parts)(x)
        np.testing.assert_allclose(pred, x @ reference, atol=1e-6 * np.abs(x @ reference).max())
        # up's columns are orthonormal: V_r
        up = parts["up.weight"].astype(np.float64)
        np.testing.assert_allclose(up.T @ up, np.eye(rank), atol=1e-6)
    if rank == 32 and case == "regular":  # full rank: rrr is mat
        mat, _, _ = fit_source(x, ys.items())
        for t in ys:
            np.testing.assert_allclose(low_rank_matrix(maps[t]).T, mat[t], atol=1e-6 * 100)


def test_rrr_is_the_best_rank_r_map_and_deterministic():
    """Its training error is below mat truncated by a plain SVD of W (a rank-r map too, but
    optimal only in the identity metric) and that of random perturbations; two runs agree to
    the bit, and the eigenvector signs are fixed (largest entry of each up column positive)."""
    x, ys = spread_problem()
    rank = 3
    maps, _, _ = fit_source_reduced_rank(x, ys.items(), rank)
    again, _, _ = fit_source_reduced_rank(x, ys.items(), rank)
    rng = np.random.default_rng(0)
    for t, y in ys.items():
        for name in maps[t]:
            assert np.array_equal(maps[t][name], again[t][name])
        up = maps[t]["up.weight"]
        assert (up[np.abs(up).argmax(0), np.arange(rank)] > 0).all()
        c = low_rank_matrix(maps[t])
        best = np.mean((x @ c - y) ** 2)
        u, s, vt = np.linalg.svd(np.linalg.lstsq(x, y, rcond=None)[0])
        plain = u[:, :rank] * s[:rank] @ vt[:rank]
        assert best < np.mean((x @ plain - y) ** 2)
        for _ in range(5):
            down = maps[t]["down.weight"] + 1e-3 * rng.normal(size=(rank, 32))
            worse = down.T @ (maps[t]["up.weight"] + 1e-3 * rng.normal(size=(32, rank))).T
            assert best < np.mean((x @ worse - y) ** 2)


def test_single_pair_helpers_equal_numpy():
    x, ys = spread_problem()
    y = ys[2]
    down, up = reduced_rank(x, y, 4)
    assert down.dtype == np.float64 and down.shape == (4, 32) and up.shape == (32, 4)
    reference = numpy_rrr(x, y, 4)
    np.testing.assert_allclose(down.T @ up.T, reference, atol=1e-9 * np.abs(reference).max())
    ones = np.ones((len(x), 1))
    down, up, offset = reduced_rank_affine(x, y, 4)
    reference = numpy_rrr(np.hstack([x, ones]), y, 4)
    pred = (x @ down.T + offset) @ up.T
    np.testing.assert_allclose(pred, np.hstack([x, ones]) @ reference, atol=1e-8 * np.abs(y).max())
    weight, bias = least_squares_affine(x, y)
    ref = LinearRegression().fit(x, y)
    np.testing.assert_allclose(weight, ref.coef_, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(bias, ref.intercept_, rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="rank"):
        reduced_rank(x, y, 0)


@pytest.mark.parametrize("device", TORCH_DEVICES)
@pytest.mark.parametrize("case", ["regular", "constant_dimension"])
def test_torch_rrr_equals_numpy(device, case):
    """The torch path (any torch.device; on a GPU in the workflow) against the same numpy
    reference; float32 states in, as the workflow passes them."""
    import torch

    x, ys = spread_problem(case=case)
    x32 = x.astype(np.float32)
    dev = torch.device(device)
    maps, method, _ = fit_source_reduced_rank(
        x32, ((t, y.astype(np.float32)) for t, y in ys.items()), 4, dev
    )
    cpu_maps, cpu_method, _ = fit_source_reduced_rank(
        x32, ((t, y.astype(np.float32)) for t, y in ys.items()), 4
    )
    assert method == cpu_method == ("cholesky" if case == "regular" else "pinv")
    for t, y in ys.items():
        assert maps[t]["down.weight"].dtype == np.float32
        reference = numpy_rrr(x32.astype(np.float64), y.astype(np.float32).astype(np.float64), 4)
        error = np.abs(low_rank_matrix(maps[t]) - reference).max() / np.abs(reference).max()
        assert error <= 1e-6, (t, error)
        # same signs and order as the CPU path: the parts themselves agree, not just the map
        for name in maps[t]:
            scale = np.abs(cpu_maps[t][name]).max()
            assert np.abs(maps[t][name] - cpu_maps[t][name]).max() <= 1e-5 * scale, name
    down, up = reduced_rank(x32, ys[1].astype(np.float32), 4, dev)
    cpu_down, cpu_up = reduced_rank(x32, ys[1].astype(np.float32), 4)
    assert down.dtype == np.float64
    np.testing.assert_allclose(down, cpu_down, atol=1e-7 * np.abs(cpu_down).max())
    np.testing.assert_allclose(up, cpu_up, atol=1e-7)
    weight, bias = least_squares_affine(x32, ys[1], dev)
    cpu_weight, cpu_bias = least_squares_affine(x32, ys[1])
    np.testing.assert_allclose(weight, cpu_weight, atol=1e-7 * np.abs(cpu_weight).max())
    np.testing.assert_allclose(bias, cpu_bias, atol=1e-7 * np.abs(cpu_bias).max())


def test_gram_rank_counts_the_dimensions_the_rows_span():
    """gram_rank agrees with numpy's matrix_rank of X^T X, and fit_source reports it: repeated
    rows and a column that is a sum of others add rows but no rank."""
    from jtc.shortcuts.closed_form import gram_rank

    rng = np.random.default_rng(3)
    x = np.repeat(rng.normal(size=(7, 10)), 5, axis=0)  # 35 rows, 7 distinct
    gram = x.T @ x
    assert gram_rank(np.linalg.eigvalsh(gram)) == np.linalg.matrix_rank(gram) == 7
    full = rng.normal(size=(50, 10))
    full[:, 9] = full[:, 0] + full[:, 1]
    assert fit_source(x, [(1, x)])[2] == 7
    assert fit_source(full, [(1, full)])[2] == 9
    assert fit_source(rng.normal(size=(50, 10)), [(1, full)])[2] == 10
    assert fit_source_reduced_rank(x, [(1, x)], 2)[2] == 7
    assert gram_rank(np.zeros(4)) == 0
    # the torch path (a GPU's; here on a CPU torch device) counts the same way
    torch = pytest.importorskip("torch")
    cpu = torch.device("cpu")
    assert fit_source(x, [(1, x)], cpu)[2] == 7 and fit_source(full, [(1, full)], cpu)[2] == 9
    assert fit_source_reduced_rank(x, [(1, x)], 2, cpu)[2] == 7
