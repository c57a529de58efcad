"""The rule that names the trained wiring (`doctor.reconcile.settle`): never more than the evidence."""

from __future__ import annotations

import pytest

from inspector.doctor.reconcile.settle import replay_diff, settle

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


# a replay clearly, but by less than one accepted token a round, above NOISE_A
MID = counts([(35, 20), (35, 20), (37, 20), (33, 20), (34, 20), (37, 20), (32, 20), (37, 20)])


def test_the_replay_diff_interval_is_the_seeded_bootstrap():
    d = replay_diff(NOISE_A, MID, seed=0, resamples=2000)
    assert d.diff == pytest.approx(48 / 160)
    assert 0.2 < d.low < 0.3 < d.high < 0.4 and d.level == 0.95
    assert replay_diff(NOISE_A, MID) == d  # the defaults: seed 0, 2000 resamples
    other = replay_diff(NOISE_A, MID, seed=1, resamples=500)
    assert other.diff == d.diff and (other.low, other.high) != (d.low, d.high)
    # only the requests both replayed are paired
    partial = replay_diff({0: (30, 20), 1: (10, 20)}, {0: (40, 20), 5: (99, 1)})
    assert partial.a == pytest.approx(1.5) and partial.b == pytest.approx(2.0)


def test_a_replay_clearly_higher_by_less_than_a_token_a_round_settles_it():
    s = settle(A, [A, B], A, False, {A: NOISE_A, B: MID})
    assert s.wiring == B and not s.configured_stands and s.indistinct == ()
    w = s.witnesses[1]
    assert w.prefers == B and w.says.startswith(
        "[0, 3, 2] accepts more than [0, 1, 2] on the same requests (+0.300 accepted a round, "
        "95% interval ["
    )


def test_a_contender_never_replayed_stays_indistinct():
    s = settle(A, [A, B, C], A, False, {A: NOISE_A, C: NOISE_B})
    assert s.wiring == A and s.configured_stands and s.indistinct == (B, C)
    # the configured wiring unreplayed: no replay witness at all
    t = settle(A, [A, B], A, False, {B: HIGH})
    assert t.wiring == A and [w.name for w in t.witnesses] == ["step-0 search"]


def test_a_wiring_clearly_below_the_chosen_one_is_not_indistinct():
    s = settle(B, [B, A, C], None, False, {A: NOISE_A, B: HIGH, C: NOISE_B})
    assert s.wiring == B and s.indistinct == ()
    # without B's replay nothing is clearly below it
    t = settle(B, [B, A], None, False, {A: NOISE_A})
    assert t.wiring == B and t.indistinct == (A,)


def test_every_witness_in_words_and_json():
    s = settle(A, [A, B], C, True, {A: NOISE_A, B: NOISE_B, C: counts([(5, 20)] * 8)})
    assert [(w.name, w.says) for w in s.witnesses] == [
        ("step-0 search", "[0, 1, 2] clearly beats the configured [1, 2, 3]"),
        (
            "replays",
            "no wiring tried accepts clearly more than [0, 1, 2] on these requests (every "
            "paired interval holds 0)",
        ),
    ]
    assert s.to_dict() == {
        "wiring": [0, 1, 2],
        "configured_stands": False,
        "indistinct": [[0, 3, 2]],
        "witnesses": [
            {
                "name": "step-0 search",
                "says": "[0, 1, 2] clearly beats the configured [1, 2, 3]",
                "prefers": [0, 1, 2],
            },
            {
                "name": "replays",
                "says": "no wiring tried accepts clearly more than [0, 1, 2] on these requests "
                "(every paired interval holds 0)",
                "prefers": None,
            },
        ],
        "undecided": None,
        "ambiguous": True,
    }
    assert s.agreeing() == ["step-0 search"]
    first = settle(A, [A], A, False, {A: NOISE_A})
    assert first.witnesses[0].says == "the configured [0, 1, 2] ranks first"
    assert [w.name for w in first.witnesses] == ["step-0 search"]  # one wiring: no comparison
    none = settle(A, [A], None, False, {})
    assert (
        none.witnesses[0].says == "[0, 1, 2] ranks first; the config names no wiring of these slots"
    )
    close = settle(B, [B, A], A, False, {})
    assert close.witnesses[0].says == (
        "[0, 3, 2] ranks first, within noise of the configured [0, 1, 2]"
    )


def test_the_fingerprint_in_words():
    s = settle(B, [B, A], A, False, {}, fingerprint_flags_configured=True)
    assert s.witnesses[1].says == (
        "the configured [0, 1, 2] feeds an fc block a slot whose projected norm is off by over "
        "2x from [0, 3, 2]'s"
    )
    q = settle(B, [B, A], A, False, {}, fingerprint_flags_configured=False)
    assert q.witnesses[1].says == (
        "the fc blocks' projected norms do not tell [0, 1, 2] from [0, 3, 2]"
    )
    # not measured where the configured wiring is the top one, or there is none
    assert len(settle(A, [A], A, False, {}, fingerprint_flags_configured=True).witnesses) == 1
    assert len(settle(A, [A], None, False, {}, fingerprint_flags_configured=True).witnesses) == 1


def test_undecided_names_the_witnesses_on_each_side():
    s = settle(A, [A], C, True, {A: NOISE_A, C: HIGH}, fingerprint_flags_configured=True)
    assert s.wiring is None and not s.configured_stands and s.indistinct == (A,)
    assert s.undecided == (
        "the witnesses disagree: the step-0 search and the fc fingerprint prefer [0, 1, 2], the "
        "replays the configured [1, 2, 3]; more samples (the search's positions and the "
        "replay's requests), or --target for serving-exact samples, would settle it"
    )
    assert not s.ambiguous
    assert s.to_dict()["undecided"] == s.undecided and s.to_dict()["ambiguous"] is False


def test_a_custom_label():
    s = settle(A, [A], C, True, {}, label=lambda w: "W" + "".join(map(str, w)))
    assert s.witnesses[0].says == "W012 clearly beats the configured W123"


def test_the_witness_names_and_who_agrees():
    s = settle(A, [A, B], C, True, {A: NOISE_A, B: MID, C: counts([(5, 20)] * 8)})
    assert s.wiring == B
    assert [w.name for w in s.witnesses] == ["step-0 search", "replays"]
    assert s.agreeing() == ["replays"]  # the step-0 search preferred A over the configured C
    q = settle(B, [B, A], A, False, {}, fingerprint_flags_configured=False)
    assert [w.name for w in q.witnesses] == ["step-0 search", "fc fingerprint"]
    assert q.agreeing() == []
    u = settle(A, [A], C, True, {A: NOISE_A, C: HIGH})
    assert u.configured_stands is False and u.agreeing() == []


def test_a_neighbour_a_hair_below_within_noise_stays_indistinct():
    s = settle(A, [A, B], A, False, {A: NOISE_B, B: NOISE_A})
    assert s.wiring == A and s.indistinct == (B,)


def test_of_two_replays_clearly_higher_the_highest_is_named():
    D = (0, 2, 2)
    s = settle(A, [A, B, D], A, False, {A: NOISE_A, B: MID, D: HIGH})
    assert s.wiring == D and s.witnesses[1].prefers == D
