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

from collections.abc import Sequence

from inspector.doctor.reconcile.blame import blamed
from inspector.doctor.reconcile.evidence import (
    ambiguous_fix,
    check_of,
    clearly_worse,
    evidence_lines,
    request_counts,
    settled,
)
from inspector.doctor.reconcile.result import (
    Gap,
    Reconciliation,
    Verdict,
    WiringCheck,
    config_fix,
    fmt_figure,
    logged_text,
    reference,
    serving_fix,
    short_label,
    trained_clause,
)
from inspector.doctor.reconcile.rounds import (
    bound_reason,
    counted,
    pooled,
    request_rounds,
    under_schedules,
    windowed,
)
from inspector.doctor.reconcile.sampled import reconcile_sampled
from inspector.doctor.reconcile.synthetic import (
    SyntheticSetting,
    synthetic_check,
    synthetic_reconciliation,
)
from inspector.doctor.wiring.trained import TrainedWiring
from inspector.engines import engine_words
from inspector.formats.engine_log import EngineLog, RequestFigures
from inspector.metrics.rounds import AcceptStats
from inspector.serving.replay import AcceptReport, SampleReplay

# A mean printed with two decimals is within half a unit of its last digit.
ROUNDING = 0.005 + 1e-9
# SGLang's log lines at its default decode_log_interval (40) pool a window each, weighted by the
# window's last batch size, and the last partial window is never logged: a few hundredths on
# uneven windows. At interval 1 a line is one iteration and its figure is exact to rounding.
WINDOW_TOLERANCE = 0.05

# A half-precision engine's greedy output leaves ours at bf16 near-ties (verifying k + 1 tokens
# in one forward is not bit-equal to one-token decoding), and the pooled figure moves with it.
# Measured on the demo against the float32 replay: SGLang 0.5.23 bf16 chain k = 1, 3, 5 and a
# tree moved 1.0%, 4.0%, 1.9% and 5.2%; so a bf16 log within 8% of one wiring's replay, and at
# least twice as near it as any other, is that wiring's.
HALF_DRIFT = 0.08

# Engine-side fault classes that make an engine accept less than the draft does on the same
# requests, as public reports of collapsed acceptance named them.
ENGINE_FAULTS = (
    (
        "late",
        "the engine ignores the draft's sliding window or attention config, or feeds dummy "
        "tokens past max_model_len (the gap grows with the context position)",
    ),
    (
        "early",
        "the draft's KV cache is read back wrong (prefix cache, attention metadata, a port's "
        "indexing): the engine accepts less from the first rounds on",
    ),
    (
        "batch",
        "batching or CUDA-graph state shared between requests: compare the requests run alone "
        "with a batch",
    ),
)


def pair_requests(
    log: EngineLog, samples: Sequence[tuple[int, list[int], list[int]]]
) -> tuple[dict[int, RequestFigures], list[str]]:
    """Which sample each engine request is: (index, tokens, loss mask) per sample.

    By tokens where the log gives them (prompt + output equal to the sample's tokens, the output
    starting at the sample's first generated token), else by order when the counts agree."""
    notes: list[str] = []
    reqs = log.requests
    if not reqs:
        return {}, notes
    by_tokens: dict[tuple[int, ...], int] = {tuple(ids): i for i, ids, _ in samples}
    out: dict[int, RequestFigures] = {}
    if all(r.prompt_ids is not None and r.output_ids is not None for r in reqs):
        for r in reqs:
            i = by_tokens.get(tuple(r.prompt_ids or []) + tuple(r.output_ids or []))
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
        return {i: r for (i, _, _), r in zip(samples, reqs, strict=True)}, notes
    notes.append(
        f"the log gives no token ids and {len(reqs)} requests for {len(samples)} samples: "
        "pooled figures only"
    )
    return {}, notes


