"""`diagnose`: run every check on a few samples and assemble the DoctorReport.

Order matters: the wiring search comes first (the other checks score its leading wirings); a
clearly better pairing shift or config alternative reruns the search under the correction, so the
wiring finding and the serving config are those of the corrected draft.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inspector.doctor import wording
from inspector.doctor.alignment import alignment_check
from inspector.doctor.budget import SampleShape, plan
from inspector.doctor.config_alternatives import ConfigCheckResult, config_checks
from inspector.doctor.final_state import final_state_finding, measure_final_state
from inspector.doctor.fingerprint import fc_fingerprint
from inspector.doctor.lm_head import compare_heads
from inspector.doctor.long_context import long_context_finding
from inspector.doctor.norm_flags import norm_flag_checks
from inspector.doctor.report import (
    ACCEPT_STEPS,
    ACCEPT_TOKENS,
    DoctorReport,
    Finding,
    WiringResult,
    sort_findings,
)
from inspector.doctor.search import Progress, WiringSearch, search_wirings
from inspector.doctor.serving import serving_config, serving_finding
from inspector.doctor.slot_identity import SlotIdentity, decide, identity_finding, relabel
from inspector.doctor.target_data import target_data_finding
from inspector.doctor.target_slots import measure_slots
from inspector.doctor.vocab import vocab_check
from inspector.doctor.wiring_check import (
    ENGINE_DEFAULT,
    NamedWirings,
    named_wirings,
    recommend,
    wiring_finding,
    wiring_results,
)
from inspector.draft import Draft
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formats.layer_convention import read_layer_ids, target_layer_count
from inspector.formats.tensorfiles import read_json
from inspector.sample import SlotInfo, with_layer_ids
from inspector.serving.walk import AcceptStats

DEFAULT_SAMPLES = 8


@dataclass
class _Searcher:
    """Runs the wiring search over the doctor's samples under the current pairing and draft."""

    ev: Evaluator
    samples: list[int]
    infos: list[SlotInfo]
    names: NamedWirings
    prune: bool
    progress: Progress | None
    shift: int = 0
    draft: Draft | None = None
    # The samples the accept length is replayed on (None: the first up to ACCEPT_TOKENS).
    accept_samples: list[int] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    _t: float = field(default_factory=time.perf_counter)

    def search(self) -> tuple[WiringSearch, list[WiringResult]]:
        ws = search_wirings(
            self.ev,
            self.samples,
            protected=self.names.protected,
            start=self.names.configured,
            draft=self.draft,
            shift=self.shift,
            prune=self.prune,
            progress=self.progress,
        )
        return ws, wiring_results(ws, self.infos, self.names.named)

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = round(now - self._t, 3)
        self._t = now


def _skipped_finding(ws: WiringSearch, n: int) -> Finding:
    text = wording.samples_skipped(ws.skipped, n)
    return Finding("samples", "warning", text.summary, text.fix, _Skipped(dict(ws.skipped)))


@dataclass
class _Skipped:
    skipped: dict[int, str]

    def to_dict(self) -> dict:
        return {"skipped": {str(k): v for k, v in self.skipped.items()}}


def _candidates(ws: WiringSearch, results: list[WiringResult], rec: tuple[int, ...], named):
    """The wirings the config alternatives are scored on: the recommended one, the top complete
    ones and the named ones."""
    cands = [rec, *[r.wiring for r in results if r.complete][:3], *named.values()]
    return [
        w for w in dict.fromkeys(cands) if ws.scores(w) is not None and not ws.scores(w).dropped
    ]


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
    progress: Progress | None,
) -> SlotIdentity:
    """The slots' identity from the target (when given), --slot-layers, and data_config.json
    read with the target's layer count when the file has none."""
    override = slot_layers if slot_layers is not None else ev.slot_layers
    measured = None
    n_layers = None
    if target is not None:
        if progress is not None:
            progress("slot identity", 0, 1)
        measured = measure_slots(ev, target, samples)
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


def _config_stage(
    run: _Searcher,
    ws: WiringSearch,
    results: list[WiringResult],
    target_config: str | Path | None,
) -> ConfigCheckResult:
    """Config alternatives, each scored with its own best among the leading wirings."""
    rec = recommend(ws, results, run.infos)
    return config_checks(
        run.ev,
        run.samples,
        _candidates(ws, results, rec, run.names.named),
        ws.hits(rec),
        best=rec,
        shift=run.shift,
        target_config=target_config,
        progress=run.progress,
    )


