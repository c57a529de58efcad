"""What an engine logged, explained: its figures against the replay of the same requests under the
configured wiring and the alternatives.

The engine's figure is held against each wiring's replay, exactly where it gives counts (vLLM's
log lines and Prometheus counters print accepted tokens and drafts; a request's
`per_step_accepted` gives every round) and within its rounding where it gives a mean only
(SGLang's windows). Then one of:

- it equals the replay of the wiring the weights were trained on, as the evidence settles it
  (`settle`: the configured wiring stands unless the step-0 search, the fc fingerprint or a
  paired replay interval clearly prefers another), or of one within noise of it: the draft is
  what it is ("served as configured" when the engine fed the configured wiring);
- it equals another wiring's replay, clearly below the trained one's on these requests: the
  engine feeds the draft the wrong layers; the fix is the serving config of the trained wiring
  (naming the neighbours the samples cannot tell from it);
- it equals a replay, but the witnesses disagree on the trained wiring: undecided, no fix;
- it lies below every wiring's replay: an engine-side fault (the engine accepted less than this
  draft accepts on these very requests); the first request and round where it did, and the
  engine-side fault classes that fit;
- it lies above every replay, or between them matching none: the samples are not the requests
  the engine served (other prompts, other sampling, other limits);
- either, where the per-request figures show the engine's side: from one point on it accepted
  nothing where the replay does (a gate), or one server slot departs (`reconcile_blame`);
- it is what the engine's synthetic acceptance gives (`synthetic_acceptance`): it says nothing
  about the draft, and no wiring is blamed.

Where the log gives each round's drafted count (vLLM's `per_step_drafted`), every request paired
with a sample is replayed under that schedule (`SampleReplay.rescheduled`), so the comparison holds
count for count under an engine that drafts fewer tokens in some rounds. Where it gives none and
the engine's draft length adapts (its log's start-up lines say so, or the caller does: `adaptive`),
the replay at a fixed K is an upper bound of the engine's figure (the summary says so).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from inspector.doctor.reconcile import words
from inspector.doctor.reconcile.blame import blamed
from inspector.doctor.reconcile.evidence import (
    ambiguous_fix,
    check_of,
    clearly_worse,
    evidence_lines,
    request_counts,
    settled,
)
from inspector.doctor.reconcile.matching import below, matching_checks, wiring_checks
from inspector.doctor.reconcile.replay_counts import bound_reason, under_schedules
from inspector.doctor.reconcile.result import (
    Gap,
    Reconciliation,
    Verdict,
    WiringCheck,
    config_fix,
    reference,
    serving_fix,
    short_label,
)
from inspector.doctor.reconcile.sampled import reconcile_sampled
from inspector.doctor.reconcile.settle import Settlement
from inspector.doctor.reconcile.shortfall import fault_classes, first_gap
from inspector.doctor.reconcile.synthetic import (
    SyntheticCheck,
    SyntheticSetting,
    synthetic_check,
    synthetic_reconciliation,
)
from inspector.doctor.wiring.trained import TrainedWiring
from inspector.formats.engine_log import EngineLog, RequestFigures
from inspector.serving.replay import AcceptReport, SampleReplay


def token_key(ids: Sequence[int]) -> bytes:
    """A sample's or request's tokens as a 16-byte digest: what pairing holds per sample, so
    that a set of 10^5 samples of 32K tokens costs 1.6 MB to pair, not its tokens as lists."""
    return hashlib.blake2b(array("q", ids).tobytes(), digest_size=16).digest()


def pair_requests(
    log: EngineLog, samples: Sequence[tuple[int, bytes]]
) -> tuple[dict[int, RequestFigures], list[str]]:
    """Which sample each engine request is: (index, `token_key` of its tokens) per sample.

    By tokens where the log gives them (prompt + output equal to the sample's tokens, the output
    starting at the sample's first generated token), else by order when the counts agree."""
    notes: list[str] = []
    reqs = log.requests
    if not reqs:
        return {}, notes
    by_tokens: dict[bytes, int] = {}
    for i, key in samples:
        by_tokens.setdefault(key, i)
    out: dict[int, RequestFigures] = {}
    if all(r.prompt_ids is not None and r.output_ids is not None for r in reqs):
        for r in reqs:
            i = by_tokens.get(token_key([*(r.prompt_ids or []), *(r.output_ids or [])]))
            if i is not None and i not in out:
                out[i] = r
        missing = len(reqs) - len(out)
        if missing:
            notes.append(
                f"{missing} of {len(reqs)} engine requests match no sample's tokens (prompt + "
                "output): left out of the per-request comparison"
            )
        return out, notes
    if len(reqs) == len(samples):
        notes.append("the log gives no token ids: requests are paired with samples by order")
        return {i: r for (i, _), r in zip(samples, reqs, strict=True)}, notes
    notes.append(
        f"the log gives no token ids and {len(reqs)} requests for {len(samples)} samples: "
        "pooled figures only"
    )
    return {}, notes


def reconcile(
    log: EngineLog,
    report: AcceptReport,
    *,
    configured: int | None = 0,
    pairs: dict[int, RequestFigures] | None = None,
    notes: Sequence[str] = (),
    trained: tuple[Sequence[int], TrainedWiring] | None = None,
    engine_dtype: str = "float32",
    adaptive: str | None = None,
    synthetic: SyntheticSetting | None = None,
) -> Reconciliation:
    """Hold `log` against `report`'s wirings (the replay or live loop of the same requests).

    configured: the index in `report.wirings` of the wiring the draft's config names (None: its
      ids name none of the samples' slots; the shortfall is then measured against the best).
    pairs: sample index -> the engine's request (`pair_requests`); the per-request comparison
      and the pooled figures then cover those samples only.
    trained: (its index in `report.wirings`, the wiring search's answer): the wiring the weights
      were trained on, which the verdict names beside the configured one and the one the engine
      fed (None: the best replay of those tried stands for it).
    engine_dtype: what the engine computed in; in bfloat16 or float16 a figure that equals no
      replay exactly is the nearest wiring's when within `HALF_DRIFT` of it (`near_match`).
    adaptive: why the engine's draft length adapts, where the caller knows (`--adaptive`); the
      log's own start-up lines are read too (`EngineLog.adaptive`). Without a schedule in the log
      the replay at a fixed K is then an upper bound of the figure, not an equal.
    synthetic: the engine's synthetic-acceptance setting, where the caller names one: a figure
      it gives is `Verdict.SYNTHETIC`."""
    pairs = pairs or {}
    notes = list(notes)
    synth = synthetic_check(log, synthetic, report.spec.steps) if synthetic else None
    if synth is not None and synth.matches:
        return synthetic_reconciliation(log, report, pairs, notes, synth)
    if synth is not None:
        notes.append(_not_synthetic(synth))
    if report.sampling is not None:
        return reconcile_sampled(log, report, configured=configured, notes=notes, trained=trained)
    held = _hold(log, report, pairs, notes, configured, trained, adaptive)
    matches = matching_checks(log, held.checks, held.scored, pairs, engine_dtype, notes)
    outcome = _outcome(held, matches)
    serving_config, fix = _fix(held, outcome.verdict)
    said = _close(held, outcome.verdict, outcome.said, notes)
    result = Reconciliation(
        log,
        held.checks,
        outcome.verdict,
        said,
        fix=fix,
        matched=outcome.served,
        best=held.best.label,
        gap=outcome.gap,
        faults=outcome.faults,
        requests_matched=len(pairs),
        notes=notes,
        serving_config=serving_config,
        trained=held.trained,
        configured=held.conf.label if held.conf is not None else None,
        bound=held.bound,
        scheduled=held.scheduled,
        settlement=held.settlement,
    )
    return blamed(result, held.per_request, pairs)  # a gate or a slot, where the figures show one


def _not_synthetic(synth: SyntheticCheck) -> str:
    """Why a figure the synthetic setting does not give is held against the replay after all."""
    return (
        f"the figure is not what {synth.setting.text} gives (expected {synth.expected:.3f} "
        f"+- {synth.tolerance:.3f}): held against the replay as the engine's own"
    )


@dataclass(frozen=True)
class _Held:
    """The engine's figure held against every wiring's replay: built once (`_hold`), read by each
    step that words the verdict, its fix and its notes."""

    log: EngineLog
    report: AcceptReport
    pairs: dict[int, RequestFigures]
    checks: list[WiringCheck]
    scored: list[WiringCheck]  # the checks with a replayed figure
    conf: WiringCheck | None  # the wiring the draft's config names
    best: WiringCheck  # the trained wiring as the evidence names it, else the best replay
    ref: int  # the index in `checks` a shortfall is measured against (configured, else best)
    counts: dict[tuple[int, ...], dict[int, tuple[int, int]]]  # `request_counts` per wiring
    settlement: Settlement | None  # None: no wiring search ran
    trained: TrainedWiring | None  # the wiring search's answer (None: not run)
    bound: str | None  # why the replay is an upper bound (None: held count for count)
    scheduled: int  # paired requests replayed under the engine's own schedule
    per_request: dict[int, SampleReplay]  # the reference wiring's replay per sample
    logged: words.Logged  # the engine and its figure as the verdict quotes them
    label: dict[str, str]  # a check's label -> its short form

    def fed(self, c: WiringCheck) -> words.Fed:
        """A check as the verdict names it: its short label and its replay's accept length."""
        return words.Fed(self.label[c.label], c.stats.accept_length)


@dataclass(frozen=True)
class _Outcome:
    """A verdict and its words, with what the verdict names: the wiring the figure matched, or
    the engine's first shortfall and the fault classes that fit it."""

    verdict: Verdict
    said: words.Greedy
    served: str | None = None
    gap: Gap | None = None
    faults: list[str] = field(default_factory=list)


def _hold(
    log: EngineLog,
    report: AcceptReport,
    pairs: dict[int, RequestFigures],
    notes: list[str],
    configured: int | None,
    trained: tuple[Sequence[int], TrainedWiring] | None,
    adaptive: str | None,
) -> _Held:
    """Replay every wiring as the engine scheduled and counted it, and name the wirings the
    verdict turns on (configured, trained, reference) once, so each later step only reads."""
    wirings, scheduled, refused = under_schedules(report.wirings, pairs, notes)
    bound = bound_reason(log, adaptive, scheduled, refused, report.spec.steps, notes)
    checks = wiring_checks(wirings, pairs, log, bound is not None)
    scored = [c for c in checks if c.stats.accept_length is not None]
    if not scored or log.accept_length is None:
        raise ValueError("nothing to reconcile: no rounds replayed or no figure logged")
    conf = checks[configured] if configured is not None else None
    counts = {c.wiring: request_counts(wa, pairs) for c, wa in zip(checks, wirings, strict=True)}
    settlement = None
    if trained is not None:
        settlement = settled(checks, counts, trained, conf, label_of)
        best = check_of(checks, settlement.wiring) or checks[trained[0][0]]
    else:
        best = reference(checks, scored, trained)
    ref = configured if configured is not None else checks.index(best)
    return _Held(
        log=log,
        report=report,
        pairs=pairs,
        checks=checks,
        scored=scored,
        conf=conf,
        best=best,
        ref=ref,
        counts=counts,
        settlement=settlement,
        trained=trained[1] if trained is not None else None,
        bound=bound,
        scheduled=scheduled,
        per_request={s.index: s for s in wirings[ref].per_sample},
        logged=words.Logged.of(log),
        label={c.label: short_label(c.label) for c in checks},
    )


def _outcome(held: _Held, matches: list[WiringCheck]) -> _Outcome:
    """The verdict the figure earns: a wiring's replay it matches, below every replay (the
    engine's side), or above or between them (not the requests the engine served)."""
    if matches:
        return _matched(held, matches)
    if all(below(held.log, c.stats) for c in held.scored):
        return _engine_fault(held)
    return _other_data(held)


def _matched(held: _Held, matches: list[WiringCheck]) -> _Outcome:
    """The figure is a wiring's replay: the verdict turns on whether that wiring is the trained
    one as the evidence settles it (without a search, the best of those tried)."""
    m = held.best if held.best in matches else matches[0]
    s = held.settlement
    if s is not None and s.wiring is None:
        assert s.undecided is not None  # a settlement names a wiring or says why it cannot
        said = words.Undecided(
            held.logged, held.bound is not None, held.label[m.label], s.undecided
        )
        return _Outcome(Verdict.UNDECIDED, said, m.label)
    if held.trained is not None and s is not None:
        return _against_trained(held, m, s, held.trained)
    if m is held.best:
        return _Outcome(Verdict.AS_IS, _best_of_tried(held, m), m.label)
    return _Outcome(Verdict.WRONG_WIRING, _worse_than_tried(held, m), m.label)


def _against_trained(held: _Held, m: WiringCheck, s: Settlement, t: TrainedWiring) -> _Outcome:
    """The figure is `m`'s replay and the search named the trained wiring: the draft is what it
    is where `m` is that wiring or within noise of it, else the engine feeds the wrong layers."""
    worse = clearly_worse(m, held.best, held.counts)
    if worse:
        conclusion = (
            words.Conclusion.WRONG_CONFIGURED if m is held.conf else words.Conclusion.WRONG_LAYERS
        )
    elif m is held.conf and s.configured_stands:
        conclusion = words.Conclusion.AS_CONFIGURED
    else:
        conclusion = words.Conclusion.AS_IS
    said = words.Matched(
        held.logged,
        held.bound is not None,
        held.label[m.label],
        _trained_words(held, m, s, t, worse),
        conclusion,
    )
    return _Outcome(Verdict.WRONG_WIRING if worse else Verdict.AS_IS, said, m.label)


def _trained_words(
    held: _Held, m: WiringCheck, s: Settlement, t: TrainedWiring, worse: bool
) -> words.Trained | words.CannotTell:
    """The clause that names the trained wiring beside the one fed (with the neighbours the
    samples cannot tell from it), or says these requests cannot tell the fed one from it."""
    label, best = held.label, held.best
    if m is best or worse:
        others = None
        if s.ambiguous:
            others = [label[c.label] for c in held.checks if c.wiring in s.indistinct]
        return words.Trained.of(t, m, best, held.conf, held.fed, others)
    return words.CannotTell(held.fed(best))


def _best_of_tried(held: _Held, m: WiringCheck) -> words.BestOfTried:
    """No search ran and the figure is the best replay of those tried: the draft as it is (and
    the config's wiring, where the engine fed another)."""
    conf = held.conf
    other = held.fed(conf) if conf is not None and m is not conf else None
    return words.BestOfTried(held.logged, held.fed(m), other)


def _worse_than_tried(held: _Held, m: WiringCheck) -> words.WorseOfTried:
    """No search ran and the figure is a replay below the best of those tried: the wrong
    layers."""
    best = held.best
    return words.WorseOfTried(held.logged, held.fed(m), held.fed(best), best is held.conf)


def _engine_fault(held: _Held) -> _Outcome:
    """The figure lies below every replay: the engine accepted less than this draft does on these
    requests; where the requests were paired, its first shortfall and the classes that fit."""
    ref = held.checks[held.ref]
    low = min(held.scored, key=lambda c: c.stats.accept_length or 0.0)
    gap, short = first_gap(held.pairs, held.per_request)
    said = words.BelowEvery(held.logged, held.fed(low), held.fed(ref), gap)
    return _Outcome(Verdict.ENGINE_FAULT, said, gap=gap, faults=fault_classes(short, gap))


def _other_data(held: _Held) -> _Outcome:
    """The figure matches no replay and is not below them all: the samples are not the requests
    the engine served (or, for an adaptive engine, it leaves its draftless rounds uncounted)."""
    replays = tuple(held.fed(c) for c in held.scored)
    said = words.MatchesNone(held.logged, replays, adaptive=held.bound is not None)
    return _Outcome(Verdict.OTHER_DATA, said)


def _fix(held: _Held, verdict: Verdict) -> tuple[dict | None, str | None]:
    """The serving config and fix the verdict earns: none while undecided; the config's ids where
    the engine fed the trained wiring but the config names a clearly worse one; and every
    neighbour named where the evidence cannot tell the trained wiring from them."""
    best, conf, s = held.best, held.conf, held.settlement
    serving_config, fix = serving_fix(verdict, best, conf, held.report, held.label)
    if verdict is Verdict.UNDECIDED:
        serving_config, fix = None, None
    elif (
        held.trained is not None
        and conf is not None
        and conf is not best
        and fix is None
        and clearly_worse(conf, best, held.counts)
    ):
        fix = config_fix(best, conf, held.report, held.label)
    if fix is not None and s is not None and s.ambiguous:
        fix = ambiguous_fix(fix, s, held.checks, held.report, held.label)
    return serving_config, fix


def _close(
    held: _Held, verdict: Verdict, said: words.Greedy, notes: list[str]
) -> words.Greedy | words.Bounded:
    """The notes that qualify any verdict (the witnesses where they bear on it, replays that are
    lower bounds, an adaptive engine's bound) appended to `notes`; the words with the bound."""
    s = held.settlement
    if s is not None and (
        s.wiring is None or s.ambiguous or verdict is Verdict.WRONG_WIRING and s.indistinct
    ):
        # the witnesses bear on the verdict: say what each found (the JSON holds them always)
        notes.extend(evidence_lines(s, held.checks, held.label))
    if any(c.stats.is_bound for c in held.checks):
        notes.append(
            "some replayed requests end in a round drafted past what their samples hold of the "
            "target's continuation: those accept lengths are lower bounds"
        )
    if held.bound is not None:
        adapts = words.Adapts(held.bound, held.report.spec.steps)
        notes.append(str(adapts))
        return words.Bounded(said, adapts)
    return said


def label_of(c: WiringCheck) -> str:
    return short_label(c.label)
