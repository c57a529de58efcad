"""The doctor's budget plan on a hand-built config: the cost model per layer, the edges of a
sample's prefix, and each limit taken at its exact value (a cost equal to the budget fits), none
of which the demo's one-layer draft or its round budgets reach."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from inspector.doctor.budget import (
    ACCEPT_READ_FORWARDS,
    ACCEPT_SHARE,
    READ_FORWARDS,
    SCORED_FORWARDS,
    SampleShape,
    plan,
    token_macs,
)
from inspector.draft import DraftConfig, RopeConfig
from inspector.errors import InputError

CFG = DraftConfig(
    hidden_size=128,
    target_hidden_size=96,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
    intermediate_size=384,
    rms_norm_eps=1e-5,
    rope=RopeConfig(),
    vocab_size=512,
    draft_vocab_size=256,
)
MACS = token_macs(CFG)


def _shape(index: int, length: int, prompt: int, end: int | None = None) -> SampleShape:
    mask = np.zeros(length, dtype=np.int64)
    mask[prompt:end] = 1
    return SampleShape.of(index, mask)


def _exact_budget(total: float, share: float) -> float:
    """A budget whose `share` (as plan computes it, budget * share) is `total` exactly."""
    lo = hi = total / share
    for _ in range(8):  # a few ulps either side; some totals no product of `share` reaches
        for c in (lo, hi):
            if c * share == total:
                return c
        lo, hi = math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf)
    raise AssertionError(f"no float budget has {share} of it equal to {total}")


def test_each_later_layer_adds_its_projections_and_mlp():
    # Layer 0's q/k/v read [embedding, fc output] (2h wide); every later layer reads h.
    h, q, kv = CFG.hidden_size, CFG.num_heads * CFG.head_dim, CFG.num_kv_heads * CFG.head_dim
    later = h * (q + 2 * kv) + q * h + 3 * h * CFG.intermediate_size
    first = 2 * h * (q + 2 * kv) + q * h + 3 * h * CFG.intermediate_size
    fc, head = 3 * CFG.target_hidden_size * h, h * CFG.draft_vocab_size
    assert MACS == fc + first + head
    one, two, three = (token_macs(replace(CFG, num_layers=n)) for n in (1, 2, 3))
    assert two - one == three - two == later


def test_prefix_edges():
    s = _shape(0, 100, 30, 60)  # scored 30..59, then an unmasked tail
    assert s.scored.tolist() == list(range(30, 60))
    assert s.prefix(0) == 0
    assert s.prefix(29) == 58 + 2
    # Every scored position asked for: the whole sample, as for more (a plan never cuts it).
    assert s.prefix(30) == s.prefix(31) == s.prefix(None) == 100
    # A float mask with other non-zero values scores the same positions.
    m = np.zeros(10)
    m[4:] = 0.5
    assert SampleShape.of(0, m).scored.tolist() == [4, 5, 6, 7, 8]


def test_every_plan_carries_the_cost_per_token():
    shapes = [_shape(0, 100, 10), _shape(1, 40, 10)]
    assert plan(CFG, shapes).token_macs == MACS  # whole, within the budget
    assert plan(CFG, shapes, max_tokens=0).token_macs == MACS
    assert plan(CFG, shapes, max_tokens=50).token_macs == MACS
    assert plan(CFG, shapes, budget_macs=1.0).token_macs == MACS  # the budget's plan


def test_max_tokens_limits():
    shapes = [_shape(0, 100, 10), _shape(1, 40, 10)]
    three = plan(CFG, shapes, max_tokens=3)  # the least that scores a position
    assert three.cuts == {0: 3, 1: 3}
    # A sample of exactly max_tokens is read whole: no cut to report.
    assert plan(CFG, shapes, max_tokens=40).cuts == {0: 40}
    with pytest.raises(InputError) as neg:
        plan(CFG, shapes, max_tokens=-1)
    assert str(neg.value) == "--max-tokens: must be 0 (whole samples) or positive"
    with pytest.raises(InputError) as two:
        plan(CFG, shapes, max_tokens=2)
    assert str(two.value) == "--max-tokens: at least 3 tokens score a position"


def test_checks_costing_exactly_the_budget_read_whole():
    # (199 tokens: a length whose cost some float budget's share equals exactly)
    shapes = [_shape(i, 199, 100) for i in range(2)]
    assert shapes[0].scored.size == 98  # positions 100..197
    whole = sum(MACS * (READ_FORWARDS * 199 + SCORED_FORWARDS * 98) for _ in shapes)
    p = plan(CFG, shapes, budget_macs=_exact_budget(whole, 1 - ACCEPT_SHARE))
    assert p.decided_by == "whole" and not p.cut


def test_a_rung_costing_exactly_the_budget_is_taken_with_every_sample():
    shapes = [_shape(i, 200, 100) for i in range(2)]
    # 99 scored positions each: every rung down to 128 reads them all; 64 costs exactly the budget.
    per = MACS * (READ_FORWARDS * (100 + 65) + SCORED_FORWARDS * 64)
    p = plan(CFG, shapes, budget_macs=_exact_budget(2 * per, 1 - ACCEPT_SHARE))
    assert p.decided_by == "budget" and p.scored_per_sample == 64
    assert p.samples == [0, 1] and p.dropped_samples == [] and p.cuts == {0: 165, 1: 165}


def test_samples_scored_whole_are_not_cut():
    # The short sample has fewer scored positions than the rung: it is read whole, uncut.
    shapes = [_shape(0, 2048, 600), _shape(1, 50, 20)]
    p = plan(CFG, shapes, budget_macs=1e10)
    q = p.scored_per_sample
    assert p.decided_by == "budget" and q is not None and q > shapes[1].scored.size
    assert p.samples == [0, 1] and p.cuts == {0: shapes[0].prefix(q)}
    assert shapes[0].prefix(q) == 600 + q + 1 < 2048


def _replay(read: int, starts: int, steps: int = 3) -> float:
    """The replay's cost of one sample as plan prices it: 3 wirings, `steps` forwards where a
    round starts, keys and values on every other row read."""
    return MACS * 3 * (ACCEPT_READ_FORWARDS * read + steps * starts)


def test_the_replay_counts_the_tokens_read_and_the_round_starts():
    # Cut to 64 scored positions (665 tokens): the replay of all 8 cut samples fits its share;
    # of the whole samples (1447 round starts each) it would not.
    shapes = [_shape(i, 2048, 600) for i in range(8)]
    per = READ_FORWARDS * (600 + 65) + SCORED_FORWARDS * 64
    budget = 8 * per * MACS / (1 - ACCEPT_SHARE) * 1.0001
    p = plan(CFG, shapes, budget_macs=budget)
    assert p.scored_per_sample == 64 and p.cuts[0] == 665
    assert 8 * _replay(665, 64) <= budget * ACCEPT_SHARE < _replay(2048, 1446)
    assert p.accept_samples is None


def test_a_replay_costing_exactly_its_share():
    shapes = [_shape(i, 1000, 0) for i in range(4)]  # round starts at 1..998
    cost = _replay(1000, 998, steps=30)
    p = plan(CFG, shapes, budget_macs=_exact_budget(4 * cost, ACCEPT_SHARE), accept_steps=30)
    assert p.decided_by == "whole" and p.accept_samples is None  # all of it fits
    q = plan(CFG, shapes, budget_macs=_exact_budget(2 * cost, ACCEPT_SHARE), accept_steps=30)
    assert q.decided_by == "whole"
    assert q.accept_samples == [0, 1]  # the second sample fills the share exactly


def test_plan_to_dict():
    shapes = [_shape(i, 2048, 1500) for i in range(3)]
    p = plan(CFG, shapes, budget_macs=1.0)
    assert p.to_dict() == {
        "decided_by": "budget",
        "draft_macs_per_token": MACS,
        "tokens_read": {"0": 1500 + 33},
        "scored_per_sample": 32,
        "samples_over_budget": [1, 2],
        "accept_samples": [],
    }
    w = plan(CFG, shapes, max_tokens=0)
    assert w.to_dict() == {
        "decided_by": "whole",
        "draft_macs_per_token": MACS,
        "tokens_read": {},
        "scored_per_sample": None,
        "samples_over_budget": [],
        "accept_samples": None,
    }


def test_the_replay_of_drafts_it_cannot_restrict_runs_every_row():
    # Two layers: the replay drafts at every row read, so a prompt costs as much as a response.
    two = replace(CFG, num_layers=2)
    macs = token_macs(two)
    shapes = [_shape(i, 1000, 900) for i in range(2)]  # 98 round starts each
    every = macs * 3 * (3 * 1000 + 3 * 98)
    checks = sum(READ_FORWARDS * 1000 + SCORED_FORWARDS * 98 for _ in shapes) * macs
    budget = _exact_budget(1.5 * every, ACCEPT_SHARE)
    assert checks <= budget * (1 - ACCEPT_SHARE)
    assert plan(two, shapes, budget_macs=budget).accept_samples == [0]
    # One layer: the same samples' replay costs keys and values on the prompt, and fits.
    one = plan(CFG, shapes, budget_macs=budget * token_macs(CFG) / macs)
    assert one.accept_samples is None
