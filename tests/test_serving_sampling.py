"""The verification rules at temperature > 0 (`serving/sampling.py`), held against an exact
enumeration of the random process on hand-built distributions.

The enumeration runs `sample_verify` itself with symbolic draws: a uniform is an interval that
each comparison splits (both branches followed, weighted by their lengths), a categorical draw
branches over its support. Every outcome's probability is then exact (to float rounding), so the
closed forms (`node_reach`, `RoundOdds`) and the engines' losslessness are checked without
Monte Carlo noise. Tolerances: sums of at most a few dozen float64 products, 1e-12.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch

from inspector.errors import InputError
from inspector.serving.sampling import (
    RoundOdds,
    children_odds,
    node_reach,
    sample_verify,
    target_probs,
)
from inspector.serving.sampling_settings import Sampling, Verification, VerifyRule, parse_rule

TOL = 1e-12
ONEHOT = Verification(VerifyRule.VLLM_ONEHOT)
TARGET_ONLY = Verification(VerifyRule.SGLANG_TARGET_ONLY)
PROBABILISTIC = Verification(VerifyRule.VLLM_PROBABILISTIC)
REJECTION = Verification(VerifyRule.SGLANG_REJECTION)


class _Coin:
    """A uniform on [0, 1) known to lie in [lo, hi): each comparison branches through `ctx`."""

    def __init__(self, ctx: _Run) -> None:
        self.ctx, self.lo, self.hi = ctx, 0.0, 1.0

    def __le__(self, x: float) -> bool:
        x = float(x)
        if x >= self.hi:
            return True
        if x <= self.lo:
            return False
        width = self.hi - self.lo
        yes = self.ctx.choose([(x - self.lo) / width, (self.hi - x) / width]) == 0
        if yes:
            self.hi = x
        else:
            self.lo = x
        return yes

    def __gt__(self, x: float) -> bool:
        return not self <= x


class _Run:
    """One path through the decisions: a prefix of choices given, the rest taken as 0."""

    def __init__(self, prefix: list[int]) -> None:
        self.prefix, self.choices, self.arity, self.weight = prefix, [], [], 1.0

    def choose(self, weights: list[float]) -> int:
        i = len(self.choices)
        c = self.prefix[i] if i < len(self.prefix) else 0
        self.choices.append(c)
        self.arity.append(len(weights))
        self.weight *= weights[c]
        return c

    def uniform(self) -> _Coin:
        return _Coin(self)

    def categorical(self, p: torch.Tensor) -> int:
        support = [i for i in range(p.shape[-1]) if float(p[i]) > 0]
        total = sum(float(p[i]) for i in support)
        return support[self.choose([float(p[i]) / total for i in support])]


def enumerate_process(run) -> dict:
    """{outcome: probability} of `run(uniform, categorical)` over every decision path."""
    out: dict = defaultdict(float)
    stack: list[list[int]] = [[]]
    while stack:
        prefix = stack.pop()
        r = _Run(prefix)
        result = run(r.uniform, r.categorical)
        if r.weight > 0:
            out[result] += r.weight
        for i in range(len(prefix), len(r.choices)):
            for alt in range(1, r.arity[i]):
                stack.append(r.choices[:i] + [alt])
    return dict(out)


def _dist(rng: np.random.Generator, v: int, zeros: int = 0) -> torch.Tensor:
    p = rng.random(v) ** 2
    if zeros:
        p[rng.choice(v, zeros, replace=False)] = 0.0
    return torch.tensor(p / p.sum(), dtype=torch.float64)


# a tree of 5 nodes over vocab 5: root children 0, 1, 2; node 0's children 3, 4
TREE_TOKENS = [1, 3, 0, 2, 1]
TREE_PARENT = [-1, -1, -1, 0, 0]
TREE_DEPTH = [1, 1, 1, 2, 2]


def _tree_probs(seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.stack([_dist(rng, 5, zeros=1 if i == 2 else 0) for i in range(6)])


def _paths(dist: dict) -> dict:
    """{path tuple: probability} from {(path, emitted): probability}."""
    out: dict = defaultdict(float)
    for (path, _), w in dist.items():
        out[path] += w
    return out


# --- the target's distribution --------------------------------------------------------------


def _reference_probs(logits: list[float], s: Sampling) -> list[float]:
    """A plain-Python reading of the engines' rule: temperature, top-k (ties kept), top-p."""
    x = [v / s.temperature for v in logits]
    if 0 < s.top_k < len(x):  # k past the vocabulary: off
        kth = sorted(x, reverse=True)[s.top_k - 1]
        x = [v if v >= kth else -math.inf for v in x]
    m = max(x)
    e = [math.exp(v - m) for v in x]
    p = [v / sum(e) for v in e]
    if s.top_p < 1:
        order = sorted(range(len(p)), key=lambda i: (-p[i], i))
        above, keep = 0.0, set()
        for i in order:
            if above < s.top_p:
                keep.add(i)
            above += p[i]
        kept = sum(p[i] for i in keep)
        p = [p[i] / kept if i in keep else 0.0 for i in range(len(p))]
    return p