def _equal(log: EngineLog, stats: AcceptStats, bound: bool = False) -> bool:
    """The engine's figure equals the replay's (counts, or within the log's rounding); `bound`:
    the replay at a fixed K is an upper bound of an adaptive engine's, which is consistent with
    it when at most it."""
    if stats.accept_length is None or log.accept_length is None:
        return False
    if bound:
        exact = log.rounds is not None and log.accepted is not None and not log.rounded
        if exact and not stats.is_bound:
            assert log.rounds is not None and log.accepted is not None
            return log.accepted * stats.rounds <= stats.accepted * log.rounds
        windows = windowed(log)
        return log.accept_length <= stats.accept_length + (
            WINDOW_TOLERANCE if windows else ROUNDING
        )
    if log.rounds is not None and log.accepted is not None and not log.rounded:
        if stats.is_bound:
            # the replay's count is a lower bound: equal when the engine's is within its slack
            return log.rounds == stats.rounds and log.accepted >= stats.accepted
        return (log.rounds, log.accepted) == (stats.rounds, stats.accepted)
    windows = windowed(log)
    tol = WINDOW_TOLERANCE if windows else ROUNDING
    if stats.is_bound:
        return log.accept_length >= stats.accept_length - tol
    return abs(log.accept_length - stats.accept_length) <= tol


def _below(log: EngineLog, stats: AcceptStats) -> bool:
    """Below a replay it does not equal (`_equal` holds the tolerance)."""
    assert log.accept_length is not None and stats.accept_length is not None
    return log.accept_length < stats.accept_length


def _first_gap(
    pairs: dict[int, RequestFigures], per_sample: dict[int, SampleReplay]
) -> tuple[Gap | None, list[int]]:
    """The first round (in the engine's request order) where it accepted less than the
    replay, and the start of every such round."""
    first: Gap | None = None
    short: list[int] = []
    order = sorted(pairs.items(), key=lambda kv: kv[1].line)  # the log's own order
    for i, req in order:
        rep = per_sample.get(i)
        logged = req.counted_accepted
        if rep is None or logged is None:
            continue
        ours = request_rounds(rep)
        starts = [int(rep.starts[k]) for k in counted(rep)]
        for k, (e, a) in enumerate(zip(logged, ours, strict=False)):
            if e < a:
                short.append(starts[k])
                if first is None:
                    first = Gap(req.where, i, k, e, a, starts[k])
    return first, short


