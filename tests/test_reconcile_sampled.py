"""reconcile at a temperature (`doctor/reconcile/sampled.py`) on hand-built live reports: each
round's odds are given, so every expected share, z and verdict is known by hand, and what each
verdict quotes (`Reconciliation.said`; its words are tests/test_reconcile_words.py's)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from inspector.doctor.reconcile.known_faults import known_faults
from inspector.doctor.reconcile.pipeline import reconcile
from inspector.doctor.reconcile.result import PositionCheck, Verdict
from inspector.doctor.reconcile.sampled import (
    ROUNDING,
    SAMPLING_FAULT,
    Z_LIMIT,
    below,
    consistent,
    position_checks,
    reconcile_sampled,
    shortfall,
)
from inspector.doctor.reconcile.words import (
    AtTemperature,
    BelowExpected,
    ExpectedBest,
    ExpectedOther,
    Fed,
    FitsNone,
    KnownBuild,
    Logged,
    Shortfall,
)
from inspector.engines.vllm import CPU_EXPAND as VLLM_CPU_EXPAND
from inspector.formats.engine_log import EngineLog, EngineStart
from inspector.formats.samples import v1_slot_info
from inspector.serving.expectation import Expectation, SampleOdds
from inspector.serving.replay import AcceptReport, SampleReplay, WiringAccept
from inspector.serving.sampling import RoundOdds
from inspector.serving.sampling_settings import Sampling, SamplingSettings, Verification
from inspector.serving.spec import DraftSpec
from inspector.wiring import Wiring

SLOTS = v1_slot_info([0, 2, 4, 6])
SETTINGS = SamplingSettings(Sampling(0.6), Verification())
NAMES = {
    (0, 1, 2): "configured [embed, L2, L4]",
    (1, 2, 3): "serve [L2, L4, L6]",
    (0, 2, 3): "mix [embed, L4, L6]",
}


def _odds(at_least: tuple[float, float, float]) -> RoundOdds:
    # a chain's reach is P(a >= k): RoundOdds from it at depths 1, 2, 3
    return RoundOdds.of(np.array(at_least), [1, 2, 3], 3)


def _wiring(slots: tuple[int, ...], at_least, rounds: int = 400) -> WiringAccept:
    """`rounds` rounds over 4 requests, every round with the same odds; the realised counts
    are the expectation rounded (what they are does not enter the verdict)."""
    wa = WiringAccept(Wiring(slots), NAMES[slots], 3)
    per = rounds // 4
    odds = _odds(at_least)
    for i in range(4):
        a = np.full(per, round(odds.expected), dtype=np.int64)
        wa.per_sample.append(
            SampleReplay(
                i,
                f"p{i}",
                np.arange(per, dtype=np.int64) * 2,
                a,
                a + 1,
                np.zeros(2 * per + 8, dtype=np.int64),
                3,
                odds=SampleOdds.of([odds] * per, 3),
            )
        )
    return wa


def _report(*wirings: WiringAccept) -> AcceptReport:
    return AcceptReport(
        spec=DraftSpec(3),
        mode="live",
        checkpoint="draft",
        samples=4,
        device="cpu",
        dtype="float32",
        slots=SLOTS,
        wirings=list(wirings),
        sampling=SETTINGS,
    )


def _log(rounds: int, per_pos: list[int] | None, al: float | None = None) -> EngineLog:
    accepted = sum(per_pos) if per_pos is not None else None
    if al is None:
        al = 1 + (accepted or 0) / rounds
    return EngineLog(
        Path("vllm.log"),
        "vllm",
        "log",
        accept_length=al,
        rounds=rounds if per_pos is not None else None,
        accepted=accepted,
        accepted_per_pos=per_pos,
        lines=1,
    )


TRAIN = (0.4, 0.2, 0.1)  # E[a] = 0.7: expected accept length 1.7
SERVE = (0.15, 0.03, 0.01)


def _fed(report: AcceptReport, i: int) -> Fed:
    """The report's i-th wiring as a verdict at a temperature names it: short label, expectation."""
    label = {0: "[embed, L2, L4]", 1: "[L2, L4, L6]", 2: "[embed, L4, L6]"}[i]
    assert report.wirings[i].label.endswith(label)
    return Fed(label, expected=report.wirings[i].expectation)


