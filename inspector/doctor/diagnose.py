"""`diagnose`: run every check on a few samples and assemble the DoctorReport.

What every check reads is one `DoctorContext`, built once (the samples within the compute
budget, the slots as decided, the named wirings); each wiring search is a `Searched` value
returned under one pairing and draft. Order matters: the search comes first (the other checks
score its leading wirings); a clearly better pairing shift or config alternative reruns it under
the correction, so the wiring finding and the serving config are those of the corrected draft.

The preflight (a checkpoint the loader refuses, a draft without a head) is `pipeline`'s, which
every view calls; `diagnose` takes an evaluator already loaded.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from inspector.doctor.budget import ACCEPT_STEPS, SampleShape, plan
from inspector.doctor.checks.accept_lengths import accept_lengths
from inspector.doctor.checks.alignment import alignment_check
from inspector.doctor.checks.config_alternatives import ConfigCheckResult, config_checks
from inspector.doctor.checks.draft_shape import draft_shape_finding
from inspector.doctor.checks.engine_feeds import engine_feeds_finding
from inspector.doctor.checks.final_state import final_state_finding, measure_final_state
from inspector.doctor.checks.lm_head import compare_heads
from inspector.doctor.checks.long_context import long_context_finding
from inspector.doctor.checks.norm_flags import norm_flag_checks
from inspector.doctor.checks.sample_integrity import integrity_finding, measure_integrity
from inspector.doctor.checks.skipped_samples import skipped_finding
from inspector.doctor.checks.slot_identity import SlotIdentity, decide, identity_finding, relabel
from inspector.doctor.checks.target_data import target_data_finding
from inspector.doctor.checks.target_slots import measure_slots
from inspector.doctor.checks.vocab import vocab_check
from inspector.doctor.checks.vocab_contract import target_vocabulary, vocab_contract_finding
from inspector.doctor.checks.wiring_check import wiring_finding
from inspector.doctor.context import DiagnoseSettings, DoctorContext, Searched
from inspector.doctor.finding import Finding, Severity, sort_findings
from inspector.doctor.report import DoctorReport
from inspector.doctor.serving import ServingConfig, serving_config, serving_finding
from inspector.doctor.wiring.fingerprint import fc_fingerprint
from inspector.doctor.wiring.named import (
    named_wirings,
    recommend,
    wiring_results,
)
from inspector.doctor.wiring.search import search_wirings
from inspector.draft import Draft
from inspector.engines.target_class import TargetClass
from inspector.errors import InputError, setting_field
from inspector.evaluate import Evaluator
from inspector.formats.layer_convention import read_layer_ids, target_layer_count
from inspector.formats.target_config import data_config_target, read_target_class
from inspector.formats.tensorfiles import read_json
from inspector.progress import StageProgress
from inspector.sample import SlotInfo, with_layer_ids

if TYPE_CHECKING:
    from inspector.capture.transformers_target import TargetModel


def search(ctx: DoctorContext, *, shift: int = 0, draft: Draft | None = None) -> Searched:
    """The wiring search over the context's samples under this pairing and draft."""
    ws = search_wirings(
        ctx.ev,
        ctx.samples,
        protected=ctx.names.protected,
        start=ctx.names.configured,
        draft=draft,
        shift=shift,
        prune=ctx.prune,
        progress=ctx.progress,
    )
    return Searched(ws, wiring_results(ws, ctx.infos, ctx.names.named), shift, draft)


@dataclass
class Stopwatch:
    """Seconds per stage, for the report's `seconds`."""

    seconds: dict[str, float] = field(default_factory=dict)
    _t0: float = field(default_factory=time.perf_counter)
    _t: float = field(default_factory=time.perf_counter)

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = round(now - self._t, 3)
        self._t = now

    def total(self) -> dict[str, float]:
        self.seconds["total"] = round(time.perf_counter() - self._t0, 3)
        return self.seconds


def _shapes(ev: Evaluator, samples: Sequence[int]) -> list[SampleShape]:
    """Length and scored positions of the readable samples among `samples` (the others are
    named by the search's samples finding)."""
    out = []
    for i in samples:
        try:
            out.append(SampleShape.of(i, ev.samples[i].loss_mask.numpy()))
        except InputError:
            continue
    return out