@pytest.mark.parametrize(
    "s",
    [
        Sampling(1.0),
        Sampling(0.6),
        Sampling(0.6, top_k=3),
        Sampling(0.6, top_p=0.8),
        Sampling(0.6, top_k=20, top_p=0.95),
        Sampling(1.3, top_k=4, top_p=0.5),
    ],
)
def test_target_probs_equal_the_engines_rule(s: Sampling) -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        logits = (rng.standard_normal(12) * 2).tolist()
        got = target_probs(torch.tensor([logits], dtype=torch.float64), s)[0].tolist()
        assert got == pytest.approx(_reference_probs(logits, s), abs=1e-12)


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    logp = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    assert (target_probs(logp, Sampling(1.0, top_p=0.8)) > 0).tolist() == [
        [True, True, False, False]
    ]
    assert (target_probs(logp, Sampling(1.0, top_p=0.81)) > 0).sum() == 3
    # top-k first, then top-p over what top-k left: [0.625, 0.375] -> 0.6 keeps one
    only = target_probs(logp, Sampling(1.0, top_k=2, top_p=0.6))
    assert only.tolist() == [[1.0, 0.0, 0.0, 0.0]]


def test_top_k_keeps_ties_and_greedy_is_one_hot() -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0, 2.0, 0.0]])
    assert (target_probs(logits, Sampling(1.0, top_k=2)) > 0).sum() == 3
    assert target_probs(logits, Sampling(0.0)).tolist() == [[0, 1, 0, 0, 0]]
    tie = torch.tensor([[2.0, 1.0, 2.0]])
    assert target_probs(tie, Sampling(0.0)).tolist() == [[1, 0, 0]]


def test_sampling_settings_refuse_what_the_engines_refuse() -> None:
    for bad in (dict(temperature=-0.1), dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.5)):
        with pytest.raises(InputError):
            Sampling(**{"temperature": 1.0, **bad})
    assert Sampling(0.6, top_k=20, top_p=0.95).label() == "temperature 0.6, top-k 20, top-p 0.95"
    assert Sampling().label() == "greedy (temperature 0)"


# --- target-only rules: closed form against the enumeration -----------------------------------


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "v",
    [
        TARGET_ONLY,
        Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_acc=0.6),
        Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_single=0.3),
        Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_single=0.25, threshold_acc=0.4),
    ],
)
def test_tree_reach_equals_the_enumerated_process(seed: int, v: Verification) -> None:
    probs = _tree_probs(seed)
    dist = enumerate_process(
        lambda u, c: _pair(sample_verify(probs, TREE_TOKENS, TREE_PARENT, v, u, c))
    )
    assert sum(dist.values()) == pytest.approx(1.0, abs=TOL)
    paths = _paths(dist)
    reach = node_reach(probs, TREE_TOKENS, TREE_PARENT, v)
    for j in range(len(TREE_TOKENS)):
        on = sum(w for path, w in paths.items() if j in path)
        assert reach[j] == pytest.approx(on, abs=TOL), j
    odds = RoundOdds.of(reach, TREE_DEPTH, 2)
    mean = sum(len(path) * w for path, w in paths.items())
    second = sum(len(path) ** 2 * w for path, w in paths.items())
    assert odds.expected == pytest.approx(mean, abs=TOL)
    assert odds.variance == pytest.approx(second - mean**2, abs=TOL)
    for k in (1, 2):
        assert odds.at_least[k - 1] == pytest.approx(
            sum(w for path, w in paths.items() if len(path) >= k), abs=TOL
        )