def test_z_per_position_is_the_two_sided_binomial_error() -> None:
    wa = _wiring((0, 1, 2), TRAIN, rounds=400)
    log = _log(1000, [380, 210, 20])
    checks = position_checks(log, wa.expectation)
    assert [c.depth for c in checks] == [1, 2, 3]
    for c, r, n in zip(checks, TRAIN, (380, 210, 20), strict=True):
        want = (n / 1000 - r) / math.sqrt(r * (1 - r) * (1 / 1000 + 1 / 400))
        assert c.z == pytest.approx(want)
        assert c.expected_share == pytest.approx(r)
        assert c.engine_share == pytest.approx(n / 1000)
    assert abs(checks[0].z) < Z_LIMIT and checks[2].z < -Z_LIMIT
    assert not consistent(log, wa.expectation, checks)


def test_an_engine_consistent_with_the_best_wiring_is_the_draft_as_it_is() -> None:
    report = _report(_wiring((0, 1, 2), TRAIN), _wiring((1, 2, 3), SERVE))
    log = _log(1000, [400, 195, 105])
    r = reconcile(log, report)
    assert r.verdict is Verdict.AS_IS
    assert r.matched == "configured [embed, L2, L4]" == r.best
    assert r.said == AtTemperature(Logged.of(log), SETTINGS.label(), ExpectedBest(_fed(report, 0)))
    assert not r.faults
    d = r.to_dict()
    assert d["wirings"][0]["expected"]["accept_length"] == pytest.approx(1.7)
    assert [p["depth"] for p in d["wirings"][0]["positions"]] == [1, 2, 3]
    assert any("not count for count" in n for n in r.notes)


def test_an_engine_consistent_with_another_wiring_feeds_the_wrong_layers() -> None:
    report = _report(_wiring((0, 1, 2), TRAIN), _wiring((1, 2, 3), SERVE))
    r = reconcile(_log(1000, [148, 31, 5]), report)
    assert r.verdict is Verdict.WRONG_WIRING
    assert r.matched == "serve [L2, L4, L6]" and r.best == "configured [embed, L2, L4]"
    assert r.said.finding == ExpectedOther(_fed(report, 1), _fed(report, 0), configured=True)
    assert r.fix is not None and "eagle_aux_hidden_state_layer_ids" in r.fix


def test_nothing_past_a_position_is_an_engine_side_fault_in_verification() -> None:
    """The vLLM CPU build's case: acceptance at the first position, none past it."""
    report = _report(_wiring((0, 1, 2), TRAIN), _wiring((1, 2, 3), SERVE))
    r = reconcile(_log(1000, [58, 0, 0]), report)
    assert r.verdict is Verdict.ENGINE_FAULT
    assert r.faults == [SAMPLING_FAULT]
    # nothing from depth 2 on, where a fifth of the rounds are expected to accept
    short = r.said.finding.shortfall
    assert (short.at.depth, short.at.engine_accepted, short.at.engine_rounds) == (2, 0, 1000)
    assert short.dead and short.at.expected_share == pytest.approx(0.2)
    assert short.settings == SETTINGS.label()
    none = reconcile(_log(1000, [0, 0, 0]), report).said.finding.shortfall
    assert (none.at.depth, none.at.engine_accepted, none.dead) == (1, 0, True)


def test_a_shortfall_that_still_accepts_names_its_first_position() -> None:
    wa = _wiring((0, 1, 2), TRAIN)
    log = _log(1000, [250, 100, 50])
    short = shortfall(position_checks(log, wa.expectation), SETTINGS.label())
    assert (short.at.depth, short.at.engine_accepted, short.at.engine_rounds) == (1, 250, 1000)
    assert not short.dead and short.at.expected_share == pytest.approx(0.4) and short.at.z < 0