def _accept_lengths(
    run: _Searcher, rec: tuple[int, ...]
) -> tuple[
    dict[tuple[int, ...], float], AcceptStats | None, tuple[int, ...], frozenset[tuple[int, ...]]
]:
    """The accept length an engine logs (a greedy chain of ACCEPT_STEPS drafts, replayed over the
    doctor's samples) for the recommended wiring and the ones engines feed (serve, the engine
    default, the configured one). Not quoted when the samples are read one position off or the
    config needed a correction: the engine would run neither. The first samples up to
    ACCEPT_TOKENS tokens are replayed (their indices in the wiring finding's evidence)."""
    if run.shift or run.draft is not None:
        return {}, None, (), frozenset()
    from inspector.serving.replay import Replayer
    from inspector.serving.spec import DraftSpec
    from inspector.wiring import Wiring

    # A token budget, not every sample: each replayed wiring costs ACCEPT_STEPS draft forwards
    # over its rows (on a 4096-wide draft, 8 x 2K-token samples took minutes per wiring).
    used, budget = [], ACCEPT_TOKENS
    for i in run.samples:
        if run.accept_samples is not None and i not in run.accept_samples:
            continue  # over the doctor's compute budget (budget.plan)
        if used and budget <= 0:
            break
        used.append(i)
        budget -= run.ev.samples[i].length
    if not used:
        return {}, None, (), frozenset()
    named = run.names.named
    wanted = [rec] + [
        named[n] for n in ("serve", ENGINE_DEFAULT, "configured") if n in named and named[n] != rec
    ]
    replayer = Replayer(run.ev, DraftSpec(ACCEPT_STEPS))
    out: dict[tuple[int, ...], float] = {}
    bounded: set[tuple[int, ...]] = set()
    rec_stats = None
    for w in dict.fromkeys(wanted):
        total = AcceptStats(ACCEPT_STEPS)
        for i in used:
            try:
                total.add(replayer.replay(i, Wiring(w), keep=False).stats)
            except InputError:
                continue  # a sample the search could not use either
        if total.accept_length is not None:
            out[w] = round(total.accept_length, 4)
            if total.is_bound:
                bounded.add(w)
        if w == rec:
            rec_stats = total
    return out, rec_stats, tuple(used), frozenset(bounded)


def _final_findings(
    run: _Searcher,
    ws: WiringSearch,
    results: list[WiringResult],
    rec: tuple[int, ...],
    serving_cfg: dict,
) -> list[Finding]:
    """The wiring, fc fingerprint, serving and long-context findings for the recommended
    wiring."""
    accept, rec_stats, accept_samples, bounded = _accept_lengths(run, rec)
    run.lap("accept")
    wiring = wiring_finding(
        ws,
        results,
        run.names,
        run.infos,
        serving_cfg,
        shift=run.shift,
        recommended=rec,
        assumes_config_fixes=run.draft is not None,
        accept=accept,
        accept_samples=accept_samples,
        accept_bounded=bounded,
    )
    fingerprint = fc_fingerprint(
        run.ev,
        run.samples,
        rec,
        run.names.named,
        run.infos,
        corroborates=wiring.severity == "error",
    )
    reread = any(r.rereads_slots for r in run.names.layer_ids.readings)
    best = next(r for r in results if r.wiring == rec)
    out = [wiring, fingerprint, serving_finding(serving_cfg, best, slots_reread=reread)]
    long_context = long_context_finding(rec_stats)
    return out + ([long_context] if long_context is not None else [])