def _pair(result: tuple[list[int], int]) -> tuple[tuple[int, ...], int]:
    path, emitted = result
    return tuple(path), emitted


@pytest.mark.parametrize("seed", range(4))
def test_target_only_is_lossless_at_the_default_thresholds(seed: int) -> None:
    """The first token a round emits (the first accepted child's, or the one sampled after none)
    is distributed as the target's own p at the root, exactly: speculative decoding does not
    change what the target samples. Lowered thresholds break it (they are lossy)."""
    probs = _tree_probs(seed)

    def first(v: Verification) -> dict:
        dist = enumerate_process(
            lambda u, c: _pair(sample_verify(probs, TREE_TOKENS, TREE_PARENT, v, u, c))
        )
        out: dict = defaultdict(float)
        for (path, emitted), w in dist.items():
            out[TREE_TOKENS[path[0]] if path else emitted] += w
        return out

    got = first(TARGET_ONLY)
    for x in range(5):
        assert got.get(x, 0.0) == pytest.approx(float(probs[0, x]), abs=TOL)
    lossy = first(Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_acc=0.3))
    assert max(abs(lossy.get(x, 0.0) - float(probs[0, x])) for x in range(5)) > 1e-3


def test_the_two_target_only_rules_agree_on_a_chain() -> None:
    rng = np.random.default_rng(3)
    probs = torch.stack([_dist(rng, 6) for _ in range(4)])
    tokens, parent = [2, 5, 0], [-1, 0, 1]
    a = node_reach(probs, tokens, parent, ONEHOT)
    b = node_reach(probs, tokens, parent, TARGET_ONLY)
    expect = np.cumprod([float(probs[i, t]) for i, t in enumerate(tokens)])
    assert np.allclose(a, expect, atol=TOL) and np.allclose(b, expect, atol=TOL)
    dist = enumerate_process(lambda u, c: _pair(sample_verify(probs, tokens, parent, ONEHOT, u, c)))
    paths = _paths(dist)
    for j in range(3):
        assert sum(w for path, w in paths.items() if j in path) == pytest.approx(a[j], abs=TOL)


def test_children_odds_by_hand() -> None:
    assert children_odds([0.2, 0.3], TARGET_ONLY) == pytest.approx([0.2, 0.3])
    # threshold_acc 0.5: the coin is held against the running sum over 0.5
    half = Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_acc=0.5)
    assert children_odds([0.2, 0.2, 0.4], half) == pytest.approx([0.4, 0.4, 0.2])
    # threshold_single 0.3: the second child (0.35) is taken whenever the first was not
    single = Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_single=0.3)
    assert children_odds([0.1, 0.35, 0.2], single) == pytest.approx([0.1, 0.9, 0.0])
    assert children_odds([], TARGET_ONLY) == []


def test_greedy_probabilities_make_the_expectation_the_greedy_count() -> None:
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    probs = target_probs(logits, Sampling(0.0))
    reach = node_reach(probs, [1, 0, 1], [-1, 0, 1], ONEHOT)
    assert reach.tolist() == [1.0, 1.0, 0.0]  # argmax 1, then 0, then 2 != 1
    odds = RoundOdds.of(reach, [1, 2, 3], 3)
    assert (odds.expected, odds.variance) == (2.0, 0.0)


# --- sampled drafts: min(1, p / q) -------------------------------------------------------------


@pytest.mark.parametrize("v", [PROBABILISTIC, REJECTION])
@pytest.mark.parametrize("seed", range(3))
def test_a_sampled_chain_given_its_draws(v: Verification, seed: int) -> None:
    rng = np.random.default_rng(seed)
    probs = torch.stack([_dist(rng, 5, zeros=1) for _ in range(4)])
    q = torch.stack([_dist(rng, 5) for _ in range(3)])
    tokens, parent = [int(q[i].argmax()) for i in range(3)], [-1, 0, 1]
    dist = enumerate_process(lambda u, c: _pair(sample_verify(probs, tokens, parent, v, u, c, q)))
    paths = _paths(dist)
    reach = node_reach(
        probs, tokens, parent, v, q_drafted=[float(q[i, t]) for i, t in enumerate(tokens)]
    )
    expect = np.cumprod([min(1.0, float(probs[i, t] / q[i, t])) for i, t in enumerate(tokens)])
    assert np.allclose(reach, expect, atol=TOL)
    for j in range(3):
        assert sum(w for path, w in paths.items() if j in path) == pytest.approx(reach[j], abs=TOL)