def _infos(ev: Evaluator, slot_layers: Sequence[int] | None) -> list[SlotInfo]:
    infos = list(ev.slot_info)
    if slot_layers is not None:
        infos = with_layer_ids(infos, slot_layers)
    if len(infos) < ev.n_blocks:
        raise InputError(None, "samples", f"{len(infos)} slots, but fc takes {ev.n_blocks}")
    return infos


def _identity(
    ev: Evaluator,
    infos: list[SlotInfo],
    samples: list[int],
    slot_layers: Sequence[int] | None,
    target: str | Path | None,
    progress: StageProgress | None,
    model: TargetModel | None = None,
) -> SlotIdentity:
    """The slots' identity from the target (when given; `model`: loaded already),
    --slot-layers, and data_config.json read with the target's layer count when the file has
    none."""
    override = slot_layers if slot_layers is not None else ev.slot_layers
    measured = None
    n_layers = None
    if target is not None:
        if progress is not None:
            progress("slot identity", 0, 1)
        measured = measure_slots(ev, target, samples, model=model)
        n_layers = measured.num_layers or target_layer_count(target)
        if progress is not None:
            progress("slot identity", 1, 1)
    reading = None
    path = ev.samples.data_config
    if override is None and path is not None:
        path = Path(path)
        reading = read_layer_ids(
            read_json(path), path, num_layers=n_layers, layers_from=f"{target} config.json"
        )
    return decide(
        infos, ev.draft.config, ev.n_blocks, override=override, reading=reading, measured=measured
    )


def _target_class(
    ev: Evaluator, target: str | Path | None, target_config: str | Path | None
) -> TargetClass | None:
    """The target's class, for SGLang's ids: from its folder, its config, the folder its head
    was read from, or the target data_config.json records (None: none of them names one)."""
    head = ev.target_head
    for source in (target, target_config, head.path if head is not None else None):
        cls = read_target_class(source)
        if cls is not None:
            return cls
    return data_config_target(getattr(ev.samples, "data_config", None))


def build_context(
    ev: Evaluator,
    sample_indices: Sequence[int],
    settings: DiagnoseSettings | None = None,
    *,
    progress: StageProgress | None = None,
    target_model: TargetModel | None = None,
) -> DoctorContext:
    """The samples within the compute budget, the slots' identity (running the target when
    given; `target_model`: loaded once, for both stages that run it) and the named wirings."""
    s = settings if settings is not None else DiagnoseSettings()
    reading = plan(ev.draft.config, _shapes(ev, sample_indices), max_tokens=s.max_tokens)
    if reading.cuts:
        ev = ev.with_samples(ev.samples.cut(reading.cuts))
    # Samples over the budget are left out (the report lists them); unreadable ones stay, for
    # the search's samples finding to name.
    over = set(reading.dropped_samples)
    samples = [i for i in sample_indices if i not in over]
    infos = _infos(ev, s.slot_layers)
    identity = _identity(ev, infos, samples, s.slot_layers, s.target, progress, target_model)
    infos = relabel(infos, identity.hf)
    names = named_wirings(
        ev,
        infos,
        override=s.slot_layers,
        identity=identity,
        target=_target_class(ev, s.target, s.target_config),
    )
    return DoctorContext(
        ev,
        tuple(samples),
        infos,
        identity,
        names,
        reading,
        s.prune,
        progress,
        target=s.target,
        target_dtype=s.target_dtype,
        sampling=s.sampling,
        target_model=target_model,
    )


def _data_findings(ctx: DoctorContext) -> list[Finding]:
    """The checks that need no wiring: the samples' integrity (slots of zeros, NaN, one constant
    state), the vocab map, the slots' identity, the data's source,
    and (the target not run, its head given) whether the slot named final is the final state."""
    ev, identity = ctx.ev, ctx.identity
    target = ctx.target or (ev.target_head.path if ev.target_head is not None else None)
    real, padded = target_vocabulary(ev.draft.path or None, target)
    findings = [
        integrity_finding(measure_integrity(ev, list(ctx.samples), ctx.infos)),
        vocab_check(ev, list(ctx.samples), real.size if real is not None else None),
    ]
    contract = vocab_contract_finding(ev.draft, real, padded, target)
    for f in (contract, identity_finding(identity), target_data_finding(identity.measured)):
        if f is not None:
            findings.append(f)
    if not identity.measured_ok and ev.target_head is not None:
        # The target was not run (too big here, or only its head given): its head still tells
        # whether the slot named final is the final state.
        layers = identity.num_layers or target_layer_count(ev.target_head.path)
        fs = measure_final_state(ev, ctx.infos, list(ctx.samples), layers)
        f = final_state_finding(fs, ctx.infos)
        if f is not None:
            findings.append(f)
    return findings


