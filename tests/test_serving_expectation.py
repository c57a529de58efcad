"""The pooled expectation at a temperature (`serving/expectation.py`) on hand-built odds, where the
bootstrap's distribution is known exactly: two requests, so a resample holds A twice, A and B, or
B twice with chances 1/4, 1/2, 1/4."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inspector.serving.expectation import Expectation, OddsTotals, SampleOdds
from inspector.serving.sampling import RoundOdds

DEPTH = 3


def odds(*rounds: tuple[float, float, tuple[float, ...]]) -> SampleOdds:
    return SampleOdds.of([RoundOdds(e, v, at) for e, v, at in rounds], DEPTH)


# request A: 2 rounds expecting 0.5 and 1.5 accepted; B: 1 round expecting 2.5
A = odds((0.5, 0.25, (0.5, 0.0, 0.0)), (1.5, 0.5, (1.0, 0.5, 0.0)))
B = odds((2.5, 0.75, (1.0, 1.0, 0.5)))
ACC = [np.array([1, 2]), np.array([3])]
AA, AB, BB = 1 + 2.0 / 2, 1 + 4.5 / 3, 1 + 2.5 / 1  # the three resampled accept lengths


def test_the_point_figures_are_pooled_sums():
    e = Expectation.of([A, B], ACC, DEPTH, resamples=200)
    assert (e.rounds, e.realised) == (3, 6)
    assert e.expected == pytest.approx(4.5) and e.variance == pytest.approx(1.5)
    assert e.accept_length == pytest.approx(AB) and e.realised_accept_length == pytest.approx(3)
    assert e.at_least == pytest.approx((2.5, 1.5, 0.5))
    assert e.per_depth == pytest.approx([2.5 / 3, 0.5, 0.5 / 3])
    assert e.z == pytest.approx((6 - 4.5) / math.sqrt(1.5))


def test_the_interval_is_the_bootstrap_over_requests():
    """At 95% the tails hold only the all-A and all-B resamples (each a quarter of them); at 40%
    both ends fall in the middle half, the A-and-B resamples."""
    wide = Expectation.of([A, B], ACC, DEPTH, resamples=4000)
    assert (wide.low, wide.high) == pytest.approx((AA, BB)) and wide.level == 0.95
    mid = Expectation.of([A, B], ACC, DEPTH, resamples=4000, level=0.4)
    assert (mid.low, mid.high) == pytest.approx((AB, AB)) and mid.level == 0.4
    assert Expectation.of([A, B], ACC, DEPTH, resamples=50) == Expectation.of(
        [A, B], ACC, DEPTH, resamples=50, seed=0
    )  # seeded: the default draw is seed 0's
    other = [Expectation.of([A, B], ACC, DEPTH, resamples=9, seed=s).low for s in range(6)]
    assert len(set(other)) > 1  # and the seed is the draw's


def test_a_request_without_rounds_leaves_the_resamples_that_hold_only_it():
    empty = odds()
    e = Expectation.of([A, empty], [np.array([1, 2]), np.array([], dtype=np.int64)], DEPTH)
    assert e.rounds == 2 and e.accept_length == pytest.approx(AA)
    assert (e.low, e.high) == pytest.approx((AA, AA))  # an all-empty resample is no figure
    none = Expectation.of([], [], DEPTH)
    assert none.accept_length is None and none.low is None and none.high is None
    assert none.z is None and none.per_depth == [0.0, 0.0, 0.0]


def test_to_dict_names_every_figure():
    e = Expectation.of([A, B], ACC, DEPTH, resamples=100)
    d = e.to_dict()
    assert d["accept_length"] == e.accept_length and (d["ci_low"], d["ci_high"]) == (e.low, e.high)
    assert d["level"] == 0.95 and d["z"] == e.z
    assert (d["expected_accepted"], d["realised_accepted"]) == (4.5, 6)
    assert d["realised_accept_length"] == 3.0
    assert d["expected_accepted_per_pos"] == list(e.at_least)
    assert d["per_depth"] == e.per_depth
    assert d["meaning"].startswith("accept_length: 1 + the sum over rounds of E[accepted")
    assert "about N(0, 1) when verification follows the rule" in d["meaning"]
    assert "/ rounds (the interval: bootstrap over requests); z: (realised" in d["meaning"]
    assert A.to_dict() == {"expected": [0.5, 1.5]}


def test_odds_totals_add_up_and_say_none_without_rounds():
    t = OddsTotals.of(A, ACC[0], DEPTH)
    assert (t.rounds, t.expected, t.variance, t.realised) == (2, 2.0, 0.75, 3)
    assert t.at_least == [1.5, 0.5, 0.0] and t.accept_length == 2.0
    assert t.per_depth == [0.75, 0.25, 0.0]
    assert t.z == pytest.approx(1 / math.sqrt(0.75))
    t.add(OddsTotals.of(B, ACC[1], DEPTH))
    assert (t.rounds, t.realised) == (3, 6) and t.accept_length == pytest.approx(AB)
    assert t.at_least == [2.5, 1.5, 0.5] and t.variance == pytest.approx(1.5)
    zero = OddsTotals(DEPTH)
    assert zero.at_least == [0.0] * DEPTH and zero.accept_length is None
    assert zero.per_depth == [None] * DEPTH and zero.z is None
    assert OddsTotals.of(odds(), np.array([], dtype=np.int64), DEPTH).at_least == [0.0] * DEPTH


def test_the_draw_is_seed_zeros_by_default_and_the_same_every_call():
    """Seven requests of distinct figures: the interval's ends depend on the draw."""
    reqs = [odds((0.3 * k, 0.1, (0.3 * k / 3, 0.0, 0.0))) for k in range(7)]
    acc = [np.array([1])] * 7
    e = Expectation.of(reqs, acc, DEPTH, resamples=40)
    assert e == Expectation.of(reqs, acc, DEPTH, resamples=40)
    assert e == Expectation.of(reqs, acc, DEPTH, resamples=40, seed=0)
    assert e != Expectation.of(reqs, acc, DEPTH, resamples=40, seed=1)


def test_an_interval_needs_a_round_and_one_round_is_enough():
    empty = Expectation.of([odds()], [np.array([], dtype=np.int64)], DEPTH)
    assert empty.rounds == 0 and empty.low is None and empty.high is None
    one = Expectation.of([B], [ACC[1]], DEPTH, resamples=20)
    assert one.rounds == 1 and (one.low, one.high) == pytest.approx((BB, BB))
