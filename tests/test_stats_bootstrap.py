"""The paired bootstrap of a difference of pooled ratios: a case computed by hand, the draw
against numpy's with the same seed, identical arms, and requests without rounds."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.stats.bootstrap import Resampler


def test_two_requests_by_hand():
    # A: 1/2 and 3/2 accepted per round, B: 2/2 and 2/2. A resample is {0,0} (B - A = +0.5),
    # {1,1} (-0.5) or mixed (0); each pure one is drawn about a quarter of the time, so the
    # 2.5% and 97.5% percentiles sit inside them: exactly -0.5 and +0.5.
    rs = Resampler(2, resamples=2000, seed=0)
    d = rs.ratio_diff(np.array([1, 3]), np.array([2, 2]), np.array([2, 2]), np.array([2, 2]))
    assert (d.a, d.b, d.diff) == (1.0, 1.0, 0.0)
    assert (d.low, d.high) == (-0.5, 0.5)
    assert not d.excludes_zero


def test_pooled_not_averaged():
    # pooled: (1 + 9) / (1 + 9) = 1 for A, while the mean of per-request ratios would be 1 too;
    # B pools 2 / 10 = 0.2 (the mean of 1/1 and 1/9 would be 0.56)
    rs = Resampler(2, resamples=10, seed=1)
    d = rs.ratio_diff(np.array([1, 9]), np.array([1, 9]), np.array([1, 1]), np.array([1, 9]))
    assert d.a == 1.0 and d.b == pytest.approx(0.2) and d.diff == pytest.approx(-0.8)


def test_matches_numpy_with_the_same_seed():
    g = np.random.default_rng(7)
    n, r, seed = 13, 777, 42
    den_a, den_b = g.integers(1, 30, n), g.integers(1, 30, n)
    num_a, num_b = g.integers(0, 60, n), g.integers(0, 60, n)
    d = Resampler(n, resamples=r, seed=seed, level=0.9).ratio_diff(num_a, den_a, num_b, den_b)
    rows = np.random.default_rng(seed).integers(0, n, size=(r, n))
    diffs = [num_b[i].sum() / den_b[i].sum() - num_a[i].sum() / den_a[i].sum() for i in rows]
    low, high = np.quantile(diffs, [0.05, 0.95])
    assert d.low == pytest.approx(low, abs=1e-12) and d.high == pytest.approx(high, abs=1e-12)
    assert d.diff == pytest.approx(num_b.sum() / den_b.sum() - num_a.sum() / den_a.sum())
    assert d.level == 0.9


def test_identical_arms_give_exactly_zero():
    g = np.random.default_rng(3)
    num, den = g.random(20), g.integers(1, 9, 20)
    d = Resampler(20, seed=5).ratio_diff(num, den, num, den)
    assert d.diff == 0.0 and d.low == 0.0 and d.high == 0.0


def test_no_rounds_no_figure():
    z = np.zeros(3)
    d = Resampler(3).ratio_diff(z, z, z, z)
    assert d.a is None and d.diff is None and d.low is None
    empty = Resampler(0).ratio_diff(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0))
    assert empty.diff is None and empty.low is None


def test_resamples_without_rounds_are_left_out():
    # request 1 has no rounds: a resample drawing only it has no ratio and is skipped
    rs = Resampler(2, resamples=400, seed=0)
    d = rs.ratio_diff(np.array([1, 0]), np.array([2, 0]), np.array([2, 0]), np.array([2, 0]))
    assert d.diff == 0.5 and d.low == d.high == 0.5


def test_refuses_bad_settings():
    with pytest.raises(ValueError):
        Resampler(3, resamples=0)
    with pytest.raises(ValueError):
        Resampler(3, level=1.0)
    with pytest.raises(ValueError):
        Resampler(3).ratio_diff(np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2))
