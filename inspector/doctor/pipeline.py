"""The doctor's one pipeline, preflight included: what `eagle-inspect doctor` and the app's
doctor screen both run, so the two cannot differ on the same inputs.

    report = run(DoctorRequest(checkpoint, target=..., n_samples=8), load, progress=...)
    report = run_loaded(ev, n_samples=4, progress=...)   # the app: its evaluator, loaded already

1. `--write-fixed OUT` is checked first (a bad OUT fails now, not after the diagnosis);
2. a norm flag without its tensors stops the loader: those findings are the report;
3. a draft without lm_head: without the target, one finding is the report (every other check
   needs logits); with it, the draft is scored with the target's head rows, from a temporary
   copy of the draft that holds them, and the `lm_head` finding says so;
4. `load(checkpoint)` gives the evaluator (leniently loaded, so a faulty d2t or a missing
   head_dim become findings), `diagnose` runs every check, `write_fixed` writes the fix;
5. a llama.cpp GGUF draft adds its baked target layers against the trained wiring
   (`gguf_layers`); `--write-fixed` is refused for it (the fix is a reconversion).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from inspector.doctor.checks.draft_numerics import draft_numerics_findings
from inspector.doctor.checks.gguf_layers import gguf_layers_finding
from inspector.doctor.checks.lm_head import (
    HeadStatus,
    borrow_target_head,
    head_finding,
    head_status,
)
from inspector.doctor.checks.norm_flags import missing_norm_findings
from inspector.doctor.context import DEFAULT_SAMPLES, DiagnoseSettings
from inspector.doctor.diagnose import diagnose
from inspector.doctor.finding import Finding, Severity, sort_findings
from inspector.doctor.fix import write_fixed
from inspector.doctor.report import DoctorReport
from inspector.errors import InputError, setting_field
from inspector.evaluate import Evaluator
from inspector.formats.block_config import refuse_block_draft
from inspector.formats.checkpoint import is_gguf
from inspector.progress import StageProgress
from inspector.serving.sampling_settings import SamplingSettings

if TYPE_CHECKING:
    from inspector.capture.transformers_target import TargetModel

# The evaluator over the draft in this folder and the session's samples, loaded leniently
# (`strict=False`): the folder is the draft's own, or a temporary copy with a borrowed head.
Load = Callable[[Path], Evaluator]


@dataclass(frozen=True)
class DoctorRequest:
    """What to diagnose, and how.

    checkpoint: the draft folder (the preflight reads its config.json and tensor names).
    target: the target model's folder (--target): runs it to tell each slot's layer, lends its
      head to a draft that ships none.
    n_samples: the first N samples every check runs on. max_tokens: see `diagnose`.
    write_fixed: write the fixed checkpoint there. embed / read: the --embed file and every path
      read, which OUT may not lie in.
    sampling / target_dtype: the sampling the wiring finding's accept length is quoted at (None:
      greedy; at a temperature the target, run in target_dtype, verifies the drafts).
    """

    checkpoint: Path
    target: Path | None = None
    n_samples: int = DEFAULT_SAMPLES
    max_tokens: int | None = None
    write_fixed: str | Path | None = None  # as given: an empty OUT is refused by name
    embed: Path | None = None
    read: tuple[str, ...] = ()
    sampling: SamplingSettings | None = None
    target_dtype: str = "auto"
    engines: tuple[str, ...] | None = None  # the engine_feeds finding's rows (None: every engine)
    trace: int | None = None  # the sample the train/serve trace runs (`doctor.trace`; None: none)


def headless_report(status: HeadStatus) -> DoctorReport:
    """The doctor's report for a draft without a head and no target to borrow one from: the one
    finding that says so (the other checks need logits)."""
    # Whatever the engines do, nothing could be checked: an error.
    finding = replace(head_finding(status), severity=Severity.ERROR)
    return DoctorReport(
        best_wiring=(),
        wirings=[],
        findings=[finding],
        serving_config=None,
        checkpoint=status.checkpoint,
    )


def with_finding(report: DoctorReport, finding: Finding) -> DoctorReport:
    report.findings = sort_findings([*report.findings, finding])
    return report


def _preflight(request: DoctorRequest) -> DoctorReport | None:
    """The report when the draft cannot be scored as it is shipped (None: it can, or a borrowed
    head lets it be)."""
    if request.write_fixed is not None:  # a bad OUT fails now, not after the diagnosis
        from inspector.formats.writer import check_out

        if is_gguf(request.checkpoint):
            raise InputError(
                request.checkpoint,
                setting_field("write-fixed"),
                "writes a checkpoint folder from a folder draft: for a GGUF, fix its HF draft "
                "(the gguf_layers finding says how) and convert it again",
            )
        check_out(request.write_fixed, request.read, "--write-fixed")
    # A block draft (DFlash) is not diagnosed yet: one line, before the head check would
    # report the target's head it borrows by design as missing.
    refuse_block_draft(request.checkpoint)
    # A norm flag without its tensors stops the loader: those findings are the report.
    missing = missing_norm_findings(request.checkpoint)
    if missing:
        return DoctorReport(
            best_wiring=(),
            wirings=[],
            findings=missing,
            serving_config=None,
            checkpoint=str(request.checkpoint),
        )
    return None


def run(
    request: DoctorRequest,
    load: Load,
    *,
    progress: StageProgress | None = None,
    target_model: TargetModel | None = None,
) -> DoctorReport:
    """The preflight, then every check on the evaluator `load` gives, then (with write_fixed)
    the fixed checkpoint, written and verified (in `report.fixed`). `target_model`: the
    request's target loaded already on the evaluator's device (the app's), reused at a
    temperature."""
    early = _preflight(request)
    if early is not None:
        return early
    head = head_status(request.checkpoint)
    borrowed = head is not None and not head.present
    if head is not None and borrowed:
        if request.write_fixed is not None:
            raise InputError(
                head.weight_file,
                "lm_head.weight",
                "absent: --write-fixed would have to invent a head; ship the draft's own",
            )
        if request.target is None:
            return headless_report(head)
    with tempfile.TemporaryDirectory(prefix="eagle-doctor-head-") as tmp:
        checkpoint = request.checkpoint
        if head is not None and borrowed:
            assert request.target is not None
            checkpoint = borrow_target_head(head, request.target, Path(tmp) / "draft")
        ev = load(checkpoint)
        # With the target at hand, the doctor also runs it to tell what every slot is.
        settings = DiagnoseSettings(
            n_samples=request.n_samples,
            target_config=request.target,
            target=request.target,
            head_borrowed=borrowed,
            max_tokens=request.max_tokens,
            sampling=request.sampling,
            target_dtype=request.target_dtype,
            engines=request.engines,
        )
        report = diagnose(ev, settings, progress=progress, target_model=target_model)
        numerics = draft_numerics_findings(
            ev, report.sample_indices, report.best_wiring, request.target, request.engines
        )
        report.findings = sort_findings(
            [*report.findings, *gguf_layers_finding(ev.draft, report, request.target), *numerics]
        )
        if request.trace is not None:
            from inspector.doctor.trace.build import report_trace_finding

            engines = request.engines
            with_finding(
                report, report_trace_finding(ev, report, request.trace, engines, request.target)
            )
        if request.write_fixed is not None:
            write_fixed(
                ev,
                report,
                request.write_fixed,
                embed=request.embed,
                target=request.target,
                read=request.read,
                progress=progress,
            )
    if head is not None and borrowed:
        report.checkpoint = str(request.checkpoint)
        with_finding(report, head_finding(head, borrowed_from=str(request.target)))
    return report


def reuse(ev: Evaluator, checkpoint: Path) -> Load:
    """A `Load` for a session that holds an evaluator already: `ev` for its own `checkpoint`,
    else (a copy with a borrowed head) that copy loaded leniently beside `ev`'s samples.

    Reusing `ev` gives what a lenient load would: strict and lenient loading differ only where
    strict raises (a faulty d2t, a missing head_dim), and `ev` loaded."""

    def load(folder: Path) -> Evaluator:
        if Path(folder) == checkpoint:
            return ev
        from inspector.formats import load_draft

        target = ev.target_head.path if ev.target_head is not None else None
        draft = load_draft(
            folder, target=target, dtype=ev.draft.dtype, device=ev.device, strict=False
        )
        return ev.with_draft(draft)

    return load


def run_loaded(
    ev: Evaluator,
    *,
    n_samples: int = DEFAULT_SAMPLES,
    max_tokens: int | None = None,
    progress: StageProgress | None = None,
    sampling: SamplingSettings | None = None,
    target: Path | None = None,
    target_model: TargetModel | None = None,
    trace: int | None = None,
) -> DoctorReport:
    """`run` for a session that holds an evaluator (the app): the request is read off it (its
    draft's folder; `target`, else its target head's folder, as --target), at `sampling` (the
    app's τ settings; `target_model`: the app's loaded target, not loaded again; `trace`: the
    sample the train/serve trace runs)."""
    checkpoint = Path(ev.draft.path)
    if target is None and ev.target_head is not None:
        target = Path(ev.target_head.path)
    request = DoctorRequest(
        checkpoint, target, n_samples, max_tokens, sampling=sampling, trace=trace
    )
    return run(request, reuse(ev, checkpoint), progress=progress, target_model=target_model)
