"""The rule that names the trained wiring (`doctor.settle`): never more than the evidence."""

from __future__ import annotations

import pytest

from inspector.doctor.settle import replay_diff, settle

A, B, C = (0, 1, 2), (0, 3, 2), (1, 2, 3)


def counts(per_request: list[tuple[int, int]]) -> dict[int, tuple[int, int]]:
    return dict(enumerate(per_request))


# 8 requests: near-equal replays (noise), and one clearly higher on every request
NOISE_A = counts([(30, 20), (28, 20), (31, 20), (27, 20), (29, 20), (30, 20), (28, 20), (29, 20)])
NOISE_B = counts([(31, 20), (28, 20), (30, 20), (29, 20), (30, 20), (29, 20), (29, 20), (30, 20)])
HIGH = counts([(50, 20), (48, 20), (52, 20), (47, 20), (49, 20), (51, 20), (50, 20), (49, 20)])


def test_replay_diff_is_paired_and_pooled():
    d = replay_diff(NOISE_A, HIGH)
    assert d.a == pytest.approx(232 / 160)
    assert d.b == pytest.approx(396 / 160)
    assert d.diff == pytest.approx((396 - 232) / 160)
    assert d.excludes_zero and d.low > 0.9
    n = replay_diff(NOISE_A, NOISE_B)
    assert n.diff == pytest.approx(4 / 160)
    assert not n.excludes_zero


def test_the_configured_wiring_stands_against_a_neighbour_within_noise():
    s = settle(A, [A, B], A, False, {A: NOISE_A, B: NOISE_B})
    assert s.wiring == A and s.configured_stands and s.undecided is None
    assert s.indistinct == (B,)
    assert not s.ambiguous
    assert [w.name for w in s.witnesses] == ["step-0 search", "replays"]
    assert s.witnesses[1].prefers is None


def test_a_neighbour_ranked_first_at_step_0_within_noise_does_not_unseat_the_configured():
    # the search ranks B first, not clearly above the configured A; B replays a hair higher
    s = settle(B, [B, A], A, False, {A: NOISE_A, B: NOISE_B})
    assert s.wiring == A and s.configured_stands
    assert s.indistinct == (B,)
    assert s.witnesses[0].prefers is None


def test_a_replay_clearly_higher_settles_what_step_0_cannot():
    s = settle(A, [A, B], A, False, {A: NOISE_A, B: HIGH})
    assert s.wiring == B and not s.configured_stands
    assert s.witnesses[1].prefers == B
    assert "accepts more than" in s.witnesses[1].says
    assert s.indistinct == ()


def test_a_clearly_beaten_configured_wiring_gives_the_top_and_its_neighbours():
    s = settle(A, [A, B], C, True, {A: NOISE_A, B: NOISE_B, C: counts([(5, 20)] * 8)})
    assert s.wiring == A and not s.configured_stands
    assert s.indistinct == (B,)
    assert s.ambiguous  # a fix must name A and B, not A alone
    assert s.witnesses[0].prefers == A


def test_a_clearly_beaten_configured_wiring_with_a_settled_top():
    s = settle(A, [A], C, True, {A: HIGH, C: NOISE_A})
    assert s.wiring == A and not s.ambiguous and s.indistinct == ()


def test_witnesses_that_disagree_give_undecided():
    # step 0 clearly prefers A over the configured C; the replays clearly prefer C
    s = settle(A, [A], C, True, {A: NOISE_A, C: HIGH})
    assert s.wiring is None and s.undecided is not None
    assert "disagree" in s.undecided and "more samples" in s.undecided
    assert s.to_dict()["wiring"] is None


def test_the_fingerprint_is_a_witness():
    s = settle(B, [B, A], A, False, {A: NOISE_A, B: NOISE_B}, fingerprint_flags_configured=True)
    assert s.wiring == B and not s.configured_stands
    assert [w.name for w in s.witnesses] == ["step-0 search", "fc fingerprint", "replays"]
    assert s.witnesses[1].prefers == B
    quiet = settle(
        B, [B, A], A, False, {A: NOISE_A, B: NOISE_B}, fingerprint_flags_configured=False
    )
    assert quiet.wiring == A and quiet.configured_stands
    assert quiet.witnesses[1].prefers is None


def test_no_configured_wiring():
    s = settle(A, [A, B], None, False, {A: NOISE_A, B: NOISE_B})
    assert s.wiring == A and not s.configured_stands and s.indistinct == (B,)
    assert s.witnesses[0].prefers == A
