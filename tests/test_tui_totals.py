"""The set totals' one add and one drop (`tui.totals`), on both kinds of figures the bar pools."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.metrics import Counts, StepMetrics
from inspector.metrics.rounds import AcceptStats, Round
from inspector.serving.spec import DraftSpec
from inspector.tui.totals import AcceptFigure, Totals, pool_accepts, pool_steps

A, B = (0, 1, 2), (1, 2, 3)


def steps(hits: int, total: int, k: int = 1) -> list[StepMetrics]:
    return [StepMetrics(s, all_tok=Counts(hits - s, total)) for s in range(k)]


def test_steps_pool_per_group_count_once_and_drop_exactly():
    t: Totals = Totals(pool_steps)
    assert t.add(0, A, steps(3, 10, k=2))
    assert t.add(1, A, steps(5, 10))  # a sample shorter than K+2 tokens: fewer steps
    assert t.add(1, B, steps(7, 10))
    assert not t.add(1, A, steps(9, 10))  # counted once: the second figure is ignored
    tot = t.total(A)
    assert tot.n_samples == 2
    assert [(s.all_tok.hits, s.all_tok.total) for s in tot.value] == [(8, 20), (2, 10)]
    t.drop(1)  # leaves A and B at once
    tot = t.total(A)
    assert tot.n_samples == 1
    assert [(s.all_tok.hits, s.all_tok.total) for s in tot.value] == [(3, 10), (2, 10)]
    assert t.total(B).n_samples == 0 and t.total(B).value == []
    assert t.get(1, A) is None and t.get(0, A) is not None
    t.drop(7)  # a sample never counted: nothing moves
    assert t.total(A).n_samples == 1


def test_accepts_pool_rounds_and_an_emptied_group_keeps_its_depth():
    t: Totals = Totals(pool_accepts)
    g = (A, DraftSpec(3))
    s0 = AcceptStats.of([Round(2, 3, 4), Round(6, 0, 1)], 3)
    s1 = AcceptStats.of([Round(2, 1, 2)], 3)
    assert t.add(0, g, AcceptFigure(s0)) and t.add(1, g, AcceptFigure(s1))
    pooled = t.total(g).value
    assert pooled.odds is None and pooled.accept_length == 1 + 4 / 3
    pooled = pooled.stats
    assert (pooled.rounds, pooled.accepted, pooled.emitted) == (3, 4, 7)
    assert s0.rounds == 2  # pooling never adds into a sample's own figure
    t.drop(0)
    pooled = t.total(g).value.stats
    assert (pooled.rounds, pooled.emitted) == (1, 2) and t.total(g).n_samples == 1
    t.drop(1)
    empty = t.total(g).value.stats
    assert empty.rounds == 0 and empty.depth == 3 and len(empty.at_least) == 3


def test_odds_pool_beside_the_counts_and_give_the_expected_accept_length():
    """At a temperature τ is 1 + sum E[a] / rounds over the pooled rounds, not the walk's
    count; the walk's bound still marks it."""
    from inspector.serving.expectation import OddsTotals, SampleOdds
    from inspector.serving.sampling import RoundOdds

    def odds(*expected):
        rounds = [RoundOdds(e, e * (1 - e / 3), (min(1.0, e), 0.0, 0.0)) for e in expected]
        return SampleOdds.of(rounds, 3)

    s0 = AcceptStats.of([Round(2, 3, 4), Round(6, 0, 1)], 3)
    s1 = AcceptStats.of([Round(2, 1, 2, True)], 3)
    o0 = OddsTotals.of(odds(0.5, 0.25), np.array([3, 0]), 3)
    o1 = OddsTotals.of(odds(1.5), np.array([1]), 3)
    t: Totals = Totals(pool_accepts)
    g = (A, "at T")
    t.add(0, g, AcceptFigure(s0, o0))
    t.add(1, g, AcceptFigure(s1, o1))
    pooled = t.total(g).value
    assert pooled.stats.accepted == 4 and pooled.odds.rounds == 3
    assert pooled.odds.expected == pytest.approx(2.25) and pooled.odds.realised == 4
    assert pooled.accept_length == pytest.approx(1 + 2.25 / 3)
    assert pooled.odds.at_least == pytest.approx([1.75, 0.0, 0.0])
    assert pooled.is_bound  # sample 1's round ran past what it knows
    assert AcceptFigure(s0, o0).accept_length == pytest.approx(1 + 0.75 / 2)
    assert not AcceptFigure(s0, o0).is_bound
    t.drop(1)
    pooled = t.total(g).value
    assert pooled.accept_length == pytest.approx(1.375) and not pooled.is_bound
    assert o0.expected == pytest.approx(0.75)  # pooling never adds into a sample's own odds


def test_serving_is_one_key_per_setting_and_names_itself():
    """Temperature 0 is greedy (one key with no sampling); the label names the drafting
    settings and, at a temperature, the sampling and the rule; with_spec keeps the sampling."""
    from inspector.serving.sampling_settings import (
        Sampling,
        SamplingSettings,
        Verification,
        VerifyRule,
    )
    from inspector.tui.tau_settings import Serving, spec_label

    hot = SamplingSettings(Sampling(0.6, 20, 0.95), Verification(VerifyRule.VLLM_ONEHOT))
    cold = SamplingSettings(Sampling(0.0), Verification(VerifyRule.VLLM_ONEHOT))
    assert Serving(DraftSpec(3), cold) == Serving(DraftSpec(3)) and Serving(DraftSpec(3)).greedy
    assert hash(Serving(DraftSpec(3), cold)) == hash(Serving(DraftSpec(3)))
    at = Serving(DraftSpec(3), hot)
    assert not at.greedy and at != Serving(DraftSpec(3))
    assert at.label() == (
        "chain of 3 steps at temperature 0.6, top-k 20, top-p 0.95, vllm-onehot verification"
    )
    assert Serving(DraftSpec(1)).label() == "chain of 1 step"
    assert spec_label(DraftSpec(5, 4, 8)) == "tree of 5 steps, topk 4, 8 tokens"
    assert at.with_spec(DraftSpec(2)) == Serving(DraftSpec(2), hot)