def test_above_every_expectation_is_other_data() -> None:
    report = _report(_wiring((0, 1, 2), TRAIN), _wiring((1, 2, 3), SERVE))
    r = reconcile(_log(1000, [700, 500, 300]), report)
    assert r.verdict is Verdict.OTHER_DATA
    assert r.said.finding == FitsNone((_fed(report, 0), _fed(report, 1)))


def test_without_per_position_counts_the_interval_decides() -> None:
    report = _report(_wiring((0, 1, 2), TRAIN), _wiring((1, 2, 3), SERVE))
    e = report.wirings[0].expectation
    # every request has the same odds: the bootstrap interval is the point itself
    assert e.low == pytest.approx(1.7) and e.high == pytest.approx(1.7)
    assert reconcile(_log(1000, None, al=1.70), report).verdict is Verdict.AS_IS
    assert reconcile(_log(1000, None, al=1.05), report).verdict is Verdict.ENGINE_FAULT
    faulty = reconcile(_log(1000, None, al=1.05), report)
    assert faulty.said.finding == BelowExpected(_fed(report, 0), shortfall=None)  # no positions


def test_every_verdict_and_what_it_quotes() -> None:
    report = _report(_wiring((0, 1, 2), TRAIN), _wiring((1, 2, 3), SERVE))
    train, serve = _fed(report, 0), _fed(report, 1)
    assert (train.figure, serve.figure) == (
        "expected 1.70 [1.70, 1.70]",
        "expected 1.19 [1.19, 1.19]",
    )

    def said(figure: str, finding) -> AtTemperature:
        return AtTemperature(Logged("vLLM", figure), SETTINGS.label(), finding)

    as_is = reconcile(_log(1000, [400, 195, 105]), report)
    figure = "1.70 (700 accepted in 1000 rounds, vLLM 1 log line)"
    assert as_is.said == said(figure, ExpectedBest(train))
    assert as_is.summary == str(as_is.said)
    assert as_is.fix is None and as_is.serving_config["hf_indices"] == [0, 2, 4]
    wrong = reconcile(_log(1000, [148, 31, 5]), report)
    figure = "1.18 (184 accepted in 1000 rounds, vLLM 1 log line)"
    assert wrong.said == said(figure, ExpectedOther(serve, train, configured=True))
    assert wrong.fix == (
        "serve it fed [embed, L2, L4]: eagle_aux_hidden_state_layer_ids [0, 2, 4] for vLLM, "
        "eagle_config ids for SGLang 0.5.23 by the target's model file (target class unknown): "
        "[-1, 1, 3] where it adds 1 to every id (Llama, Qwen, Gemma), [0, 2, 4] where it adds 1 "
        "only when the first id is 1 (DeepSeek-V2/V3)"
    )
    fault = reconcile(_log(1000, [58, 0, 0]), report)
    figure = "1.06 (58 accepted in 1000 rounds, vLLM 1 log line)"
    depth_2 = fault.checks[0].positions[1]  # the configured wiring's: nothing from depth 2 on
    assert (depth_2.depth, depth_2.engine_accepted) == (2, 0)
    short = Shortfall(depth_2, True, SETTINGS.label())
    assert fault.said == said(figure, BelowExpected(train, short))
    other = reconcile(_log(1000, [700, 500, 300]), report)
    figure = "2.50 (1500 accepted in 1000 rounds, vLLM 1 log line)"
    assert other.said == said(figure, FitsNone((train, serve)))
    assert [c.equal for c in as_is.checks] == [True, False]
    assert [c.equal for c in wrong.checks] == [False, True]
    assert as_is.to_dict()["verdict"] == "as_is" and as_is.best == as_is.matched
    assert other.matched is None and fault.matched is None


CPU_0320 = EngineStart("vllm.log:16", "0.32.0", "cpu", "eagle3", "draft", 3)


def _started(log: EngineLog, *starts: EngineStart) -> EngineLog:
    log.starts = list(starts)
    return log