def test_rejection_sampling_is_lossless_and_accepts_sum_min_p_q() -> None:
    """Over the draft's own draws (d ~ q, then verification), the first emitted token is
    distributed as p, and the first position is accepted with probability sum_x min(p, q)."""
    rng = np.random.default_rng(11)
    p1, q1 = _dist(rng, 6, zeros=2), _dist(rng, 6)
    p2 = {x: _dist(rng, 6) for x in range(6)}  # the target's next distribution after x
    q2 = {x: _dist(rng, 6) for x in range(6)}

    def run(u, c):
        d1 = c(q1)
        d2 = c(q2[d1])
        probs = torch.stack([p1, p2[d1], _dist(np.random.default_rng(d1 * 7 + d2), 6)])
        path, emitted = sample_verify(
            probs, [d1, d2], [-1, 0], PROBABILISTIC, u, c, torch.stack([q1, q2[d1]])
        )
        reach = node_reach(
            probs, [d1, d2], [-1, 0], PROBABILISTIC, [float(q1[d1]), float(q2[d1][d2])]
        )
        return (d1 if path else emitted, len(path), round(float(reach.sum()), 15))

    dist = enumerate_process(run)
    first: dict = defaultdict(float)
    accepted_first = mean_a = mean_reach = 0.0
    for (tok, a, r), w in dist.items():
        first[tok] += w
        accepted_first += w * (a >= 1)
        mean_a += w * a
        mean_reach += w * r
    for x in range(6):
        assert first.get(x, 0.0) == pytest.approx(float(p1[x]), abs=TOL)
    assert accepted_first == pytest.approx(float(torch.minimum(p1, q1).sum()), abs=TOL)
    # the conditional reach, averaged over the draws, is the expected accepted count
    assert mean_reach == pytest.approx(mean_a, abs=1e-12)


# --- settings --------------------------------------------------------------------------------


def test_rules_and_thresholds_are_checked() -> None:
    assert parse_rule(None, "vllm") is VerifyRule.VLLM_ONEHOT
    assert parse_rule(None, "sglang") is VerifyRule.SGLANG_TARGET_ONLY
    assert parse_rule("SGLang-Rejection", "sglang") is VerifyRule.SGLANG_REJECTION
    with pytest.raises(InputError, match="not vllm's"):
        parse_rule("sglang-target-only", "vllm")
    with pytest.raises(InputError, match="one of"):
        parse_rule("typical", "vllm")
    with pytest.raises(InputError, match="SGLang's target-only"):
        Verification(VerifyRule.VLLM_ONEHOT, threshold_acc=0.5)
    with pytest.raises(InputError, match="must be in"):
        Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_single=1.5)
    with pytest.raises(InputError, match="divides"):
        Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_acc=0.0)
    with pytest.raises(InputError, match="chains"):
        PROBABILISTIC.check_tree(is_chain=False)
    TARGET_ONLY.check_tree(is_chain=False)
    assert VerifyRule.SGLANG_REJECTION.samples_drafts and not VerifyRule.VLLM_ONEHOT.samples_drafts


def test_enumeration_itself_is_exact() -> None:
    """The harness: a coin compared at 0.3 then at 0.7 splits [0, 1) into 0.3 / 0.4 / 0.3."""

    def run(u, c):
        coin = u()
        return 0 if coin <= 0.3 else 1 if coin <= 0.7 else 2

    dist = enumerate_process(run)
    assert [dist[k] for k in range(3)] == pytest.approx([0.3, 0.4, 0.3], abs=TOL)
    both = enumerate_process(lambda u, c: (c(torch.tensor([0.25, 0.0, 0.75])), u() <= 0.5))
    assert both == pytest.approx(
        {(0, True): 0.125, (0, False): 0.125, (2, True): 0.375, (2, False): 0.375}
    )


# --- shapes, boundaries and refusals (what the mutation run showed untested) -------------------


