"""What an engine logged at a temperature, explained: its per-position acceptance against what
the draft is expected to accept under the engine's verification rule, per wiring.

At a temperature the engine's rounds are random, so no count can equal the replay's. The live
loop instead gives, for every round it ran, the exact probability that the rule accepts at
least k drafted tokens given the round's start (`serving.expectation`); pooled, the expected
share r_k of rounds accepting >= k. The engine's logged share c_k / R (vLLM's per-position
counts over its drafts) is held against it:

    z_k = (c_k / R - r_k) / sqrt(r_k (1 - r_k) (1 / R + 1 / R_loop))

a binomial error on each side (the engine's R rounds, the loop's R_loop round starts, which
estimate r_k). |z_k| <= 4 at every position: the engine's figure is consistent with the
wiring's expectation (a false alarm about 6e-5 a position under the normal approximation).
Where the log holds no per-position counts (SGLang's), its accept length is held against the
expectation's bootstrap interval instead.

Then, as at temperature 0: consistent with the wiring the weights fit best, the draft is what
it is; with another wiring only, the engine feeds the wrong layers; below every wiring's
expectation at some position, an engine-side fault in verification (its sampling path, not
the draft); otherwise the requests or settings differ from the engine's.

A build known to verify wrong at a temperature (`known_faults`, named by the log's start-up
line) is an engine fault whatever its figure: its acceptance is random, and now and then lands
within the noise of a wiring it was not fed. The statistics are still said, as what they are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from inspector.doctor.reconcile import words
from inspector.doctor.reconcile.known_faults import known_faults
from inspector.doctor.reconcile.result import (
    PositionCheck,
    Reconciliation,
    Verdict,
    WiringCheck,
    reference,
    serving_fix,
    short_label,
)
from inspector.doctor.wiring.trained import TrainedWiring
from inspector.engines import Engine
from inspector.formats.engine_log import EngineLog
from inspector.serving.expectation import Expectation
from inspector.serving.replay import AcceptReport

Z_LIMIT = 4.0
# a mean printed with two decimals is within half a unit of its last digit
ROUNDING = 0.005

SAMPLING_FAULT = (
    "the request's sampling parameters reach the engine's verification wrong, so the target's "
    f"probabilities it verifies with are not the request's ({Engine.VLLM.says('cpu_sampling')}): "
    "rerun the same requests at temperature 0, where the engine "
    "must match the replay count for count"
)


def position_checks(log: EngineLog, e: Expectation) -> list[PositionCheck] | None:
    """Per depth, the engine's logged count against the expectation (None: the log has no
    per-position counts, or no rounds)."""
    if log.accepted_per_pos is None or not log.rounds or not e.rounds:
        return None
    out = []
    for k, (c, r) in enumerate(zip(log.accepted_per_pos, e.per_depth, strict=False)):
        var = r * (1 - r) * (1 / log.rounds + 1 / e.rounds)
        diff = c / log.rounds - r
        z = (
            diff / math.sqrt(var)
            if var > 0
            else (0.0 if abs(diff) < 1e-12 else math.copysign(math.inf, diff))
        )
        out.append(PositionCheck(k + 1, int(c), int(log.rounds), r, z))
    return out


def consistent(log: EngineLog, e: Expectation, checks: list[PositionCheck] | None) -> bool:
    if checks is not None:
        return all(abs(c.z) <= Z_LIMIT for c in checks)
    if log.accept_length is None or e.low is None or e.high is None:
        return False
    return e.low - ROUNDING <= log.accept_length <= e.high + ROUNDING


def below(log: EngineLog, e: Expectation, checks: list[PositionCheck] | None) -> bool:
    """The engine accepted less than this wiring is expected to, beyond the noise."""
    if checks is not None:
        return any(c.z < -Z_LIMIT for c in checks)
    if log.accept_length is None or e.low is None:
        return False
    return log.accept_length < e.low - ROUNDING


def shortfall(checks: list[PositionCheck], settings: str) -> words.Shortfall:
    """Where the engine fell short under `settings` (the sampling label): past which position it
    accepted nothing, or the first position it accepted too little at."""
    short = [c for c in checks if c.z < -Z_LIMIT]
    # the first depth from which the engine accepted nothing at all, where drafts were expected
    dead = next(
        (
            c
            for c in checks
            if c.engine_accepted == 0
            and c.z < -Z_LIMIT
            and all(d.engine_accepted == 0 for d in checks if d.depth >= c.depth)
        ),
        None,
    )
    if dead is not None:
        return words.Shortfall(dead, True, settings)
    return words.Shortfall(short[0], False, settings)


def reconcile_sampled(
    log: EngineLog,
    report: AcceptReport,
    *,
    configured: int | None,
    notes: Sequence[str] = (),
    trained: tuple[Sequence[int], TrainedWiring] | None = None,
) -> Reconciliation:
    """Hold `log` against `report`'s wirings run live at a temperature (module docstring).
    configured: the index of the wiring the draft's config names (None: it names none).
    trained: (its index, the wiring search's answer), as `reconcile` takes it."""
    if report.sampling is None:
        raise ValueError("a greedy report: reconcile counts it round for round, not by odds")
    settings = report.sampling.label()
    notes = list(notes)
    checks: list[WiringCheck] = []
    for wa in report.wirings:
        e = wa.expectation
        if e is None:
            raise ValueError("a sampled report without expectations: run the live loop")
        pos = position_checks(log, e)
        wc = WiringCheck(wa.label, wa.wiring.slots, wa.stats, consistent(log, e, pos))
        wc.expected, wc.positions = e, pos
        checks.append(wc)
    scored = [c for c in checks if _expected(c).accept_length is not None]
    if not scored or log.accept_length is None:
        raise ValueError("nothing to reconcile: no rounds run or no figure logged")
    conf = checks[configured] if configured is not None else None
    best = _sampled_reference(checks, scored, trained, conf)
    ref = conf if conf is not None else best
    label = {c.label: short_label(c.label) for c in checks}

    def fed(c: WiringCheck) -> words.Fed:
        return words.Fed(label[c.label], expected=_expected(c))

    matches = [c for c in scored if c.equal]
    served = None
    faults: list[str] = []
    # what the statistics say: the verdict and its finding (the words after the logged figure,
    # and how the same reads after a build known to verify wrong)
    finding: words.Finding
    if matches:
        m = best if best in matches else min(matches, key=_worst_z)
        served = m.label
        if trained is not None:
            worse = _clearly_below(m, best)
            verdict = Verdict.WRONG_WIRING if worse else Verdict.AS_IS
            clause = words.Trained.of(trained[1], m, best, conf, fed)
            finding = words.ExpectedTrained(fed(m), clause, worse)
        elif m is best:
            verdict = Verdict.AS_IS
            finding = words.ExpectedBest(fed(m))
        else:
            verdict = Verdict.WRONG_WIRING
            finding = words.ExpectedOther(fed(m), fed(best), best is conf)
    elif all(below(log, _expected(c), c.positions) for c in scored):
        verdict = Verdict.ENGINE_FAULT
        short = shortfall(ref.positions, settings) if ref.positions is not None else None
        finding = words.BelowExpected(fed(ref), short)
        faults = [SAMPLING_FAULT]
    else:
        verdict = Verdict.OTHER_DATA
        finding = words.FitsNone(tuple(fed(c) for c in scored))
    said: words.AtTemperature | words.KnownBuild
    said = words.AtTemperature(words.Logged.of(log), settings, finding)
    build_faults = known_faults(log.engine, log.start, report.sampling.sampling.temperature)
    if build_faults and log.start is not None:
        # the build's fault decides; what the statistics alone say follows, as what it is
        said = words.KnownBuild(words.Logged.build(log), settings, build_faults[0].what, finding)
        verdict, served = Verdict.ENGINE_FAULT, None
        faults = [f.detail for f in build_faults]
    serving_config, fix = serving_fix(verdict, best, conf, report, label)
    notes.append(
        f"sampled at {settings}: the engine's rounds are random, so its figure is held against "
        "each wiring's expectation under the rule (z per position, |z| <= 4), not count for "
        "count"
    )
    return Reconciliation(
        log,
        checks,
        verdict,
        said,
        fix=fix,
        matched=served,
        best=best.label,
        faults=faults,
        notes=notes,
        serving_config=serving_config,
        trained=trained[1] if trained is not None else None,
        configured=conf.label if conf is not None else None,
    )


def _clearly_below(a: WiringCheck, b: WiringCheck) -> bool:
    """a's expected accept length lies clearly below b's: their intervals do not overlap (an
    expectation without an interval: by its value alone)."""
    if a is b:
        return False
    ea, eb = _expected(a), _expected(b)
    if ea.high is not None and eb.low is not None:
        return ea.high < eb.low
    return _expected_length(a) < _expected_length(b)


def _sampled_reference(checks, scored, trained, conf) -> WiringCheck:
    """The wiring the verdict holds the others to at a temperature (`settle`'s rule over the
    expectations): the configured wiring where the step-0 search does not clearly beat it and no
    contender's expected accept length lies clearly above it, else the step-0 top unless a
    contender lies clearly above that; without a search, the best expectation."""
    if trained is None:
        return reference(checks, scored, trained, key=_expected_length)
    contenders = [checks[i] for i in trained[0] if checks[i] in scored]
    if not contenders:
        return reference(checks, scored, trained, key=_expected_length)
    base = contenders[0]
    if conf is not None and conf in scored and not trained[1].clearly:
        base = conf
    above = [c for c in contenders if _clearly_below(base, c)]
    return max(above, key=_expected_length) if above else base


def _expected(c: WiringCheck) -> Expectation:
    # every check of a sampled reconciliation carries its wiring's expectation
    assert c.expected is not None
    return c.expected


def _expected_length(c: WiringCheck) -> float:
    # a scored check's expectation has an accept length (it ran rounds)
    al = _expected(c).accept_length
    assert al is not None
    return al


def _worst_z(c: WiringCheck) -> float:
    return max((abs(p.z) for p in c.positions or []), default=0.0)
