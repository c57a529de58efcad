"""The rounds under the engine's own schedule of drafted tokens (vLLM's per_step_drafted, a live
loop's early stop): each round capped at its count, a round scheduled 0 emitting one token and
counted as no draft, rounds past the schedule at the full depth; and a replay walked again."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.engines import Engine
from inspector.metrics.rounds import AcceptStats, Round, Run, walk
from inspector.serving.sample_replay import SampleReplay

# run x_2..x_12: what a round starting after x_n would accept at depth 3
A = np.array([0, 0, 3, 3, 1, 2, 0, 3, 3, 3, 1, 0, 0, 0, 0])
RUN = [(2, 12)]


def test_without_a_schedule_every_round_drafts_the_depth():
    assert walk(A, RUN, depth=3) == [
        Round(2, 3, 4),
        Round(6, 0, 1),
        Round(7, 3, 4),
        Round(11, 0, 1),
    ]


def test_a_schedule_caps_each_round_at_its_count():
    rounds = walk(A, RUN, depth=3, schedule=[1, 2, 3, 1])
    # n=2: min(3, 1) = 1, emits 2 -> n=4: min(1, 2) = 1 -> n=6: min(0, 3) = 0 -> n=7: min(3, 1)
    assert rounds == [
        Round(2, 1, 2, drafted=1),
        Round(4, 1, 2, drafted=2),
        Round(6, 0, 1, drafted=3),
        Round(7, 1, 2, drafted=1),
        Round(9, 3, 3, drafted=3),  # past the schedule: the depth; the run ends at x_12
    ]
    s = AcceptStats.of(rounds, 3)
    assert (s.rounds, s.accepted, s.emitted, s.undrafted) == (5, 6, 10, 0)
    assert s.at_least == [4, 1, 1]


def test_a_round_scheduled_zero_emits_one_token_and_is_no_draft():
    rounds = walk(A, RUN, depth=3, schedule=[0, 0, 3, 0, 2])
    assert rounds == [
        Round(2, 0, 1, drafted=0),
        Round(3, 0, 1, drafted=0),
        Round(4, 1, 2, drafted=3),
        Round(6, 0, 1, drafted=0),
        Round(7, 2, 3, drafted=2),
        Round(10, 1, 2, drafted=3),
    ]
    assert [r.is_draft for r in rounds] == [False, False, True, False, True, True]
    s = AcceptStats.of(rounds, 3)
    # as vLLM counts: the three rounds without a draft are neither drafts nor accepted tokens
    assert (s.rounds, s.accepted, s.undrafted) == (3, 4, 3)
    assert s.accept_length == pytest.approx(1 + 4 / 3)
    assert s.emitted == 10 and s.emitted_per_round == pytest.approx(10 / 6)
    t = AcceptStats(3)
    t.add(s)
    assert (t.rounds, t.undrafted) == (3, 3)


def test_a_schedule_shorter_than_the_rounds_leaves_the_rest_at_the_depth():
    short = walk(A, RUN, depth=3, schedule=[2])
    assert short[0] == Round(2, 2, 3, drafted=2)
    # from x_5 on, the depth: the rounds a fixed-K walk from there takes
    assert short[1:] == [
        Round(5, 2, 3, drafted=3),
        Round(8, 3, 4, drafted=3),
    ]
    # an empty schedule is the fixed-K walk, every round marked with the depth
    assert [(r.start, r.accepted) for r in walk(A, RUN, depth=3, schedule=[])] == [
        (r.start, r.accepted) for r in walk(A, RUN, depth=3)
    ]
    # a schedule longer than the rounds: the rest is never used
    assert walk(A, RUN, depth=3, schedule=[3] * 20) == [
        Round(r.start, r.accepted, r.emitted, drafted=3) for r in walk(A, RUN, depth=3)
    ]


def test_a_schedule_beyond_the_depth_or_without_one_is_refused():
    with pytest.raises(ValueError, match="scheduled to draft 4 tokens"):
        walk(A, RUN, depth=3, schedule=[1, 4])
    with pytest.raises(ValueError, match="scheduled to draft -1"):
        walk(A, RUN, depth=3, schedule=[-1])
    with pytest.raises(ValueError, match="needs the depth"):
        walk(A, RUN, schedule=[1])


def test_a_capped_round_at_the_stop_is_a_lower_bound_only_past_its_own_count():
    a = np.array([0, 3, 3, 3])  # run x_1..x_3, the continuation unknown past x_3
    run = [Run(1, 3, 3)]
    # three drafted after x_1 reach past x_3: a lower bound; two or one end within it: exact
    assert walk(a, run, depth=3, schedule=[3]) == [Round(1, 2, 2, True, drafted=3)]
    assert walk(a, run, depth=3, schedule=[2]) == [Round(1, 2, 2, drafted=2)]
    assert walk(a, run, depth=3, schedule=[1]) == [Round(1, 1, 2, drafted=1)]


def test_sglangs_round_after_the_stop_takes_the_next_count():
    a = np.array([0, 2, 2, 2, 2, 2, 0])
    run = Run(1, 3, 6, "stop")
    rounds = walk(a, [run], depth=3, engine=Engine.SGLANG, schedule=[1, 0])
    assert rounds == [Round(1, 1, 2, drafted=1), Round(3, 0, 0, False, True, drafted=0)]
    assert AcceptStats.of(rounds, 3).after_stop == 0  # no draft after the stop: not counted


def _replay(a: np.ndarray, mask: np.ndarray) -> SampleReplay:
    return SampleReplay.of(0, "data_0.pt", a, mask, 3)


def test_a_replay_walks_again_under_a_schedule():
    mask = np.zeros(13, dtype=int)
    mask[2:] = 1
    rep = _replay(A[:13], mask)
    assert rep.accepted.tolist() == [3, 0, 3, 0] and rep.drafted is None
    assert rep.drafted_per_round() == [3, 3, 3, 3]
    again = rep.rescheduled([1, 2, 3, 1])
    assert again is not rep and again.accepted.tolist() == [1, 1, 0, 1, 3]
    assert again.drafted.tolist() == [1, 2, 3, 1, 3]
    assert again.to_dict()["drafted"] == [1, 2, 3, 1, 3]
    assert again.stats.rounds == 5 and again.completion_tokens == rep.completion_tokens
    zero = rep.rescheduled([0, 3])
    assert zero.accepted.tolist()[:2] == [0, 3] and zero.stats.undrafted == 1
    # the schedule it already drafted: the same replay
    assert rep.rescheduled([3, 3, 3, 3]) is rep and rep.rescheduled([]) is rep
    # a live loop's rounds are its own: only the schedule they ran is accepted
    live = SampleReplay(
        0,
        "live",
        rep.starts,
        rep.accepted,
        rep.emitted,
        np.full(13, -1),
        3,
        drafted=np.array([3, 1, 3, 3]),
    )
    assert live.rescheduled([3, 1, 3, 3]) is live
    with pytest.raises(ValueError, match="the live loop's rounds are its own"):
        live.rescheduled([1, 1, 1, 1])


def test_llama_server_caps_each_round_by_the_room_left():
    """llama-server drafts min(k, remaining - 1) (tools/server/server-context.cpp 453-471): in a
    run ending by length at x_E a round after x_n drafts at most E - n - 1, and a round with no
    room (after x_E-1) is a plain decode, not counted (2983-2985, 3880-3887)."""
    import numpy as np

    from inspector.engines import Engine
    from inspector.metrics.rounds import AcceptStats, walk

    a = np.full(20, 3, dtype=np.int64)  # every round would accept all it drafts
    rounds = walk(a, [(2, 10)], depth=3, engine=Engine.LLAMACPP)
    assert [(r.start, r.drafted, r.accepted, r.emitted) for r in rounds] == [
        (2, 3, 3, 4),
        (6, 3, 3, 4),
    ]
    rounds = walk(a, [(2, 9)], depth=3, engine=Engine.LLAMACPP)
    assert [(r.start, r.drafted, r.accepted, r.emitted) for r in rounds] == [
        (2, 3, 3, 4),
        (6, 2, 2, 3),
    ]
    rounds = walk(a, [(2, 7)], depth=3, engine=Engine.LLAMACPP)
    assert [(r.start, r.drafted) for r in rounds] == [(2, 3), (6, 0)]
    s = AcceptStats.of(rounds, 3)
    assert (s.rounds, s.accepted, s.undrafted) == (1, 3, 1)
