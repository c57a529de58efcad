"""The long-context check: the replayed accept length before and after 2K tokens of context."""

from __future__ import annotations

from inspector.doctor.checks.long_context import long_context_finding
from inspector.metrics.rounds import AcceptStats, Round


def _stats(early: list[tuple[int, int]], late: list[tuple[int, int]]) -> AcceptStats:
    """Rounds (start, a) before and after the split; each emits a + 1."""
    rounds = [Round(s, a, a + 1) for s, a in early + late]
    return AcceptStats.of(rounds, depth=3)


def test_a_collapse_past_2k_tokens_is_a_warning():
    s = _stats([(100 + i, 2) for i in range(60)], [(5000 + i, 0) for i in range(60)])
    f = long_context_finding(s)
    assert f is not None and f.kind == "long_context" and f.severity == "warning"
    assert f.facts.to_dict() == {
        "split": 2048,
        "early": {"rounds": 60, "accept_length": 3.0},
        "late": {"rounds": 60, "accept_length": 1.0},
    }
    assert (
        "accept len 3.00 in rounds starting within the first 2048 tokens (60 rounds)" in f.summary
    )
    assert "1.00 beyond (60 rounds)" in f.summary and "rope" in f.fix


def test_a_steady_accept_length_or_too_few_rounds_is_info():
    steady = long_context_finding(_stats([(10, 1)] * 60, [(3000, 1)] * 60))
    assert steady is not None and steady.severity == "info" and "no long-context" in steady.summary
    few = long_context_finding(_stats([(10, 2)] * 60, [(3000, 0)] * 49))
    assert few is not None and few.severity == "info"
    # a drop just under 0.3 tokens per round is no collapse; at 0.3 it is
    small = long_context_finding(_stats([(10, 1)] * 100, [(3000, 1)] * 71 + [(3000, 0)] * 29))
    assert small.severity == "info"
    at = long_context_finding(_stats([(10, 1)] * 100, [(3000, 1)] * 70 + [(3000, 0)] * 30))
    assert at.severity == "warning"


def test_no_finding_without_rounds_on_both_sides():
    assert long_context_finding(None) is None
    assert long_context_finding(_stats([(10, 1)] * 60, [])) is None
    assert long_context_finding(_stats([], [(3000, 1)] * 60)) is None
    # the split is at 2048 tokens: a round starting at 2047 is early, at 2048 late
    assert long_context_finding(_stats([(2047, 1)], [])) is None
    assert long_context_finding(_stats([(10, 1)], [(2048, 1)])) is not None


def test_rounds_are_summed_over_every_bucket_on_each_side():
    early = [(10, 1)] * 30 + [(1500, 2)] * 30  # buckets 0 and 1
    late = [(2100, 1)] * 25 + [(4000, 0)] * 25 + [(9000, 1)] * 1  # buckets 2, 3, 8
    f = long_context_finding(_stats(early, late))
    assert f.facts.early_rounds == 60 and f.facts.early == 2.5
    # late: 26 rounds emitting 2, 25 emitting 1 -> 77 / 51, rounded to 4 places
    assert f.facts.late_rounds == 51 and f.facts.late == 1.5098
    assert f.severity == "warning"  # 51 and 60 rounds: enough; a drop of 0.99


def test_exactly_the_minimum_rounds_count():
    f = long_context_finding(_stats([(10, 2)] * 50, [(3000, 0)] * 50))
    assert f.severity == "warning"
    g = long_context_finding(_stats([(10, 0)] * 2 + [(10, 1)], [(3000, 0)] * 3))
    assert g.facts.early == 1.3333 and g.severity == "info"  # 4 / 3 rounded, too few rounds
    h = long_context_finding(_stats([(10, 1)] * 3, [(3000, 0)] * 2 + [(3000, 1)]))
    assert h.facts.late == 1.3333