def test_a_build_known_to_verify_wrong_is_the_engines_fault_whatever_its_figure() -> None:
    """vLLM's CPU build 0.32.0 at a temperature: its acceptance is random, and one CI run's
    figure (86 accepted in 932 rounds) lay within the noise of the serve wiring, which the
    statistics alone read as the wrong layers fed. Named from its start-up line, the build's
    fault decides; the statistics are said as what they are."""
    report = _report(_wiring((0, 1, 2), TRAIN), _wiring((1, 2, 3), SERVE))
    counts = [148, 31, 5]  # within the noise of SERVE
    assert reconcile(_log(1000, counts), report).verdict is Verdict.WRONG_WIRING
    r = reconcile(_started(_log(1000, counts), CPU_0320), report)
    assert r.verdict is Verdict.ENGINE_FAULT and r.matched is None and r.fix is None
    assert r.faults == [VLLM_CPU_EXPAND.detail]
    assert "expanded temperatures" in r.faults[0]
    train, serve = _fed(report, 0), _fed(report, 1)
    # named by its build, the build's fault decides; what the statistics say follows
    build = Logged(
        "vLLM 0.32.0 on cpu (vllm.log:16)", "1.18 (184 accepted in 1000 rounds, vLLM 1 log line)"
    )
    settings, what = SETTINGS.label(), VLLM_CPU_EXPAND.what
    assert r.said == KnownBuild(build, settings, what, ExpectedOther(serve, train, True))
    assert r.to_dict()["engine_log"]["build"] == {
        "version": "0.32.0",
        "device": "cpu",
        "method": "eagle3",
        "draft": "draft",
        "spec_tokens": 3,
        "where": "vllm.log:16",
        "engine": "vllm",
        "commit": None,
    }
    # the statistics agree: the shortfall's sentence follows the build's fault
    short = reconcile(_started(_log(1000, [58, 0, 0]), CPU_0320), report)
    assert short.verdict is Verdict.ENGINE_FAULT and isinstance(short.said, KnownBuild)
    depth_2 = Shortfall(short.checks[0].positions[1], True, settings)
    assert short.said.finding == BelowExpected(train, depth_2)
    best = reconcile(_started(_log(1000, [400, 195, 105]), CPU_0320), report)
    assert best.verdict is Verdict.ENGINE_FAULT and isinstance(best.said, KnownBuild)
    assert best.said.finding == ExpectedBest(train)
    above = reconcile(_started(_log(1000, [700, 500, 300]), CPU_0320), report)
    assert above.verdict is Verdict.ENGINE_FAULT and isinstance(above.said, KnownBuild)
    assert above.said.finding == FitsNone((train, serve))


def test_only_the_builds_measured_to_verify_wrong_are_named() -> None:
    report = _report(_wiring((0, 1, 2), TRAIN), _wiring((1, 2, 3), SERVE))
    counts = [148, 31, 5]
    others = [
        EngineStart("vllm.log:3", "0.32.0", "cuda", "eagle3", "draft", 3),
        EngineStart("vllm.log:3", "0.33.0", "cpu", "eagle3", "draft", 3),
        EngineStart("vllm.log:3", "0.31.1", "cpu", "eagle3", "draft", 3),
    ]
    for start in others:
        r = reconcile(_started(_log(1000, counts), start), report)
        assert r.verdict is Verdict.WRONG_WIRING, start
    # two start-ups of different builds: which logged the figures is not known
    mixed = _started(_log(1000, counts), CPU_0320, others[0])
    assert mixed.start is None
    assert reconcile(mixed, report).verdict is Verdict.WRONG_WIRING
    # a restart of the same build is still that build
    again = _started(_log(1000, counts), CPU_0320, CPU_0320)
    assert again.start == CPU_0320
    assert reconcile(again, report).verdict is Verdict.ENGINE_FAULT
    # the truth table of the rule itself: engine, device, version, temperature
    assert known_faults("vllm", CPU_0320, 0.6) == [VLLM_CPU_EXPAND]
    assert known_faults("vllm", CPU_0320, 0.0) == []
    assert known_faults("sglang", CPU_0320, 0.6) == []
    assert known_faults("vllm", None, 0.6) == []