def test_target_probs_rowwise_on_any_batch_shape() -> None:
    """One row ([V], the live loop's prefill), a batch of rows, and a [B, R, V] stack each give
    every row its own distribution: the rule works along the last axis only."""
    rng = np.random.default_rng(5)
    logits = torch.tensor(rng.standard_normal((2, 3, 9)) * 2, dtype=torch.float64)
    for s in (Sampling(0.0), Sampling(0.7, top_k=4, top_p=0.6), Sampling(1.0, top_p=0.9)):
        whole = target_probs(logits, s)
        assert whole.shape == logits.shape
        for b in range(2):
            for r in range(3):
                one = target_probs(logits[b, r], s)
                assert torch.allclose(whole[b, r], one, atol=1e-12)
                assert one.tolist() == pytest.approx(
                    _reference_probs(logits[b, r].tolist(), s)
                    if not s.greedy
                    else np.eye(9)[int(logits[b, r].argmax())].tolist(),
                    abs=1e-12,
                )
        assert torch.allclose(whole.sum(-1), torch.ones(2, 3, dtype=whole.dtype))


def test_top_p_ties_keep_the_lower_id() -> None:
    # 0.4 first, then the two 0.3s: only the first of them fits under top-p 0.5
    p = target_probs(
        torch.tensor([[0.3, 0.3, 0.4]], dtype=torch.float64).log(), Sampling(1.0, top_p=0.5)
    )
    assert (p > 0).tolist() == [[True, False, True]]


def test_threshold_single_reached_exactly_accepts_whatever_the_coin() -> None:
    single = Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_single=0.25)
    assert children_odds([0.25, 0.5], single) == pytest.approx([1.0, 0.0])


def test_round_odds_clamp_what_float_rounding_pushes_past_one() -> None:
    odds = RoundOdds.of(np.array([0.7, 0.6, 0.2]), [1, 1, 2], 2)
    assert odds.at_least == (1.0, 0.2)
    assert odds.expected == pytest.approx(1.2)


def test_a_draft_token_q_could_not_have_drawn_is_rejected() -> None:
    probs = torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]], dtype=torch.float64)
    q = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    reach = node_reach(probs, [0, 0], [-1, 0], PROBABILISTIC, q_drafted=[0.0, 1.0])
    assert reach.tolist() == [0.0, 0.0]
    dist = enumerate_process(
        lambda u, c: _pair(sample_verify(probs, [0, 0], [-1, 0], PROBABILISTIC, u, c, q))
    )
    assert sum(w for (path, _), w in dist.items() if path) == 0.0
    # the residual relu(p - q) then puts all the mass on token 0
    assert dist == pytest.approx({((), 0): 1.0})


def test_the_sampled_rules_refuse_what_they_cannot_verify() -> None:
    probs = torch.full((3, 2), 0.5, dtype=torch.float64)
    need_q = "^the sampled-draft rules need q\\(d\\) at every drafted node$"
    with pytest.raises(ValueError, match=need_q):
        node_reach(probs, [0, 1], [-1, 0], PROBABILISTIC)
    with pytest.raises(ValueError, match=need_q):
        node_reach(probs, [0, 1], [-1, 0], PROBABILISTIC, q_drafted=[0.5])
    with pytest.raises(
        ValueError, match="^sglang-rejection verifies chains: node 1 is not a chain's$"
    ):
        node_reach(probs, [0, 1], [-1, -1], REJECTION, q_drafted=[0.5, 0.5])
    with pytest.raises(
        ValueError, match="^the sampled-draft rules need the draft's distributions q$"
    ):
        sample_verify(probs, [0, 1], [-1, 0], PROBABILISTIC, lambda: 0.5, lambda p: 0)


def test_top_p_drops_a_token_whose_mass_above_is_exactly_p() -> None:
    # exactly [0.5, 0.25, 0.25] in float64: the third token has 0.75 above it, not below 0.75
    logits = torch.tensor([[math.log(2), 0.0, 0.0]], dtype=torch.float64)
    assert target_probs(logits, Sampling(1.0)).tolist() == [[0.5, 0.25, 0.25]]
    assert (target_probs(logits, Sampling(1.0, top_p=0.75)) > 0).tolist() == [[True, True, False]]


def test_the_process_takes_a_child_at_exactly_threshold_single() -> None:
    probs = torch.tensor([[0.25, 0.5, 0.25], [1 / 3] * 3, [1 / 3] * 3], dtype=torch.float64)
    single = Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_single=0.25)
    dist = enumerate_process(
        lambda u, c: _pair(sample_verify(probs, [0, 1], [-1, -1], single, u, c))
    )
    assert _paths(dist) == pytest.approx({(0,): 1.0})
