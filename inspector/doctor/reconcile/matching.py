"""When an engine's figure is a wiring's replay: equal by counts where the log gives them, within
the log's rounding (or SGLang's windows) where it gives a mean only, request by request where it
gives each request's rounds, and near where a half-precision engine drifts off every replay.

`reconcile` (`pipeline.py`) asks these rules once per wiring (`wiring_checks`) and once for the
wirings its figure matches (`matching_checks`), then words a verdict over the answer."""

from __future__ import annotations

from collections.abc import Sequence

from inspector.doctor.reconcile.replay_counts import pooled, request_rounds, windowed
from inspector.doctor.reconcile.result import WiringCheck, short_label
from inspector.formats.engine_log import EngineLog, RequestFigures
from inspector.metrics.rounds import AcceptStats
from inspector.serving.replay import SampleReplay, WiringAccept

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

HALF_PRECISION = ("bfloat16", "float16")


def figure_equals(log: EngineLog, stats: AcceptStats, bound: bool = False) -> bool:
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


def below(log: EngineLog, stats: AcceptStats) -> bool:
    """Below a replay it does not equal (`figure_equals` holds the tolerance)."""
    assert log.accept_length is not None and stats.accept_length is not None
    return log.accept_length < stats.accept_length


def same_request(req: RequestFigures, s: SampleReplay) -> bool:
    """The engine's request counts what the replay's does: every round (vLLM's
    per_step_accepted), else its rounds and accepted drafts (SGLang's spec_verify_ct and
    spec_num_correct_drafts); False where the request gives neither."""
    ours = request_rounds(s)
    if req.counted_accepted is not None:
        return req.counted_accepted == ours
    if req.rounds is not None and req.accepted is not None and not req.per_request_figure:
        return (req.rounds, req.accepted) == (len(ours), sum(ours))
    return False


def wiring_checks(
    wirings: Sequence[WiringAccept],
    pairs: dict[int, RequestFigures],
    log: EngineLog,
    bound: bool,
) -> list[WiringCheck]:
    """Each wiring's replay pooled as the engine pools it, whether the figure equals it, and (where
    requests were paired) how many requests equal it round for round: what every verdict reads."""
    checks: list[WiringCheck] = []
    for wa in wirings:
        stats = pooled(wa, pairs, log)
        eq = None
        if pairs:
            eq = sum(
                1 for s in wa.per_sample if s.index in pairs and same_request(pairs[s.index], s)
            )
        checks.append(
            WiringCheck(wa.label, wa.wiring.slots, stats, figure_equals(log, stats, bound), eq)
        )
    return checks


def matching_checks(
    log: EngineLog,
    checks: list[WiringCheck],
    scored: list[WiringCheck],
    pairs: dict[int, RequestFigures],
    engine_dtype: str,
    notes: list[str],
) -> list[WiringCheck]:
    """The wirings the engine's figure is: a per-request match decides between wirings a pooled
    figure cannot tell apart, and a half-precision engine that equals none is the one it drifted
    from (`near_match`, said in `notes`)."""
    matches = [c for c in checks if c.equal]
    if pairs and any(c.requests_equal for c in checks):
        full = [c for c in checks if c.requests_equal == len(pairs)]
        matches = full or matches
    if not matches and engine_dtype in HALF_PRECISION:
        near = near_match(log, scored)
        if near is not None:
            matches = [near]
            notes.append(
                f"the engine ran in {engine_dtype}: its figure equals no replay exactly, and "
                f"lies within {HALF_DRIFT:.0%} of {short_label(near.label)}'s (at least twice as "
                "near it as any other), the drift of half-precision near-ties"
            )
    return matches


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