def test_the_configured_wiring_is_the_reference_of_a_fault() -> None:
    report = _report(_wiring((0, 1, 2), SERVE), _wiring((1, 2, 3), TRAIN))
    fault = reconcile(_log(1000, [0, 0, 0]), report, configured=0)
    assert fault.said.finding.reference == _fed(report, 0)  # SERVE's odds, configured
    assert fault.best == "serve [L2, L4, L6]"  # by expectation, not by name
    no_conf = reconcile(_log(1000, [0, 0, 0]), report, configured=None)
    assert no_conf.said.finding.reference == _fed(report, 1)  # TRAIN's odds, the best


def test_boundaries_of_consistent_and_below() -> None:
    from inspector.doctor.reconcile.sampled import below

    wa = _wiring((0, 1, 2), TRAIN, rounds=400)
    e = wa.expectation
    # without per-position counts: the interval [1.7, 1.7] widened by the log's rounding
    for al, ok in ((1.705, True), (1.6951, True), (1.7051, False), (1.69, False)):
        assert consistent(_log(1000, None, al=al), e, None) is ok, al
    assert below(_log(1000, None, al=1.6949), e, None)
    assert not below(_log(1000, None, al=1.6951), e, None)
    silent = EngineLog(Path("v.log"), "vllm", "log", accept_length=None)
    assert not below(silent, e, None) and not consistent(silent, e, None)
    # per position: |z| <= 4 is consistent, a z below -4 is below
    edge = [PositionCheckLike(4.0), PositionCheckLike(-4.0)]
    assert consistent(_log(1000, [1, 1, 1]), e, edge)
    assert not below(_log(1000, [1, 1, 1]), e, edge)
    assert below(_log(1000, [1, 1, 1]), e, [PositionCheckLike(-4.01)])
    assert not consistent(_log(1000, [1, 1, 1]), e, [PositionCheckLike(4.01)])


class PositionCheckLike:
    def __init__(self, z: float) -> None:
        self.z = z


def test_position_checks_without_variance_and_without_counts() -> None:
    certain = _wiring((0, 1, 2), (1.0, 0.0, 0.0))  # every round accepts exactly one token
    e = certain.expectation
    exact = position_checks(_log(500, [500, 0, 0]), e)
    assert [c.z for c in exact] == [0.0, 0.0, 0.0]
    off = position_checks(_log(500, [499, 1, 0]), e)
    assert off[0].z == -math.inf and off[1].z == math.inf and off[2].z == 0.0
    assert position_checks(_log(500, None, al=1.5), e) is None
    no_rounds = EngineLog(
        Path("v.log"), "vllm", "log", accept_length=1.0, rounds=0, accepted_per_pos=[0]
    )
    assert position_checks(no_rounds, e) is None


def test_the_expectations_json() -> None:
    wa = _wiring((0, 1, 2), TRAIN, rounds=400)
    d = wa.expectation.to_dict()
    assert set(d) == {
        "accept_length",
        "ci_low",
        "ci_high",
        "level",
        "expected_accepted",
        "realised_accepted",
        "realised_accept_length",
        "z",
        "expected_accepted_per_pos",
        "per_depth",
        "meaning",
    }
    assert d["accept_length"] == pytest.approx(1.7)
    assert d["ci_low"] == pytest.approx(1.7) and d["ci_high"] == pytest.approx(1.7)
    assert d["level"] == 0.95
    assert d["expected_accepted"] == pytest.approx(0.7 * 400)
    assert d["realised_accepted"] == 400  # each round realised round(0.7) = 1
    assert d["realised_accept_length"] == pytest.approx(2.0)
    var = 400 * ((0.4 + 3 * 0.2 + 5 * 0.1) - 0.7**2)
    assert d["z"] == pytest.approx((400 - 280) / math.sqrt(var))
    assert d["expected_accepted_per_pos"] == pytest.approx([160, 80, 40])
    assert d["per_depth"] == pytest.approx(list(TRAIN))
    assert d["meaning"].startswith("accept_length: 1 + the sum over rounds")


