"""The doctor screen (`d`): runs the doctor's pipeline (`inspector.doctor.run_loaded`, what
`eagle-inspect doctor` runs) on the device thread and lists its findings; Enter applies the highlighted finding's wiring, `a` the best wiring.

The screen is given the engine (to submit the job) and the session (slot labels); the job posts
its typed `DoctorOutcome` straight back to the screen, so nothing else routes the result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from inspector.formatting import SEVERITY_STYLE, printable
from inspector.tui.screens.job_dialog import JobDialog, check_cancel, run_guarded
from inspector.wiring import WiringKey

if TYPE_CHECKING:
    import threading

    from inspector.doctor import DoctorReport, Finding
    from inspector.serving.sampling_settings import SamplingSettings
    from inspector.tui.engine import Engine
    from inspector.tui.serving import Serving
    from inspector.tui.summary import Summary

N_SAMPLES = 4


@dataclass(frozen=True)
class DoctorOutcome:
    """How a doctor run ended: a report, an error text, or cancelled (the screen was closed)."""

    report: DoctorReport | None = None
    error: str | None = None
    cancelled: bool = False


def doctor_sampling(serving: Serving) -> SamplingSettings | None:
    """The sampling the doctor quotes its accept length at for τ's settings: their temperature,
    top-k and top-p, on the doctor's chain, which vLLM verifies with its one-hot rule (None:
    greedy)."""
    from inspector.serving.sampling_settings import SamplingSettings, Verification, VerifyRule

    if serving.sampling is None:
        return None
    return SamplingSettings(serving.sampling.sampling, Verification(VerifyRule.VLLM_ONEHOT))


class DoctorProgress(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class DoctorFinished(Message):
    def __init__(self, outcome: DoctorOutcome) -> None:
        super().__init__()
        self.outcome = outcome


def doctor_job(
    n_samples: int,
    cancel: threading.Event,
    post: Callable[[Message], Any],
    *,
    sampling: SamplingSettings | None = None,
    target: str | None = None,
) -> Callable[[Any], None]:
    """The engine task: run the doctor on the evaluator's first `n_samples` samples and post progress
    and the outcome with `post` (thread-safe). Closing the screen sets `cancel`, which stops the
    run at its next progress step. An unexpected error is posted and re-raised, so the engine
    also handles it (an out-of-memory error frees the device cache).

    sampling / target: the app's τ temperature and its target folder: the wiring finding then
    quotes the expected accept length there, as `doctor --target T --temperature` does, with
    the target the backend loaded for τ (loaded once for both)."""

    def progress(stage: str, done: int, total: int) -> None:
        check_cancel(cancel)
        post(DoctorProgress(f"doctor: {stage} {done}/{total}"))

    def finished(**outcome: Any) -> DoctorFinished:
        return DoctorFinished(DoctorOutcome(**outcome))

    def job(backend: Any) -> None:
        try:
            from inspector.doctor import run_loaded
        except ImportError as e:
            post(finished(error=f"not available in this build ({e})"))
            return

        def body() -> None:
            # The CLI's pipeline, preflight included; the target head's folder is its --target.
            report = run_loaded(
                backend.evaluator,
                n_samples=n_samples,
                progress=progress,
                sampling=sampling,
                target=None if target is None else Path(target),
                target_model=None if sampling is None else backend.target(),
            )
            post(finished(report=report))

        run_guarded(
            body,
            post,
            failed=lambda text: finished(error=text),
            cancelled=lambda: finished(cancelled=True),
        )

    return job


class DoctorScreen(JobDialog[WiringKey | None]):
    BINDINGS = [
        Binding("escape,q", "close", "close"),
        Binding("a", "apply_best", "apply best wiring"),
    ]

    def __init__(
        self,
        engine: Engine,
        session: Summary,
        *,
        n_samples: int = N_SAMPLES,
        sampling: SamplingSettings | None = None,
    ) -> None:
        super().__init__()
        self.engine = engine
        self.session = session
        self.n_samples = n_samples
        self.sampling = sampling  # τ's temperature, which the wiring finding quotes
        self.report: DoctorReport | None = None
        self.findings: list[Finding] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="doctor-box", classes="dialog"):
            yield Label("doctor", id="doctor-title")
            yield Static("", id="doctor-status")
            yield OptionList(id="doctor-findings")
            yield Static("", id="doctor-detail")
            yield Label(
                "↑↓ finding  Enter apply its wiring  a apply the best wiring  Esc close",
                id="doctor-keys",
            )

    def on_mount(self) -> None:
        at = "" if self.sampling is None else f" at {self.sampling.sampling.label()}"
        self.query_one("#doctor-status", Static).update(
            f"running the doctor on the first {self.n_samples} samples{at}…"
        )
        job = doctor_job(
            self.n_samples,
            self._cancel,
            self.post_message,
            sampling=self.sampling,
            target=self.session.target if self.sampling is not None else None,
        )
        self.engine.submit("doctor", job)

    def on_doctor_progress(self, m: DoctorProgress) -> None:
        if self.report is None:
            self.query_one("#doctor-status", Static).update(Text(printable(m.text)))

    def on_doctor_finished(self, m: DoctorFinished) -> None:
        outcome = m.outcome
        if outcome.cancelled:
            return
        if outcome.report is None:
            status = self.query_one("#doctor-status", Static)
            status.update(
                Text(f"doctor failed: {printable(outcome.error or '')}", style="bold red")
            )
            return
        self.show_report(outcome.report)

    def show_report(self, report: DoctorReport) -> None:
        self.report = report
        self.findings = list(report.findings)
        self.query_one("#doctor-status", Static).update(
            Text.assemble(
                ("best wiring ", "bold"),
                self.session.wiring_label(report.best_wiring),
                f"   {len(self.findings)} findings",
                f"   read: {report.plan.summary()}"
                if report.plan is not None and report.plan.summary()
                else "",
            )
        )
        options = []
        for f in self.findings:
            t = Text()
            t.append(f"{f.severity:<7} ", style=SEVERITY_STYLE.get(f.severity, ""))
            t.append(f"{f.kind}: ", style="bold")
            t.append(printable(f.summary))  # summaries may name sample files
            if f.wiring is not None:
                t.append("  ⏎ apply", style="italic")
            options.append(Option(t))
        if self.fill_options(options):
            self._show_detail(0)

    def _show_detail(self, index: int | None) -> None:
        detail = self.query_one("#doctor-detail", Static)
        if index is None or not 0 <= index < len(self.findings):
            detail.update("")
            return
        f = self.findings[index]
        parts: list[Text] = [Text.assemble(("- ", "dim"), printable(line)) for line in f.lines]
        if f.fix:
            parts.append(Text.assemble(("fix ", "bold"), printable(f.fix)))
        if f.wiring is not None:
            label = self.session.wiring_label(f.wiring)
            parts.append(Text.assemble(("wiring ", "bold"), label, "  (Enter applies it)"))
        if f.evidence:
            text = json.dumps(f.evidence, indent=None, default=str)
            if len(text) > 500:
                text = text[:499] + "…"
            parts.append(Text.assemble(("evidence ", "bold"), text))
        detail.update(Group(*parts))

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show_detail(event.option_index)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        i = event.option_index
        w = self.findings[i].wiring if i < len(self.findings) else None
        if w is None:
            self.notify("this finding names no wiring to apply", markup=False)
            return
        self.close(tuple(int(x) for x in w))

    def action_apply_best(self) -> None:
        if self.report is None:
            self.notify("no result yet", markup=False)
            return
        self.close(tuple(int(x) for x in self.report.best_wiring))