def _candidates(ctx: DoctorContext, run: Searched, rec: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The wirings the config alternatives are scored on: the recommended one, the top complete
    ones and the named ones."""
    ws = run.ws
    cands = [rec, *[r.wiring for r in run.results if r.complete][:3], *ctx.names.named.values()]
    return [
        w for w in dict.fromkeys(cands) if ws.scores(w) is not None and not ws.scores(w).dropped
    ]


def _config_stage(
    ctx: DoctorContext, run: Searched, target_config: str | Path | None
) -> ConfigCheckResult:
    """Config alternatives, each scored with its own best among the leading wirings."""
    rec = recommend(run.ws, run.results, ctx.infos, ctx.names.configured)
    return config_checks(
        ctx.ev,
        ctx.samples,
        _candidates(ctx, run, rec),
        run.ws.hits(rec),
        best=rec,
        shift=run.shift,
        target_config=target_config,
        progress=ctx.progress,
    )


def _final_findings(
    ctx: DoctorContext,
    run: Searched,
    rec: tuple[int, ...],
    serving_cfg: ServingConfig,
    clock: Stopwatch,
    engines: Sequence[str] | None = None,
) -> list[Finding]:
    """The wiring, fc fingerprint, serving and long-context findings for the recommended
    wiring."""
    accept = accept_lengths(ctx, run, rec)
    clock.lap("accept")
    wiring = wiring_finding(
        run.ws,
        run.results,
        ctx.names,
        ctx.infos,
        serving_cfg,
        shift=run.shift,
        recommended=rec,
        assumes_config_fixes=run.corrected,
        accept=accept.by_wiring,
        accept_samples=accept.samples,
        accept_bounded=accept.bounded,
        accept_settings=accept.settings,
    )
    fingerprint = fc_fingerprint(
        ctx.ev,
        ctx.samples,
        rec,
        ctx.names.named,
        ctx.infos,
        corroborates=wiring.severity is Severity.ERROR,
    )
    reread = any(r.rereads_slots for r in ctx.names.layer_ids.readings)
    best = next(r for r in run.results if r.wiring == rec)
    serving = serving_finding(serving_cfg, best.wiring, best.label, slots_reread=reread)
    long_context = long_context_finding(accept.rec_stats)
    feeds = engine_feeds_finding(
        ctx.names,
        run.ws,
        rec,
        ctx.infos,
        accept.by_wiring,
        engines=engines,
        places=ctx.names.id_places,
    )
    extra = [f for f in (long_context, feeds) if f is not None]
    return [wiring, fingerprint, serving, *extra]


def diagnose(
    ev: Evaluator,
    settings: DiagnoseSettings | None = None,
    *,
    progress: StageProgress | None = None,
    target_model: TargetModel | None = None,
) -> DoctorReport:
    """Find the wiring the draft was trained for and every train/serve mismatch.

    ev: an Evaluator over the draft and samples (load the draft with `strict=False` so a faulty
      d2t or a missing head_dim become findings instead of load errors; `pipeline.run` does).
    settings: what to run and on which samples (`DiagnoseSettings`; None: its defaults).
    progress: called as progress(stage, done, total) per step of each stage; an exception raised
      there aborts the run.
    target_model: the target, loaded already on the evaluator's device in the settings' dtype;
      at a temperature it is otherwise loaded here, once for both stages that run it (the
      slots' identity and the expectation).

    The stages, in order: the data's checks; the wiring search, rerun under a clear pairing
    shift and a clearly better config alternative; the draft's own checks for the recommended
    wiring; the wiring, serving and long-context findings; the report.
    """
    clock = Stopwatch()
    settings = settings if settings is not None else DiagnoseSettings()
    settings, target_model = _verifier(ev, settings, target_model)
    ctx = build_context(
        ev,
        settings.indices(len(ev.samples)),
        settings,
        progress=progress,
        target_model=target_model,
    )
    findings = _data_findings(ctx)
    clock.lap("identity")
    ctx, run, searched = _scored_search(ctx)
    findings.extend(searched)
    clock.lap("search")
    run, align = _aligned(ctx, run)
    findings.append(align)
    clock.lap("alignment")
    # A clearly better config alternative reruns the search under the corrected config.
    config = _config_stage(ctx, run, settings.target_config)
    findings.extend(config.findings)
    if config.corrected is not None:
        run = search(ctx, shift=run.shift, draft=config.corrected)
    clock.lap("config")
    rec = recommend(run.ws, run.results, ctx.infos, ctx.names.configured)
    findings.extend(_draft_findings(ctx, run, rec, settings))
    clock.lap("norm flags")
    identity = ctx.identity
    serving_cfg = serving_config(
        rec,
        ctx.infos,
        n_tokens=ACCEPT_STEPS,
        readings=identity.readings if not identity.decided else None,
        target=_target_class(ctx.ev, settings.target, settings.target_config),
    )
    findings.extend(_final_findings(ctx, run, rec, serving_cfg, clock, settings.engines))
    clock.lap("fingerprint")
    return DoctorReport(
        best_wiring=run.results[0].wiring,
        recommended_wiring=rec,
        wirings=run.results,
        findings=sort_findings(findings),
        serving_config=serving_cfg,
        slots=ctx.infos,
        slot_identity=identity,
        sample_indices=list(ctx.samples),
        configured_wiring=ctx.names.configured,
        pairing_shift=run.shift,
        checkpoint=ctx.ev.draft.path,
        seconds=clock.total(),
        skipped=ctx.ev.samples.skipped,
        warnings=ctx.ev.warnings(list(ctx.samples)),
        plan=ctx.plan,
    )


def _verifier(
    ev: Evaluator, settings: DiagnoseSettings, target_model: TargetModel | None
) -> tuple[DiagnoseSettings, TargetModel | None]:
    """The settings with greedy sampling as None (replayed), and the target that verifies the
    drafts at a temperature (loaded here unless given); refused at a temperature without one."""
    sampling = settings.sampling
    if sampling is not None and sampling.sampling.greedy:
        return replace(settings, sampling=None), target_model
    if sampling is None:
        return settings, target_model
    if settings.target is None:
        raise InputError(
            None,
            setting_field("temperature"),
            "the accept length at a temperature is the target's verification of the drafts: "
            "pass --target DIR",
        )
    if target_model is None:
        from inspector.capture.transformers_target import TargetModel

        target_model = TargetModel(
            settings.target, dtype=settings.target_dtype, device=str(ev.device)
        )
    return settings, target_model


def _scored_search(ctx: DoctorContext) -> tuple[DoctorContext, Searched, list[Finding]]:
    """The wiring search, and the context narrowed to the samples it could score (their finding
    when some could not); refused when none could."""
    run = search(ctx)
    findings = []
    if run.ws.skipped:
        findings.append(skipped_finding(run.ws.skipped, len(ctx.samples)))
        ctx = ctx.scored(run.ws.skipped)
    if not ctx.samples:
        raise InputError(None, "samples", "no sample could be scored")
    return ctx, run, findings


def _aligned(ctx: DoctorContext, run: Searched) -> tuple[Searched, Finding]:
    """The alignment finding: the best, configured and train wirings re-paired one position off;
    a clear shift reruns the search under it."""
    named = ctx.names.named
    check = [run.results[0].wiring, *[named[n] for n in ("configured", "train") if n in named]]
    align, shift = alignment_check(ctx.ev, ctx.samples, check[:3], ctx.infos, progress=ctx.progress)
    return (search(ctx, shift=shift) if shift else run), align


def _draft_findings(
    ctx: DoctorContext, run: Searched, rec: tuple[int, ...], settings: DiagnoseSettings
) -> list[Finding]:
    """The draft's own checks for the recommended wiring: its norm flags, its shape against the
    engines, and (the target given) its lm_head against the target's."""
    findings = norm_flag_checks(ctx.ev, ctx.samples, rec, shift=run.shift, draft=run.draft)
    shape = draft_shape_finding(run.draft or ctx.ev.draft, settings.engines)
    if shape is not None:
        findings.append(shape)
    head = ctx.ev.target_head
    if settings.target is not None and head is not None and not settings.head_borrowed:
        # The draft's own head against the target's (with a head borrowed for a draft that
        # ships none, the pipeline adds the lm_head finding instead).
        heads = compare_heads(
            ctx.ev,
            ctx.samples,
            rec,
            head.lm_head,
            str(settings.target),
            shift=run.shift,
            draft=run.draft,
        )
        if heads is not None:
            findings.append(heads)
    return findings