def test_the_table_marks_a_wiring_consistent_at_a_temperature_not_equal() -> None:
    from rich.console import Console

    from inspector.commands.reconcile import render

    report = _report(_wiring((0, 1, 2), TRAIN), _wiring((1, 2, 3), SERVE))
    r = reconcile(_started(_log(1000, [148, 31, 5]), CPU_0320), report)
    console = Console(record=True, width=200)
    console.print(render(r, report))
    text = console.export_text()
    serve = next(ln for ln in text.splitlines() if "serve [L2, L4, L6]" in ln)
    assert serve.rstrip(" │").endswith("consistent")
    conf = next(ln for ln in text.splitlines() if "configured [embed" in ln)
    assert conf.rstrip(" │").endswith("best") and " equal " not in text.replace(
        "requests equal", ""
    )
    assert "vLLM's CPU build 0.32.0 verifies sampled requests" in text


SERVE_2 = (0.16, 0.02, 0.01)  # the same expected accept length as SERVE, 1.19


def test_an_engine_logging_more_positions_than_the_draft_ran_is_held_at_the_shared_ones():
    wa = _wiring((0, 1, 2), TRAIN, rounds=400)
    checks = position_checks(_log(1000, [400, 200, 100, 50]), wa.expectation)
    assert [c.depth for c in checks] == [1, 2, 3]
    assert [c.z for c in checks] == pytest.approx([0.0, 0.0, 0.0])


def test_the_interval_bounds_are_closed_to_the_rounding():
    e = _wiring((0, 1, 2), TRAIN).expectation
    edge = e.low - ROUNDING  # the same float the rule computes
    assert consistent(_log(1000, None, al=edge), e, None)
    assert not below(_log(1000, None, al=edge), e, None)
    top = e.high + ROUNDING
    assert consistent(_log(1000, None, al=top), e, None)


def _pc(depth: int, accepted: int, z: float, share: float = 0.2) -> PositionCheck:
    return PositionCheck(depth, accepted, 1000, share, z)


def test_the_shortfall_names_the_first_position_past_the_noise():
    settings = SETTINGS.label()
    # depth 1 is within the noise, depth 2 is short: depth 2 is named
    at = [_pc(1, 300, -1.0), _pc(2, 50, -6.0, 0.2)]
    assert shortfall(at, settings) == Shortfall(at[1], False, settings)
    # a z of exactly -4 is the noise's edge, not past it
    assert shortfall([_pc(1, 300, -4.0), _pc(2, 50, -6.0)], settings).at.depth == 2


def test_nothing_accepted_is_dead_only_where_it_is_also_short():
    settings = SETTINGS.label()
    # depth 1 short but accepting; nothing past it, yet within the noise there: not dead
    within = [_pc(1, 100, -6.0, 0.4), _pc(2, 0, -1.0, 0.01), _pc(3, 0, -0.5, 0.005)]
    assert shortfall(within, settings) == Shortfall(within[0], False, settings)
    edge = [_pc(1, 100, -6.0, 0.4), _pc(2, 0, -4.0, 0.05), _pc(3, 0, -0.5, 0.005)]
    assert shortfall(edge, settings) == Shortfall(edge[0], False, settings)
    dead = [_pc(1, 100, -6.0, 0.4), _pc(2, 0, -4.5, 0.05), _pc(3, 0, -0.5, 0.005)]
    assert shortfall(dead, settings) == Shortfall(dead[1], True, settings)


def test_sglangs_figure_is_named_sglang():
    report = _report(_wiring((0, 1, 2), TRAIN), _wiring((1, 2, 3), SERVE))
    log = EngineLog(Path("sglang.log"), "sglang", "log", accept_length=1.7, lines=3)
    r = reconcile(log, report)
    assert r.verdict is Verdict.AS_IS and r.said.logged == Logged(
        "SGLang", "1.70 (SGLang 3 log lines)"
    )


def test_what_cannot_be_reconciled_is_refused_in_words():
    report = _report(_wiring((0, 1, 2), TRAIN))
    silent = EngineLog(Path("vllm.log"), "vllm", "log", accept_length=None)
    with pytest.raises(
        ValueError, match="^nothing to reconcile: no rounds run or no figure logged$"
    ):
        reconcile(silent, report)
    greedy = _report(_wiring((0, 1, 2), TRAIN))
    greedy.sampling = None
    with pytest.raises(ValueError, match="^a greedy report: reconcile counts it round for"):
        reconcile_sampled(_log(1000, [400, 200, 100]), greedy, configured=0)