def diagnose(
    ev: Evaluator,
    n_samples: int = DEFAULT_SAMPLES,
    *,
    sample_indices: Sequence[int] | None = None,
    slot_layers: Sequence[int] | None = None,
    target_config: str | Path | None = None,
    target: str | Path | None = None,
    head_borrowed: bool = False,
    prune: bool = True,
    max_tokens: int | None = None,
    progress: Progress | None = None,
) -> DoctorReport:
    """Find the wiring the draft was trained for and every train/serve mismatch.

    ev: an Evaluator over the draft and samples (load the draft with `strict=False` so a faulty
      d2t or a missing head_dim become findings instead of load errors).
    n_samples: how many samples (the first ones) every check runs on; sample_indices overrides.
    slot_layers: HF index of every slot, overriding data_config.json (and `ev.slot_layers`).
    target_config: the target's config.json (or folder), for its rope settings; defaults to the
      evaluator's target head folder.
    target: the target model's folder: when given, it runs over two samples and every slot is
      matched to the hidden state it equals (`slot_identity`); needs transformers. With the
      evaluator's target head too, the draft's own lm_head is scored against the target's.
    head_borrowed: the draft's lm_head is the target's, borrowed for a draft that ships none
      (the command's `lm_head` finding says so): no comparison of the two.
    prune: drop clearly worse wirings after the first samples (False: evaluate all on all).
    max_tokens: read each sample up to this many tokens; None: as many as the compute budget
      allows (`budget.plan`: whole samples for small drafts), 0: whole samples.
    progress: called as progress(stage, done, total) per step of each stage; an exception raised
      there aborts the run.
    """
    t0 = time.perf_counter()
    if sample_indices is None:
        sample_indices = range(min(max(1, n_samples), len(ev.samples)))
    reading = plan(ev.draft.config, _shapes(ev, sample_indices), max_tokens=max_tokens)
    if reading.cuts:
        ev = ev.with_samples(ev.samples.cut(reading.cuts))
    # Samples over the budget are left out (the report lists them); unreadable ones stay, for
    # the search's samples finding to name.
    over = set(reading.dropped_samples)
    samples = [i for i in sample_indices if i not in over]
    infos = _infos(ev, slot_layers)
    identity = _identity(ev, infos, samples, slot_layers, target, progress)
    infos = relabel(infos, identity.hf)
    names = named_wirings(ev, infos, override=slot_layers, identity=identity)
    findings = [vocab_check(ev, samples)]
    for f in (identity_finding(identity), target_data_finding(identity.measured)):
        if f is not None:
            findings.append(f)
    if not identity.measured_ok and ev.target_head is not None:
        # The target was not run (too big here, or only its head given): its head still tells
        # whether the slot named final is the final state.
        layers = identity.num_layers or target_layer_count(ev.target_head.path)
        fs = measure_final_state(ev, infos, samples, layers)
        f = final_state_finding(fs, infos)
        if f is not None:
            findings.append(f)
    run = _Searcher(ev, samples, infos, names, prune, progress)
    run.accept_samples = reading.accept_samples
    run.seconds["identity"] = round(time.perf_counter() - t0, 3)
    ws, results = run.search()
    run.lap("search")
    if ws.skipped:
        findings.append(_skipped_finding(ws, len(run.samples)))
        run.samples = [i for i in run.samples if i not in ws.skipped]
    if not run.samples:
        raise InputError(None, "samples", "no sample could be scored")

    # Alignment: the best, configured and train wirings re-paired one position off; a clear
    # shift reruns the search under it.
    check = [
        results[0].wiring,
        *[names.named[n] for n in ("configured", "train") if n in names.named],
    ]
    align, run.shift = alignment_check(ev, run.samples, check[:3], infos, progress=progress)
    findings.append(align)
    if run.shift:
        ws, results = run.search()
    run.lap("alignment")

    # A clearly better config alternative reruns the search under the corrected config.
    config = _config_stage(run, ws, results, target_config)
    findings.extend(config.findings)
    if config.corrected is not None:
        run.draft = config.corrected
        ws, results = run.search()
    run.lap("config")

    rec = recommend(ws, results, infos)
    findings.extend(norm_flag_checks(ev, run.samples, rec, shift=run.shift, draft=run.draft))
    if target is not None and ev.target_head is not None and not head_borrowed:
        # The draft's own head against the target's (with a head borrowed for a draft that
        # ships none, the command adds the lm_head finding instead).
        heads = compare_heads(
            ev,
            run.samples,
            rec,
            ev.target_head.lm_head,
            str(target),
            shift=run.shift,
            draft=run.draft,
        )
        if heads is not None:
            findings.append(heads)
    run.lap("norm flags")
    readings = identity.readings if not identity.decided else None
    serving_cfg = serving_config(rec, infos, n_tokens=3, readings=readings)
    findings.extend(_final_findings(run, ws, results, rec, serving_cfg))
    run.lap("fingerprint")
    run.seconds["total"] = round(time.perf_counter() - t0, 3)
    return DoctorReport(
        best_wiring=results[0].wiring,
        recommended_wiring=rec,
        wirings=results,
        findings=sort_findings(findings),
        serving_config=serving_cfg,
        slots=infos,
        slot_identity=identity,
        sample_indices=run.samples,
        configured_wiring=names.configured,
        pairing_shift=run.shift,
        checkpoint=ev.draft.path,
        seconds=run.seconds,
        skipped=ev.samples.skipped,
        warnings=ev.warnings(run.samples),
        plan=reading,
    )
