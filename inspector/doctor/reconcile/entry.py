"""`reconcile`'s one run, what `eagle-inspect reconcile` (`commands/reconcile.py`: parse, run,
print) calls for an EAGLE-3 draft:

    outcome = run_reconcile_request(ReconcileRequest((log,), samples=...), load, hooks=...)

1. the engine logs are read, each must count rounds; several runs are one engine's
   (`request.same_engine`), with one draft length (--steps, else the logs', else the default);
2. the replay of the samples (`replays.replay_samples`), or with prompts the live loop over the
   engine's requests (`replays.live_requests`), under every candidate wiring;
3. per log: its requests paired with the samples, the overlap round dropped where the engine ran
   without its overlap scheduler, `pipeline.reconcile`, `hidden_state_blame`;
4. the runs against each other (`runs.across_runs`), and the notes of each run's verdict.

Every note goes to `hooks.note` in the order the command has always printed them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inspector.doctor.reconcile.replays import Replayed, live_requests, replay_samples
from inspector.doctor.reconcile.request import (
    ReconcileHooks,
    ReconcileLoad,
    ReconcileRequest,
    chains_only,
    check_steps,
    engine_flags,
    overlap_ran,
    same_engine,
    synthetic_setting,
)
from inspector.errors import InputError, setting_field
from inspector.formatting import fmt_float

if TYPE_CHECKING:
    from inspector.doctor.reconcile.result import Reconciliation
    from inspector.doctor.reconcile.runs import RunsComparison
    from inspector.doctor.reconcile.synthetic import SyntheticSetting
    from inspector.engines import Engine
    from inspector.formats.engine_log import EngineLog
    from inspector.serving.replay import AcceptReport
    from inspector.serving.spec import DraftSpec


@dataclass(frozen=True)
class ReconcileOutcome:
    """One reconcile: per run (log), its label, its verdict (`Reconciliation`) and the report it
    was held against (the overlap rounds dropped where the engine ran without them); the runs
    against each other (None: one run, or none departs); the draft settings and the engine."""

    spec: DraftSpec
    engine: Engine
    labels: tuple[str, ...]
    results: tuple[Reconciliation, ...]
    reports: tuple[AcceptReport, ...]
    comparison: RunsComparison | None

    @property
    def many(self) -> bool:
        """More than one run (log)."""
        return len(self.results) > 1

    def config(self) -> dict:
        """The draft settings replayed and the engine."""
        return {**self.spec.to_dict(), "engine": self.engine.value}

    def to_dict(self) -> dict:
        """The JSON document: one run's verdict under its config, or every run's and the runs
        compared."""
        config = self.config()
        overlap = self.engine.overlap_round
        if not self.many:
            if overlap:
                config["overlap_scheduler"] = self.reports[0].overlap
            return {"config": config, **self.results[0].to_dict()}
        runs = []
        for label, result, rep in zip(self.labels, self.results, self.reports, strict=True):
            extra = {"overlap_scheduler": rep.overlap} if overlap else {}
            runs.append({"run": label, **extra, **result.to_dict()})
        comparison = self.comparison
        return {
            "config": config,
            "runs": runs,
            "across_runs": comparison.to_dict() if comparison is not None else None,
        }


def _read_logs(request: ReconcileRequest) -> list[EngineLog]:
    from inspector.formats.engine_log import read_engine_log

    interval = request.decode_log_interval
    logs = [read_engine_log(p, decode_log_interval=interval) for p in request.engine_logs]
    for log in logs:
        if log.accept_length is None:
            raise InputError(log.path, None, "holds no accept length (no rounds counted)")
    return logs


def _settings(
    request: ReconcileRequest, logs: Sequence[EngineLog]
) -> tuple[DraftSpec, Engine, SyntheticSetting | None]:
    """The draft settings the replay runs (the logs' draft length unless --steps), checked against
    every log, the engine whose rounds they count, and its synthetic acceptance (None: none)."""
    from inspector.engines import Engine
    from inspector.serving.spec import DEFAULT_STEPS, DraftSpec

    steps = request.steps or next(
        (x for lg in logs for x in (lg.steps, lg.most_drafted) if x is not None), DEFAULT_STEPS
    )
    for lg in logs:
        check_steps(lg, request.steps, steps)
    synthetic = synthetic_setting(request)
    spec = DraftSpec(steps, request.topk, request.draft_tokens)
    engine = Engine(logs[0].engine)
    chains_only(spec, engine)
    return spec, engine, synthetic


def _held(
    request: ReconcileRequest,
    log: EngineLog,
    replayed: Replayed,
    engine: Engine,
    synthetic: SyntheticSetting | None,
) -> tuple[Reconciliation, AcceptReport]:
    """One log against the replay of its requests: (its verdict, the report it was held
    against, without the overlap rounds where the engine ran without its overlap scheduler)."""
    from inspector.doctor.reconcile.hidden_state import hidden_state_blame
    from inspector.doctor.reconcile.pipeline import pair_requests, reconcile

    pairs, notes = pair_requests(log, replayed.samples)
    report = replayed.report
    if engine.overlap_round and not overlap_ran(request.overlap, log):
        report = report.without_overlap_rounds()
        notes.append(
            f"{engine.display} without its overlap scheduler"
            + (
                f" (its decode lines show a CPU, where {engine.display} forces it off)"
                if log.device
                else ""
            )
            + ": the round it would run after each request's stop is not counted"
        )
    if replayed.configured is None:
        notes.append(
            "the draft's config names no wiring of these slots (no aux ids, or ids the "
            "samples do not hold): the wirings tried are the presets and --wiring"
        )
    result = reconcile(
        log,
        report,
        configured=replayed.configured,
        pairs=pairs,
        notes=notes,
        trained=replayed.trained,
        engine_dtype=request.engine_dtype,
        adaptive="--adaptive" if request.adaptive else None,
        synthetic=synthetic,
    )
    # on a hyper-connection target, its hidden state where the figure shows it
    return hidden_state_blame(result, replayed.hyper_connections), report


def run_reconcile_request(
    request: ReconcileRequest,
    load: ReconcileLoad,
    *,
    hooks: ReconcileHooks | None = None,
) -> ReconcileOutcome:
    """Every engine log of `request` held against the replay (or live loop) of the same requests
    under each wiring an engine may feed; `load` gives the inputs where they are needed."""
    from inspector.doctor.reconcile.runs import across_runs, run_labels

    hooks = hooks or ReconcileHooks()
    logs = _read_logs(request)
    same_engine(logs, request.prompts)
    spec, engine, synthetic = _settings(request, logs)
    for lg in logs:
        hooks.note(
            f"{lg.description} from {lg.path}: accept length {fmt_float(lg.accept_length)}; "
            "replaying " + engine_flags(spec, engine)
        )
    if request.prompts:
        replayed = live_requests(request, load, spec, engine, logs[0], hooks)
    elif request.temperature > 0:
        raise InputError(
            None,
            setting_field("temperature"),
            "at a temperature the rounds are random: reconcile runs the live loop for each "
            "round's odds (--prompts INPUT --target T, the engine's requests)",
        )
    else:
        replayed = replay_samples(request, load, spec, engine, hooks)
    report = replayed.report
    if not any(w.stats.rounds for w in report.wirings):
        raise InputError(
            None, "SAMPLES", "no round to replay: no sample holds a generated (loss-masked) run"
        )
    results, reports = [], []
    for lg in logs:
        result, run_report = _held(request, lg, replayed, engine, synthetic)
        results.append(result)
        reports.append(run_report)
    labels = run_labels(logs)
    results, comparison = across_runs(results, labels)
    many = len(results) > 1
    for label, result in zip(labels, results, strict=True):
        for line in result.notes:
            hooks.note((f"{label}: " if many else "") + line)
    return ReconcileOutcome(spec, engine, tuple(labels), tuple(results), tuple(reports), comparison)
