"""What `reconcile` holds against the engine's counts: the replay's rounds as the engine counts
them (every round but SGLang's after the stop and those that drafted nothing), pooled as the log
pools them, and each paired request walked under the engine's own schedule of drafted tokens
where the log gives one (`SampleReplay.rescheduled`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from inspector.engines import engine
from inspector.formats.engine_log import EngineLog, RequestFigures
from inspector.metrics.rounds import AcceptStats
from inspector.serving.replay import SampleReplay, WiringAccept


def counted(r: SampleReplay) -> list[int]:
    """Which rounds the engine reports per request: every round but SGLang's after the stop and
    those that drafted nothing (no draft)."""
    drafted = r.drafted_per_round()
    return [k for k, x in enumerate(r.after_stop) if not x and drafted[k] != 0]


def request_rounds(r: SampleReplay) -> list[int]:
    """The counts an engine reports per request (`counted`)."""
    return [int(r.accepted[k]) for k in counted(r)]


def windowed(log: EngineLog) -> bool:
    """Whether the log's accept length is one window of decode batches (SGLang's `accept len`
    line), not a figure pooled over the run."""
    return engine(log.engine).windowed_log and log.source == "log" and log.decode_log_interval != 1


def pooled(wa: WiringAccept, pairs: dict[int, RequestFigures], log: EngineLog) -> AcceptStats:
    """The replay's counts as the log counts them: SGLang's per-request figures leave the round
    after the stop out, and without a count of correct drafts they are completion tokens per
    verify round (written as accepted = completion - rounds)."""
    total = AcceptStats(wa.depth)
    # its per-request figures leave the overlap round after the stop out
    per_request = engine(log.engine).overlap_round and log.source == "requests"
    for s in wa.per_sample:
        if pairs and s.index not in pairs:
            continue
        if not per_request:
            total.add(s.stats)
            continue
        rounds = [r for r in s.rounds if not r.after_stop]
        st = AcceptStats.of(rounds, wa.depth)
        if log.figure == "spec_accept_length":
            st.accepted = s.completion_tokens - st.rounds
            st.bounded = 0  # the tokens the request received: exact
        total.add(st)
    return total


def under_schedules(
    wirings: Sequence[WiringAccept], pairs: dict[int, RequestFigures], notes: list[str]
) -> tuple[list[WiringAccept], int, int]:
    """Each wiring's replay with every paired request that gives its rounds' drafted counts
    walked under that schedule (`SampleReplay.rescheduled`); how many requests were, and how
    many gave one that could not be walked (a live loop's own rounds)."""
    out: list[WiringAccept] = []
    done: set[int] = set()
    refused: set[int] = set()
    for wa in wirings:
        per: list[SampleReplay] = []
        for s in wa.per_sample:
            req = pairs.get(s.index)
            if req is not None and req.per_step_drafted is not None:
                try:
                    s = s.rescheduled(req.per_step_drafted)
                    done.add(s.index)
                except ValueError as e:
                    refused.add(s.index)
                    why = str(e)
            per.append(s)
        out.append(replace(wa, per_sample=per))
    if refused:
        notes.append(
            f"{len(refused)} requests give their rounds' drafted counts, but {why}: held at a "
            "fixed K"
        )
    return out, len(done - refused), len(refused)


def bound_reason(
    log: EngineLog, adaptive: str | None, scheduled: int, refused: int, steps: int, notes: list[str]
) -> str | None:
    """Why the replay at a fixed K is only an upper bound of the figure (None: it is held count
    for count): the engine's draft length adapts and the replay cannot draft its schedule (no
    request paired with a sample, or one whose rounds cannot be walked again)."""
    reason = adaptive or log.adaptive
    if log.schedules and scheduled and not refused:
        if reason is not None:
            notes.append(
                f"the engine's draft length adapts ({reason}), but its log gives each round's "
                "drafted count: every request is replayed under its own schedule, count for count"
            )
        return None
    if (
        reason is None
        and log.schedules
        and any(d != steps for r in log.requests for d in r.per_step_drafted or [])
    ):
        reason = (
            "its requests' per_step_drafted show rounds drafting other than "
            f"{steps} tokens, and not every request could be replayed under its own"
        )
    return reason
