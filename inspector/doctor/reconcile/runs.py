"""Several runs of one draft, each an engine log, held against the replay of the requests each
served (`reconcile --engine-log A --engine-log B ...`): where one run's accept length departs from
the replay while another run of the same draft equals it, the departing run's backend or build is
at fault, not the draft. llama.cpp issue #26750 (2026-08-08): one build's MTP acceptance was 35.8%
on CUDA against 92.2% on Vulkan, and 84.0% fell to 51.3% between two CUDA builds; ROCmFPX issue
#23 (2026-09-06): 0.1% on Vulkan against 60% on ROCm. The same weights, the same requests: only
the backend or the build differs.

Each run is reconciled on its own first (`reconcile`); then every run's accept length is held
against the replay of its own requests under one wiring, the one most runs equal (ties: one a run
equals count for count, then the higher replay). Accept lengths are compared, never a rate (the
rate (AL - 1) / (K - 1) falls as K rises), with `blame`'s drift model: within DRIFT (8%) is equal;
below by more than DRIFT and short by at least MIN_SHORT accepted tokens over the replay's rounds
departs. A departing run is blamed only where its own verdict left the shortfall unexplained (an
engine-side fault or other data, no gate or slot found) and, for other data, no other wiring's
replay lies within DRIFT of it (then it may be that wiring fed, in other numerics). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from inspector.doctor.reconcile import words
from inspector.doctor.reconcile.blame import DRIFT, MIN_SHORT, OPEN, paired_words
from inspector.doctor.reconcile.result import Blame, Reconciliation, Verdict, short_label
from inspector.doctor.reconcile.run_check import RunCheck
from inspector.engines import engine, engine_words
from inspector.formats.engine_figures import EngineLog

BACKEND_CLASS = (
    "the backend or build serving this run computes the draft or the verification otherwise than "
    "the run that matches the replay (a backend's kernel, a regression between builds): serve the "
    "same requests on the backend or build that matches, bisect the builds between the two, and "
    "report both runs' accept lengths upstream"
)


# the verdicts a run's own reconciliation leaves unexplained: below the replay, or matching none


@dataclass(frozen=True)
class RunsComparison:
    """Every run against the replay of its requests under `wiring`; `departing`: the runs blamed."""

    wiring: str
    checks: tuple[RunCheck, ...]
    departing: tuple[str, ...]

    def to_dict(self) -> dict:
        return {
            "wiring": self.wiring,
            "runs": [c.to_dict() for c in self.checks],
            "departing": list(self.departing),
        }


def run_labels(logs: Sequence[EngineLog]) -> list[str]:
    """Each run's name: the backend and build its start-up lines state ("llama.cpp b7000
    (abc1234) on CUDA", "vLLM 0.32.0 on cpu"), else the engine and the file; the file is added
    where two runs would read the same."""
    base = [
        log.start.label
        if log.start is not None
        else f"{engine_words(log.engine)} ({log.path.name})"
        for log in logs
    ]
    out = []
    for log, label in zip(logs, base, strict=True):
        if base.count(label) > 1 and log.start is not None:
            label = f"{label} ({log.path.name})"
        out.append(label)
    return out


def _check(res: Reconciliation, run: str, wiring: str) -> RunCheck | None:
    c = next((c for c in res.checks if c.label == wiring), None)
    al_e = res.log.accept_length
    if c is None or al_e is None or c.stats.accept_length is None or not c.stats.rounds:
        return None
    al_r = c.stats.accept_length
    rounds = c.stats.rounds
    short = (al_r - al_e) * rounds
    return RunCheck(
        run,
        str(res.log.path),
        res.verdict.value,
        al_e,
        al_r,
        rounds,
        short,
        al_e < al_r * (1 - DRIFT) and short >= MIN_SHORT,
        abs(al_e - al_r) <= DRIFT * al_r,
    )


def _near_another(res: Reconciliation, wiring: str) -> bool:
    """The run's figure is within DRIFT of another wiring's replay (that wiring fed, in other
    numerics, is as good an account of it as a backend's fault)."""
    x = res.log.accept_length
    return x is not None and any(
        c.label != wiring
        and c.stats.accept_length is not None
        and abs(x - c.stats.accept_length) <= DRIFT * c.stats.accept_length
        for c in res.checks
    )


def _blameable(res: Reconciliation, wiring: str) -> bool:
    if res.verdict not in OPEN:
        return False
    return res.verdict is Verdict.ENGINE_FAULT or not _near_another(res, wiring)


def across_runs(
    results: Sequence[Reconciliation], labels: Sequence[str]
) -> tuple[list[Reconciliation], RunsComparison | None]:
    """`results` (one per run, in the order given) with each departing run's backend or build
    named (`Verdict.ENGINE_BACKEND`), and the comparison (None: fewer than two runs, or no
    wiring both equalled by one run and departed from by another)."""
    out = list(results)
    if len(results) < 2:
        return out, None
    wirings = [c.label for c in results[0].checks]
    best: tuple | None = None
    for w in wirings:
        checks = [_check(r, lab, w) for r, lab in zip(results, labels, strict=True)]
        if any(c is None for c in checks):
            continue
        equal = [i for i, c in enumerate(checks) if c is not None and c.equal]
        gone = [
            i
            for i, c in enumerate(checks)
            if c is not None and c.departs and _blameable(results[i], w)
        ]
        if not equal or not gone:
            continue
        exact = any(results[i].matched == w for i in equal)
        replay = max(c.replay_accept_length for c in checks if c is not None)
        key = (len(equal), exact, replay)
        if best is None or key > best[0]:
            best = (key, w, checks, equal, gone)
    if best is None:
        return out, None
    _, w, checks, equal, gone = best
    ok = [c for c in checks if c is not None]
    for i in gone:
        out[i] = _blamed(results[i], ok[i], [ok[j] for j in equal], w, ok)
    for j in equal:
        out[j] = replace(
            results[j],
            notes=[
                *results[j].notes,
                "another run of this draft departs from the replay this run equals: "
                + "; ".join(
                    f"{ok[i].run} ({Path(ok[i].path).name}) logged "
                    f"{words.fmt_figure(ok[i].engine_accept_length)}"
                    for i in gone
                ),
            ],
        )
    comparison = RunsComparison(w, tuple(ok), tuple(ok[i].run for i in gone))
    return out, comparison


def _blamed(
    res: Reconciliation, bad: RunCheck, good: list[RunCheck], wiring: str, every: list[RunCheck]
) -> Reconciliation:
    log = res.log
    name = engine_words(log.engine)
    said = words.BackendWords(bad, tuple(good), short_label(wiring))
    facts = engine(log.engine).facts_for(None, None, topic="backend")
    faults = [BACKEND_CLASS, *(f"{name} {f.since}: {f.words}" for f in facts)]
    blame = Blame(
        "backend",
        said,
        paired_words(res),
        run=bad.run,
        runs=tuple(every),
        wiring=wiring,
    )
    return replace(
        res,
        verdict=Verdict.ENGINE_BACKEND,
        said=words.Blamed(words.Logged.of(log), said),
        faults=faults,
        blame=blame,
        notes=[*res.notes, f"this run alone: {res.summary}"],
    )
