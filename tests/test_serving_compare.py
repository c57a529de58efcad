"""`serving.paired_drafts` on hand-made replays: pairing by sample, the per-depth and per-bucket
figures, and the round starts where one draft accepts more."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.serving.paired_drafts import compare, disagreements
from inspector.serving.replay import SampleReplay, WiringAccept
from inspector.wiring import Wiring


def _rep(index: int, starts, accepted, a_by_start) -> SampleReplay:
    acc = np.array(accepted)
    return SampleReplay(
        index, f"s{index}", np.array(starts), acc, acc + 1, np.array(a_by_start), depth=2
    )


def _wa(*reps: SampleReplay) -> WiringAccept:
    return WiringAccept(Wiring((0, 1, 2)), "train", 2, list(reps))


def test_pairs_by_sample_and_pools():
    a = _wa(_rep(0, [1, 4], [2, 0], [0, 2, 0, 0, 0, 0]), _rep(1, [1], [1], [0, 1, 0]))
    # B skipped sample 1: it is left out of both
    b = _wa(_rep(0, [1, 3, 5], [1, 1, 0], [0, 1, 0, 1, 2, 0]))
    c = compare(a, b, resamples=50)
    assert c.indices == [0]
    assert c.accept_length_a == pytest.approx(1 + 2 / 2)
    assert c.accept_length_b == pytest.approx(1 + 2 / 3)
    assert c.accept_length.diff == pytest.approx(2 / 3 - 1)
    # one request: every resample is it, so the interval is the point
    assert c.accept_length.low == pytest.approx(c.accept_length.diff)
    assert [d.a for d in c.per_depth] == [0.5, 0.5]
    assert [d.b for d in c.per_depth] == pytest.approx([2 / 3, 0])
    assert [s for s, _ in c.by_bucket] == [0]
    doc = c.to_dict()
    assert doc["rounds"] == {"a": 2, "b": 3}
    assert doc["by_bucket"][0]["a"] == pytest.approx(2.0)


def test_disagreements_count_and_quote_the_first():
    a = [_rep(0, [], [], [0, 2, 0, 1]), _rep(3, [], [], [0, 0, 2])]
    b = [_rep(0, [], [], [0, 1, 0, 1]), _rep(3, [], [], [0, 1, 2])]
    d = disagreements(a, b, first=1)
    assert (d.a_more, d.b_more) == (1, 1)
    assert d.first_a_more == [(0, 1)] and d.first_b_more == [(3, 1)]
    # the first few are counted across samples, in sample order
    two = disagreements(a + b, b + a, first=2)
    assert two.first_b_more == [(3, 1), (0, 1)] and two.first_a_more == [(0, 1), (3, 1)]
    assert d.to_dict() == {
        "a_more": 1,
        "b_more": 1,
        "first_a_more": [{"sample": 0, "position": 1}],
        "first_b_more": [{"sample": 3, "position": 1}],
    }


def test_refuses_different_depths():
    a = _wa(_rep(0, [1], [1], [0, 1]))
    b = WiringAccept(Wiring((0, 1, 2)), "train", 3, [])
    with pytest.raises(ValueError):
        compare(a, b)


def test_the_interval_is_the_seeds_and_its_level_is_written():
    """One seeded draw: the same seed gives the same interval, another seed another one (six
    requests whose differences vary), and the JSON says the level and the seed."""
    rng = np.random.default_rng(0)
    reps_a, reps_b = [], []
    for i in range(6):
        x = rng.integers(0, 3, size=(2, 8))
        reps_a.append(_rep(i, list(range(8)), x[0].tolist(), [0] * 10))
        reps_b.append(_rep(i, list(range(8)), x[1].tolist(), [0] * 10))
    a, b = _wa(*reps_a), _wa(*reps_b)
    one, same = compare(a, b, resamples=200, seed=3), compare(a, b, resamples=200, seed=3)
    other = compare(a, b, resamples=200, seed=4)
    ci = (one.accept_length.low, one.accept_length.high)
    assert ci == (same.accept_length.low, same.accept_length.high)
    assert ci != (other.accept_length.low, other.accept_length.high)
    doc = compare(a, b, resamples=200, seed=3, level=0.9).to_dict()
    assert doc["level"] == 0.9 and doc["seed"] == 3 and doc["resamples"] == 200
