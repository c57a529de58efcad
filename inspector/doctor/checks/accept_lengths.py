"""The accept length the wiring finding quotes: what an engine logs serving a wiring, a chain of
ACCEPT_STEPS drafts over the doctor's first samples up to ACCEPT_TOKENS tokens.

Greedy, it is the replay's count (`serving.replay`). At a temperature (`doctor --temperature`
with `--target`) it is the expectation under the engine's verification rule: every replayed
round's drafts verified by the target in one batched forward (`serving.expected_replay`), the
rounds' expected accepted counts pooled (`serving.expectation`): the figure the engine logs, in
expectation over its sampling, from these round starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inspector.doctor.budget import ACCEPT_STEPS, ACCEPT_TOKENS
from inspector.doctor.wiring.named import ENGINE_DEFAULT
from inspector.errors import InputError
from inspector.metrics.rounds import AcceptStats
from inspector.serving.expectation import Expectation, SampleOdds

if TYPE_CHECKING:
    from inspector.capture.transformers_target import TargetModel
    from inspector.doctor.context import DoctorContext, Searched
    from inspector.serving.replay import SampleReplay
    from inspector.serving.spec import DraftSpec
    from inspector.wiring import Wiring


@dataclass(frozen=True)
class AcceptLengths:
    """The accept length per wiring (`by_wiring`), the recommended wiring's replayed stats, the
    samples replayed, the wirings whose figure is a lower bound, and what the figures are
    (`settings`: 'greedy', replayed, or the sampling they are expected at)."""

    by_wiring: dict[tuple[int, ...], float] = field(default_factory=dict)
    rec_stats: AcceptStats | None = None
    samples: tuple[int, ...] = ()
    bounded: frozenset[tuple[int, ...]] = frozenset()
    settings: str = "greedy"


def accept_lengths(ctx: DoctorContext, run: Searched, rec: tuple[int, ...]) -> AcceptLengths:
    """The accept length an engine logs (a chain of ACCEPT_STEPS drafts over the doctor's
    samples: replayed greedy, or at the context's sampling the expectation under its rule, from
    the target `diagnose` loaded) for the recommended wiring and the ones engines feed (serve, the engine
    default, the configured one). Not quoted when the samples are read one position off or the
    config needed a correction: the engine would run neither. The first samples up to
    ACCEPT_TOKENS tokens are replayed (their indices in the wiring finding's evidence)."""
    if run.shift or run.corrected:
        return AcceptLengths()
    from inspector.serving.replay import Replayer
    from inspector.serving.spec import DraftSpec
    from inspector.wiring import Wiring

    ev, allowed = ctx.ev, ctx.plan.accept_samples
    # A token budget, not every sample: each replayed wiring costs ACCEPT_STEPS draft forwards
    # over its rows (on a 4096-wide draft, 8 x 2K-token samples took minutes per wiring).
    used, budget = [], ACCEPT_TOKENS
    for i in ctx.samples:
        if allowed is not None and i not in allowed:
            continue  # over the doctor's compute budget (budget.plan)
        if used and budget <= 0:
            break
        used.append(i)
        budget -= ev.samples[i].length
    if not used:
        return AcceptLengths()
    named = ctx.names.named
    wanted = [rec] + [
        named[n] for n in ("serve", ENGINE_DEFAULT, "configured") if n in named and named[n] != rec
    ]
    wanted += ctx.names.engine_fed  # what each engine release feeds (`engine_reading`)
    spec = DraftSpec(ACCEPT_STEPS)
    replayer = Replayer(ev, spec)
    target = _expectation_target(ctx)
    out: dict[tuple[int, ...], float] = {}
    bounded: set[tuple[int, ...]] = set()
    rec_stats = None
    for w in dict.fromkeys(wanted):
        total = AcceptStats(ACCEPT_STEPS)
        odds, accepted = [], []
        for i in used:
            try:
                rep = replayer.replay(i, Wiring(w), keep=False)
            except InputError:
                continue  # a sample the search could not use either
            total.add(rep.stats)
            if target is not None:
                odds.append(_odds(ctx, target, rep, Wiring(w), spec))
                accepted.append(rep.accepted)
        al = total.accept_length
        if target is not None:
            al = Expectation.of(odds, accepted, ACCEPT_STEPS).accept_length if odds else None
        if al is not None:
            out[w] = round(al, 4)
            if total.is_bound:
                bounded.add(w)
        if w == rec:
            rec_stats = total
    settings = "greedy" if ctx.sampling is None else f"{ctx.sampling.label()}, expected"
    return AcceptLengths(out, rec_stats, tuple(used), frozenset(bounded), settings)


def _expectation_target(ctx: DoctorContext) -> TargetModel | None:
    """The target model that verifies the drafts at the context's temperature (None: greedy):
    the one `diagnose` loaded for it (and for the slots' identity)."""
    if ctx.sampling is None:
        return None
    assert ctx.target_model is not None  # `diagnose` loads it with any sampling
    return ctx.target_model


def _odds(
    ctx: DoctorContext, target: TargetModel, rep: SampleReplay, wiring: Wiring, spec: DraftSpec
) -> SampleOdds:
    from inspector.serving.expected_replay import sample_odds

    assert ctx.sampling is not None
    s = ctx.sampling
    return sample_odds(ctx.ev, target, rep, wiring, spec, s.sampling, s.verification)
