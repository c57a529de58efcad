"""`serving.compare` on hand-made replays: pairing by sample, the per-depth and per-bucket
figures, and the round starts where one draft accepts more."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.serving.compare import compare, disagreements
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