def test_a_report_without_expectations_or_rounds_is_refused_in_words(monkeypatch):
    bare = _report(_wiring((0, 1, 2), TRAIN))
    bare.wirings[0].per_sample.clear()  # not run live: no expectation
    with pytest.raises(
        ValueError, match="^a sampled report without expectations: run the live loop$"
    ):
        reconcile(_log(1000, [400, 200, 100]), bare)
    no_rounds = Expectation(0, 0, 0.0, 0.0, (0.0, 0.0, 0.0), None, None, 0.95)
    monkeypatch.setattr(WiringAccept, "expectation", property(lambda self: no_rounds))
    with pytest.raises(ValueError, match="^nothing to reconcile: no rounds run"):
        reconcile(_log(1000, [400, 200, 100]), _report(_wiring((0, 1, 2), TRAIN)))


def test_a_verdict_without_a_fault_lists_none_and_pairs_no_requests():
    report = _report(_wiring((0, 1, 2), TRAIN), _wiring((1, 2, 3), SERVE))
    other = reconcile(_log(1000, [700, 500, 300]), report)
    assert other.faults == [] and other.to_dict()["engine_fault_classes"] == []
    assert other.requests_matched == 0 and other.to_dict()["requests_matched"] == 0
    assert other.gap is None


def test_of_several_consistent_wirings_the_best_is_named_else_the_closest():
    # TRAIN and a near copy both fit the figure: the best by expectation is the one named
    near = (0.39, 0.2, 0.1)
    report = _report(_wiring((0, 2, 3), near), _wiring((0, 1, 2), TRAIN))
    r = reconcile(_log(1000, [390, 200, 100]), report, configured=0)
    assert [c.equal for c in r.checks] == [True, True]
    assert r.verdict is Verdict.AS_IS and r.matched == "configured [embed, L2, L4]"
    # two wirings other than the best fit: the one of smaller worst |z| is named
    report = _report(
        _wiring((0, 1, 2), TRAIN), _wiring((1, 2, 3), SERVE), _wiring((0, 2, 3), SERVE_2)
    )
    r = reconcile(_log(1000, [160, 20, 10]), report)
    assert [c.equal for c in r.checks] == [False, True, True]
    assert r.verdict is Verdict.WRONG_WIRING and r.matched == "mix [embed, L4, L6]"
    r = reconcile(_log(1000, [150, 30, 10]), report)
    assert r.matched == "serve [L2, L4, L6]"
    # without per-position counts both read the same: the first is named
    r = reconcile(_log(1000, None, al=1.19), report)
    assert [c.equal for c in r.checks] == [False, True, True]
    assert r.matched == "serve [L2, L4, L6]"


def test_a_best_wiring_the_config_does_not_name_is_not_called_configured():
    report = _report(_wiring((0, 1, 2), TRAIN), _wiring((1, 2, 3), SERVE))
    r = reconcile(_log(1000, [148, 31, 5]), report, configured=1)
    assert r.verdict is Verdict.WRONG_WIRING
    assert r.said.finding == ExpectedOther(_fed(report, 1), _fed(report, 0), configured=False)
    assert r.serving_config is not None and r.serving_config["hf_indices"] == [0, 2, 4]
    # a fault against a configured wiring that is not the best still gives the best's config
    fault = reconcile(_log(1000, [0, 0, 0]), report, configured=1)
    assert fault.verdict is Verdict.ENGINE_FAULT
    assert fault.serving_config is not None and fault.serving_config["hf_indices"] == [0, 2, 4]
    same = reconcile(_log(1000, [0, 0, 0]), report, configured=0)
    assert same.serving_config is None


def test_one_position_short_is_a_fault_even_where_the_mean_fits():
    # the engine's mean equals the expectation, but it accepted nothing past position 0
    report = _report(_wiring((0, 1, 2), TRAIN))
    r = reconcile(_log(1000, [700, 0, 0]), report)
    assert r.log.accept_length == pytest.approx(1.7)
    assert r.verdict is Verdict.ENGINE_FAULT