def _fault_classes(short: list[int], first: Gap | None) -> list[str]:
    """The engine-side classes that fit where the engine fell short (`short`: the starts of
    the rounds it fell short in)."""
    by = dict(ENGINE_FAULTS)
    if not short:
        return [by["early"], by["late"], by["batch"]]
    positions = sorted(short)
    mid = positions[len(positions) // 2]
    out = []
    if first is not None and first.round == 0:
        out.append(by["early"])
    if mid >= 1024 or (first is not None and first.position >= 1024):
        out.append(by["late"])
    out.append(by["batch"])
    if by["early"] not in out:
        out.append(by["early"])
    if by["late"] not in out:
        out.append(by["late"])
    return out


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
        notes.append(
            f"the figure is not what {synth.setting.text} gives (expected {synth.expected:.3f} "
            f"+- {synth.tolerance:.3f}): held against the replay as the engine's own"
        )
    if report.sampling is not None:
        return reconcile_sampled(log, report, configured=configured, notes=notes, trained=trained)
    wirings, scheduled, refused = under_schedules(report.wirings, pairs, notes)
    bound = bound_reason(log, adaptive, scheduled, refused, report.spec.steps, notes)
    checks: list[WiringCheck] = []
    for wa in wirings:
        stats = pooled(wa, pairs, log)
        eq = None
        if pairs:
            eq = sum(1 for s in wa.per_sample if s.index in pairs and _same(pairs[s.index], s))
        checks.append(
            WiringCheck(wa.label, wa.wiring.slots, stats, _equal(log, stats, bound is not None), eq)
        )
    engine_name = engine_words(log.engine)
    figure = logged_text(log)
    scored = [c for c in checks if c.stats.accept_length is not None]
    if not scored or log.accept_length is None:
        raise ValueError("nothing to reconcile: no rounds replayed or no figure logged")
    exactly = "exactly what" if bound is None else "at most what"
    conf = checks[configured] if configured is not None else None
    counts = {c.wiring: request_counts(wa, pairs) for c, wa in zip(checks, wirings, strict=True)}
    settlement = None
    if trained is not None:
        settlement = settled(checks, counts, trained, conf, label_of)
        best = check_of(checks, settlement.wiring) or checks[trained[0][0]]
    else:
        best = reference(checks, scored, trained)
    ref = configured if configured is not None else checks.index(best)
    per_request = {s.index: s for s in wirings[ref].per_sample}
    # a per-request match decides between wirings a pooled figure cannot tell apart
    matches = [c for c in checks if c.equal]
    if pairs and any(c.requests_equal for c in checks):
        full = [c for c in checks if c.requests_equal == len(pairs)]
        matches = full or matches
    if not matches and engine_dtype in ("bfloat16", "float16"):
        near = near_match(log, scored)
        if near is not None:
            matches = [near]
            notes.append(
                f"the engine ran in {engine_dtype}: its figure equals no replay exactly, and "
                f"lies within {HALF_DRIFT:.0%} of {label_of(near)}'s (at least twice as near it as "
                "any other), the drift of half-precision near-ties"
            )
    label = {c.label: short_label(c.label) for c in checks}
    served = None
    gap = None
    faults: list[str] = []
    if matches:
        m = best if best in matches else matches[0]
        served = m.label
        if settlement is not None and settlement.wiring is None:
            verdict = Verdict.UNDECIDED
            summary = (
                f"{engine_name} logged {figure}, {exactly} this draft gives fed "
                f"{label[m.label]}; which wiring the weights were trained on is undecided: "
                f"{settlement.undecided}"
            )
        elif trained is not None and settlement is not None:
            worse = clearly_worse(m, best, counts)
            verdict = Verdict.WRONG_WIRING if worse else Verdict.AS_IS
            if worse:
                conclusion = ": your engine feeds the wrong layers" + (
                    ", the ones its config names" if m is conf else ""
                )
            elif m is conf and settlement.configured_stands:
                conclusion = (
                    ": served as configured, and the draft is what it is. More draft steps, a "
                    "tree (SGLang's topk > 1) or training data closer to the served traffic "
                    "raise it"
                )
            else:
                conclusion = (
                    ": the draft is what it is. More draft steps, a tree (SGLang's topk > 1) or "
                    "training data closer to the served traffic raise it"
                )
            if m is best or worse:
                clause = trained_clause(trained[1], m, best, conf, label)
                if settlement.ambiguous:
                    others = [c.label for c in checks if c.wiring in settlement.indistinct]
                    clause += (
                        f" (or {', '.join(label[o] for o in others)}: these samples cannot tell "
                        "them apart)"
                    )
            else:
                clause = (
                    f", which these requests cannot tell from {label[best.label]} "
                    f"({fmt_figure(best.stats.accept_length)}), the wiring the evidence names"
                )
            summary = (
                f"{engine_name} logged {figure}, {exactly} this draft gives fed "
                f"{label[m.label]}" + clause + conclusion
            )
        elif m is best:
            verdict = Verdict.AS_IS
            summary = (
                f"{engine_name} logged {figure}; this draft gives {fmt_figure(m.stats.accept_length)} "
                f"when fed {label[m.label]}, the wiring it fits best of those tried: the draft "
                "is what it is. More draft steps, a tree (SGLang's topk > 1) or training data "
                "closer to the served traffic raise it"
            )
            if conf is not None and m is not conf:
                summary += (
                    f"; note the draft's config names {label[conf.label]} "
                    f"({fmt_figure(conf.stats.accept_length)}), which this engine does not feed"
                )
        else:
            verdict = Verdict.WRONG_WIRING
            summary = (
                f"{engine_name} logged {figure}; this draft gives "
                f"{fmt_figure(m.stats.accept_length)} when fed {label[m.label]} and "
                f"{fmt_figure(best.stats.accept_length)} when fed {label[best.label]}"
                + (", what its config names" if best is conf else "")
                + ": your engine feeds the wrong layers"
            )
    elif all(_below(log, c.stats) for c in scored):
        verdict = Verdict.ENGINE_FAULT
        low = min(scored, key=lambda c: c.stats.accept_length or 0.0)
        summary = (
            f"{engine_name} logged {figure}, below every wiring's replay of these requests "
            f"(lowest {fmt_figure(low.stats.accept_length)} fed {label[low.label]}, "
            f"{fmt_figure(checks[ref].stats.accept_length)} fed {label[checks[ref].label]}): an "
            "engine-side fault"
        )
        gap, short = _first_gap(pairs, per_request)
        if gap is not None:
            summary += (
                f"; the first shortfall is request {gap.request} (sample {gap.sample}), round "
                f"{gap.round} at position {gap.position}: the engine accepted {gap.engine} where "
                f"this draft accepts {gap.replay}"
            )
        faults = _fault_classes(short, gap)
    else:
        verdict = Verdict.OTHER_DATA
        summary = (
            f"{engine_name} logged {figure}, which matches no wiring's replay ("
            + ", ".join(f"{fmt_figure(c.stats.accept_length)} fed {label[c.label]}" for c in scored)
            + "): the samples are not the requests the engine served (other prompts, sampling "
            "or max tokens), or the engine drafts otherwise than --steps/--topk say"
        )
        if bound is not None:
            # rounds without a draft are no draft to vLLM or llama.cpp (scheduler.py,
            # common/speculative.cpp): counted over the rounds it drafted in, an engine
            # that skips the unsure ones can log more than a fixed-K replay
            summary += (
                "; or, above every replay, an adaptive engine that leaves its rounds without a "
                "draft out of its counts (llama.cpp's p-min): only its per-step drafted counts "
                "(vLLM's per_step_drafted) hold that figure"
            )
    serving_config, fix = serving_fix(verdict, best, conf, report, label)
    if verdict is Verdict.UNDECIDED:
        serving_config, fix = None, None
    elif (
        trained is not None
        and conf is not None
        and conf is not best
        and fix is None
        and clearly_worse(conf, best, counts)
    ):
        fix = config_fix(best, conf, report, label)
    if fix is not None and settlement is not None and settlement.ambiguous:
        fix = ambiguous_fix(fix, settlement, checks, report, label)
    if settlement is not None and (
        settlement.wiring is None
        or settlement.ambiguous
        or verdict is Verdict.WRONG_WIRING
        and settlement.indistinct
    ):
        # the witnesses bear on the verdict: say what each found (the JSON holds them always)
        notes.extend(evidence_lines(settlement, checks, label))
    if any(c.stats.is_bound for c in checks):
        notes.append(
            "some replayed requests end in a round drafted past what their samples hold of the "
            "target's continuation: those accept lengths are lower bounds"
        )
    if bound is not None:
        sentence = (
            f"The engine's draft length adapts ({bound}): the replay drafts "
            f"{report.spec.steps} tokens every round, an upper bound of what the engine drafts "
            "and accepts, so its figure is held to be at most a wiring's replay, not equal to it"
        )
        summary += ". " + sentence
        notes.append(sentence)
    result = Reconciliation(
        log,
        checks,
        verdict,
        summary,
        fix,
        served,
        best.label,
        gap,
        faults,
        len(pairs),
        notes,
        serving_config,
        trained=trained[1] if trained is not None else None,
        configured=conf.label if conf is not None else None,
        bound=bound,
        scheduled=scheduled,
        settlement=settlement,
    )
    return blamed(result, per_request, pairs)  # a gate or a slot, where the figures show one


def near_match(log: EngineLog, scored: Sequence[WiringCheck]) -> WiringCheck | None:
    """The one wiring a half-precision engine's figure is within `HALF_DRIFT` of, and at least
    twice as near as any other; None when none is, or the figure lies between two."""
    x = log.accept_length
    if x is None:
        return None
    by = sorted(scored, key=lambda c: abs((c.stats.accept_length or 0.0) - x))
    first = by[0]
    y = first.stats.accept_length or 0.0
    if abs(x - y) > HALF_DRIFT * y:
        return None
    for other in by[1:]:
        z = other.stats.accept_length or 0.0
        if 2 * abs(x - y) > abs(x - z):
            return None
    return first


def label_of(c: WiringCheck) -> str:
    return short_label(c.label)


def _same(req: RequestFigures, s: SampleReplay) -> bool:
    """The engine's request counts what the replay's does: every round (vLLM's
    per_step_accepted), else its rounds and accepted drafts (SGLang's spec_verify_ct and
    spec_num_correct_drafts); False where the request gives neither."""
    ours = request_rounds(s)
    if req.counted_accepted is not None:
        return req.counted_accepted == ours
    if req.rounds is not None and req.accepted is not None and not req.per_request_figure:
        return (req.rounds, req.accepted) == (len(ours), sum(ours))
    return False
