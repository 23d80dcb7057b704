"""jtc.evaluation.intervals.ratio_intervals against a bootstrap written out resample by
resample: the same draws (jtc.evaluation.prediction.bootstrap_counts' generator), the ratio of
each resample's sums, its quantiles."""

import numpy as np

from jtc.evaluation.intervals import ratio_intervals


def by_hand(sums: np.ndarray, resamples: int, seed: int, level: float):
    """Per group: Σ y / Σ x over every unit, and the quantiles of that ratio over resamples
    drawn as bootstrap_counts draws them (rng.integers(n, size=n), one resample after another)."""
    groups, units, _ = sums.shape
    rng = np.random.default_rng(seed)
    draws = [rng.integers(units, size=units) for _ in range(resamples)]
    value = sums[:, :, 1].sum(1) / sums[:, :, 0].sum(1)
    low, high = [], []
    for g in range(groups):
        with np.errstate(invalid="ignore"):
            ratios = [sums[g, d, 1].sum() / sums[g, d, 0].sum() for d in draws]
        tail = (1 - level) / 2
        low.append(np.nanquantile(ratios, tail))
        high.append(np.nanquantile(ratios, 1 - tail))
    return value, np.array(low), np.array(high)


def test_the_ratio_and_its_interval_are_those_of_a_plain_bootstrap():
    rng = np.random.default_rng(3)
    tokens = rng.integers(5, 40, size=(2, 30)).astype(float)
    sums = np.stack([tokens, tokens * rng.uniform(2.0, 4.0, size=(2, 30))], -1)

    value, low, high = ratio_intervals(sums, lambda s: s[..., 1:] / s[..., :1], 400, 11, 0.9)

    want = by_hand(sums, 400, 11, 0.9)
    assert value.shape == low.shape == high.shape == (2, 1)
    np.testing.assert_allclose(value[:, 0], want[0], rtol=1e-12)
    np.testing.assert_allclose(low[:, 0], want[1], rtol=1e-12)
    np.testing.assert_allclose(high[:, 0], want[2], rtol=1e-12)
    assert np.all(low < value) and np.all(value < high)


def test_groups_share_the_draws():
    """A group equal to another up to a factor has the same interval times that factor: the
    same units are drawn for both."""
    rng = np.random.default_rng(5)
    base = np.stack([rng.integers(1, 9, 20).astype(float), rng.uniform(0, 5, 20)], -1)

    value, low, high = ratio_intervals(
        np.stack([base, base * [1.0, 3.0]]), lambda s: s[..., 1:] / s[..., :1], 300, 2, 0.95
    )

    np.testing.assert_allclose(value[1], 3 * value[0], rtol=1e-12)
    np.testing.assert_allclose([low[1], high[1]], [3 * low[0], 3 * high[0]], rtol=1e-12)


def test_undefined_resamples_are_left_out():
    """Of 3 units one counts nothing: the resamples that draw only it (1 in 27) are 0 / 0,
    and the interval is that of the others."""
    sums = np.array([[[0.0, 0.0], [4.0, 10.0], [6.0, 9.0]]])
    ratio = lambda s: s[..., 1:] / s[..., :1]  # noqa: E731

    with np.errstate(invalid="ignore"):
        value, low, high = ratio_intervals(sums, ratio, 500, 4, 0.9)

    want = by_hand(sums, 500, 4, 0.9)
    rng = np.random.default_rng(4)
    assert any((rng.integers(3, size=3) == 0).all() for _ in range(500))  # some are undefined
    np.testing.assert_allclose([value[0, 0], low[0, 0], high[0, 0]], np.ravel(want), rtol=1e-12)
    assert np.isfinite([low, high]).all()
