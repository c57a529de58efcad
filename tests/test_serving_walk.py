"""Generation runs, the rounds through them, and the pooled numbers the engines log."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.metrics.rounds import AcceptStats, Round, chain_accepts, generation_runs, walk


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


def test_the_last_round_counts_past_the_stop_where_the_continuation_is_known():
    from inspector.metrics.rounds import Run

    # run x_2..x_9, continuation known to x_12: the last round (n=7) matched 3 drafts; two of
    # them lie past x_9 and the engine counts them, though it emits only x_8, x_9
    a = np.array([9, 9, 2, 0, 0, 1, 3, 3, 9, 9, 9, 9, 9])
    rounds = walk(a, [Run(2, 9, 12)], depth=3)
    assert rounds == [Round(2, 2, 3), Round(5, 1, 2), Round(7, 3, 2)]
    s = AcceptStats.of(rounds, depth=3)
    assert (s.rounds, s.accepted, s.emitted) == (3, 6, 7)
    assert s.accept_length == pytest.approx(1 + 6 / 3) and not s.is_bound
    assert s.emitted_per_round == pytest.approx(7 / 3)
    # known only to the stop: the count is cut there and flagged a lower bound
    cut = walk(a, [(2, 9)], depth=3)
    assert cut[-1] == Round(7, 2, 2, bounded=True)
    assert AcceptStats.of(cut, depth=3).is_bound
    # a count that stopped short of the run's end is exact whatever lies past it
    assert walk(np.array([0, 0, 1, 0, 0]), [(1, 4)], depth=3)[-1] == Round(2, 1, 2)
    # a draft no deeper than what is left is exact too: nothing past the stop could count
    assert walk(a, [(2, 9)], depth=2)[-1] == Round(7, 2, 2)
    # without a depth (the old reading) nothing is flagged
    assert not any(r.bounded for r in walk(a, [(2, 9)]))
    # continuation shorter than the draft: still a bound when all of it matched
    short = walk(np.array([0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0]), [Run(6, 8, 9)], depth=3)
    assert short == [Round(6, 0, 1), Round(7, 2, 1, bounded=True)]


def test_sglang_counts_one_more_round_after_a_stop_it_could_not_foresee():
    from inspector.engines import Engine
    from inspector.metrics.rounds import Run

    a = np.array([0, 0, 2, 0, 0, 1, 3, 3, 1, 0, 2, 0, 0, 0, 0])
    # by length, last round after x_7 emitting x_8, x_9 (2 tokens): SGLang had launched the next
    # round, which drafts after the whole path and bonus: n = 7 + 3 + 1 = 11
    rounds = walk(a, [Run(2, 9, 14)], depth=3, engine=Engine.SGLANG)
    assert rounds[-1] == Round(11, 0, 0, after_stop=True)
    a[11] = 2
    assert walk(a, [Run(2, 9, 14)], depth=3, engine=Engine.SGLANG)[-1] == Round(
        11, 2, 0, after_stop=True
    )
    # known to x_12 only: one draft can be checked, and it matched: a lower bound
    assert walk(a, [Run(2, 9, 12)], depth=3, engine=Engine.SGLANG)[-1] == Round(
        11, 1, 0, bounded=True, after_stop=True
    )
    a[11] = 0
    rounds = walk(a, [Run(2, 9, 14)], depth=3, engine=Engine.SGLANG)
    assert rounds[:-1] == walk(a, [Run(2, 9, 14)], depth=3)
    s = AcceptStats.of(rounds, depth=3)
    assert s.after_stop == 1 and s.rounds == 4
    assert s.emitted_per_round == pytest.approx(s.emitted / 3)
    # a last round after x_E-1 was sure to end the request by length: no round after it
    b = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    assert not any(r.after_stop for r in walk(b, [Run(2, 5, 8)], depth=3, engine=Engine.SGLANG))
    # an EOS is never foreseen, even on a one-token round
    eos = walk(b, [Run(2, 5, 8, "stop")], depth=3, engine=Engine.SGLANG)
    assert eos[-1] == Round(5, 0, 0, after_stop=True)
    # even at the prefill: a request whose first token is the EOS gets a round
    assert walk(b, [Run(4, 4, 8, "stop")], depth=3, engine=Engine.SGLANG) == [
        Round(4, 0, 0, after_stop=True)
    ]
    # past what the sample knows: a lower bound
    far = walk(a, [Run(2, 9, 10)], depth=3, engine=Engine.SGLANG)
    assert far[-1].after_stop and far[-1].bounded
    # vLLM: no such round
    assert not any(r.after_stop for r in walk(a, [Run(2, 9, 12, "stop")], depth=3))


def test_the_edges_of_what_a_sample_knows():
    """Mutants of the walk's edges survived the tests above: a count exactly at the end of the
    known tokens, a round after the stop past the array or past what is known, an overlap
    round after a last round that was itself a lower bound, and no depth given."""
    from inspector.engines import Engine
    from inspector.metrics.rounds import Run

    # the last round after x_7 with the continuation known to x_9: 2 drafts can be checked and
    # both matched (raw == room < depth): a lower bound
    a = np.array([0, 0, 0, 0, 0, 1, 0, 2, 0, 0])
    assert walk(a, [Run(5, 8, 9)], depth=3)[-1] == Round(7, 2, 1, bounded=True)
    # one less matched: exact
    a[7] = 1
    assert walk(a, [Run(5, 8, 9)], depth=3)[-1] == Round(7, 1, 1)
    # SGLang's round after a stop whose last round was a lower bound: its start and count
    # cannot be known, so 0, flagged
    b = np.array([0, 0, 3, 3, 3, 3, 3, 3])
    assert walk(b, [Run(2, 4, 4)], depth=3, engine=Engine.SGLANG) == [
        Round(2, 2, 2, bounded=True),
        Round(5, 0, 0, bounded=True, after_stop=True),
    ]
    # a round after the stop whose start lies past the array: nothing was drafted there
    c = np.array([0, 0, 2, 0, 0])
    rounds = walk(c, [Run(2, 4, 7)], depth=3, engine=Engine.SGLANG)
    assert rounds == [Round(2, 2, 2), Round(5, 0, 0, bounded=True, after_stop=True)]
    rounds = walk(c, [Run(2, 4, 4)], depth=3, engine=Engine.SGLANG)
    assert rounds[-1] == Round(5, 0, 0, bounded=True, after_stop=True)
    # no depth: nothing is ever a lower bound, the round after the stop included
    assert not any(r.bounded for r in walk(c, [Run(2, 4, 4)], engine=Engine.SGLANG))
    assert walk(c, [Run(2, 4, 4)], engine=Engine.SGLANG)[-1] == Round(5, 0, 0, after_stop=True)


def test_a_one_step_chain_is_a_lower_bound_past_what_is_known():
    from inspector.engines import Engine
    from inspector.metrics.rounds import Run

    a = np.array([0, 0, 1, 1, 1, 1])
    # depth 1: the last round after x_2 emits x_3, x_4; SGLang's round after the stop starts
    # at 4, where nothing past the stop is known: a lower bound, though one step deep
    rounds = walk(a, [Run(2, 4, 4)], depth=1, engine=Engine.SGLANG)
    assert rounds == [Round(2, 1, 2), Round(4, 0, 0, bounded=True, after_stop=True)]
    # a one-step last round itself past what is known, then an EOS: the round after it
    # follows a lower bound, so it is one too
    b = np.array([0, 0, 0, 5, 5, 5])
    rounds = walk(b, [Run(2, 4, 3, "stop")], depth=1, engine=Engine.SGLANG)
    assert rounds[1] == Round(3, 0, 1, bounded=True)
    assert rounds[-1] == Round(4, 0, 0, bounded=True, after_stop=True)


def test_stats_count_every_bounded_and_after_stop_round():
    rounds = [
        Round(2, 1, 2, bounded=True),
        Round(5, 0, 0, bounded=True, after_stop=True),
        Round(9, 2, 0, after_stop=True),
    ]
    s = AcceptStats.of(rounds, depth=3)
    assert (s.bounded, s.after_stop, s.rounds, s.accepted) == (2, 2, 3, 3)
    assert s.emitted_per_round == 2.0 and s.is_bound
    t = AcceptStats.of(rounds[:1], depth=3)
    t.add(s)
    assert (t.bounded, t.after_stop) == (3, 2)
    t.add(AcceptStats.of(rounds[2:], depth=3))
    assert (t.bounded, t.after_stop) == (3, 3)
    assert AcceptStats.of(rounds[2:], depth=3).emitted_per_round is None
