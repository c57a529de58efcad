"""Generation runs, the rounds through them, and the pooled numbers the engines log."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.serving.walk import AcceptStats, Round, chain_accepts, generation_runs, walk


def test_runs_are_the_maximal_masked_stretches_and_never_start_at_zero():
    assert generation_runs(np.array([0, 0, 1, 1, 1, 0, 1, 0])) == [(2, 4), (6, 6)]
    assert generation_runs(np.array([1, 1, 1])) == [(1, 2)]
    assert generation_runs(np.array([1, 0, 0])) == []
    assert generation_runs(np.array([], dtype=int)) == []
    assert generation_runs(np.array([0, 1])) == [(1, 1)]


def test_walk_starts_where_the_last_round_ended_and_stops_at_the_run_end():
    # run x_2..x_9: the prefill emitted x_2; rounds start after x_2
    a = np.array([9, 9, 2, 0, 0, 1, 3, 9, 9, 9])
    rounds = walk(a, [(2, 9)])
    # n=2: a=2, emits 3 -> n=5: a=1, emits 2 -> n=7: a=min(9, 2)=2 all left, emits 2 (no bonus)
    assert rounds == [Round(2, 2, 3), Round(5, 1, 2), Round(7, 2, 2)]
    # a one-token run: the prefill emitted it, nothing is left for a round
    assert walk(a, [(4, 4)]) == []
    assert walk(np.zeros(10, dtype=int), [(1, 3)]) == [Round(1, 0, 1), Round(2, 0, 1)]


def test_stats_pool_rounds_like_the_engines():
    rounds = [Round(2, 2, 3), Round(5, 1, 2), Round(1500, 0, 1), Round(1501, 3, 4)]
    s = AcceptStats.of(rounds, depth=3)
    assert (s.rounds, s.accepted, s.emitted) == (4, 6, 10)
    assert s.accept_length == pytest.approx(2.5)
    assert s.per_depth == [0.75, 0.5, 0.25]
    assert s.by_position() == [
        {"start": 0, "end": 1024, "rounds": 2, "accept_length": 2.5},
        {"start": 1024, "end": 2048, "rounds": 2, "accept_length": 2.5},
    ]
    t = AcceptStats.of([Round(3000, 1, 2)], depth=3)
    t.add(s)
    assert (t.rounds, t.accepted, t.emitted, t.at_least) == (5, 7, 12, [4, 2, 1])
    assert [(b["start"], b["rounds"], b["accept_length"]) for b in t.by_position()] == [
        (0, 2, 2.5),
        (1024, 2, 2.5),
        (2048, 1, 2.0),
    ]
    t.add(AcceptStats.of([Round(10, 3, 4)], depth=3))  # into an existing bucket
    assert t.by_position()[0]["rounds"] == 3 and t.by_position()[0]["accept_length"] == 3.0
    with pytest.raises(ValueError):
        t.add(AcceptStats(2))  # another depth: the per-depth counts do not line up
    empty = AcceptStats(2)
    assert empty.accept_length is None and empty.per_depth == [None, None]


def test_chain_accepts_counts_leading_hits_per_row():
    hits = [
        np.array([1, 1, 0, 1, 1], bool),
        np.array([1, 0, 1, 1], bool),
        np.array([1, 1, 1], bool),
    ]
    # rows 0..5 (T = 7); row r is the round after x_0..x_{r+1}
    a = chain_accepts(hits, 7)
    assert a.tolist() == [0, 3, 1, 0, 2, 1, 0] and a.dtype == np.int64
    assert chain_accepts([], 0).tolist() == [] and chain_accepts(
        [np.ones(0, bool)], 1
    ).tolist() == [0]
    assert chain_accepts([], 3).tolist() == [0, 0, 0]
