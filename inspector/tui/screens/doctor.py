"""The doctor screen (`d`): runs the doctor's pipeline (`inspector.doctor.run_loaded`, what
`eagle-inspect doctor` runs) on the device thread and shows its verdict: one line first (the
trained wiring, what the engine feeds, the fix), then the findings one line each, the highlighted
one in full under them (its evidence folded behind `e`); Enter applies the highlighted finding's
wiring, `a` the trained one. The sample on screen is traced through the trained path and each
engine's (the `trace` finding: where they part, and why).

The screen is given the device thread (to submit the job) and the session (slot labels, the first
look's fed wiring); the job posts its typed `DoctorOutcome` straight back to the screen, so
nothing else routes the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from inspector.formatting import SEVERITY_STYLE, pct, printable
from inspector.tui.screens.job_dialog import JobDialog, check_cancel, run_guarded
from inspector.wiring import WiringKey

if TYPE_CHECKING:
    import threading

    from inspector.doctor import DoctorReport, Finding
    from inspector.serving.sampling_settings import SamplingSettings
    from inspector.tui.device_thread import DeviceThread
    from inspector.tui.summary import Summary
    from inspector.tui.tau_settings import Serving

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
    trace: int | None = None,
) -> Callable[[Any], None]:
    """The device-thread task: run the doctor on the evaluator's first `n_samples` samples and post progress
    and the outcome with `post` (thread-safe). Closing the screen sets `cancel`, which stops the
    run at its next progress step. An unexpected error is posted and re-raised, so the device thread
    also handles it (an out-of-memory error frees the device cache).

    sampling / target: the app's τ temperature and its target folder: the wiring finding then
    quotes the expected accept length there, as `doctor --target T --temperature` does, with
    the target the backend loaded for τ (loaded once for both). trace: the sample on screen,
    run through the trained path and each engine's (the `trace` finding, `doctor --trace N`)."""

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
                trace=trace,
            )
            post(finished(report=report))

        run_guarded(
            body,
            post,
            failed=lambda text: finished(error=text),
            cancelled=lambda: finished(cancelled=True),
        )

    return job


class FindingList(OptionList):
    """The findings, one line each; the cursor stops at the last (no wrap to the top: the list's
    end is where it ends, and a line under the last finding says so)."""

    def _enabled_after(self, index: int, direction: int) -> bool:
        i = index + direction
        while 0 <= i < self.option_count:
            if not self.get_option_at_index(i).disabled:
                return True
            i += direction
        return False

    def action_cursor_down(self) -> None:
        h = self.highlighted
        if h is not None and not self._enabled_after(h, 1):
            return
        super().action_cursor_down()

    def action_cursor_up(self) -> None:
        h = self.highlighted
        if h is not None and not self._enabled_after(h, -1):
            return
        super().action_cursor_up()


def verdict_text(report: DoctorReport, session: Summary) -> Text:
    """The verdict in one line: the wiring the weights were trained on, the wiring the engine
    feeds (the first look's, else the report's configured or serve wiring) with their step-0
    accuracy, and the fix (the wiring finding's; else the serving config's)."""
    from inspector.doctor.finding import Kind
    from inspector.tui.first_look import choose_fed

    trained = report.serve_wiring
    look = session.first_look
    if look is not None:
        fed, why_words = look.fed, look.fed_words()
    else:
        serve = next((w.wiring for w in report.wirings if "serve" in w.roles), None)
        fed, _ = choose_fed(trained, report.configured_wiring, serve)
        why_words = ""

    def acc(w: tuple[int, ...]) -> str:
        r = report.wiring_result(w)
        return "" if r is None or r.all_tok.acc is None else f" ({pct(r.all_tok.acc)} step-0)"

    t = Text()
    t.append("trained on ", style="bold")
    t.append(session.wiring_label(trained) + acc(trained))
    if tuple(fed) != tuple(trained):
        t.append(" · fed ", style="bold")
        t.append(session.wiring_label(fed) + acc(fed), style="bold red")
        if why_words:
            t.append(f": {why_words}", style="dim")
    else:
        t.append(" · the engine feeds it", style="bold")
    wiring = report.finding(Kind.WIRING)
    serving = report.finding(Kind.SERVING_CONFIG)
    fix = (wiring.fix if wiring is not None else "") or (serving.fix if serving else "")
    if tuple(fed) != tuple(trained) and fix:
        t.append(" · fix: ", style="bold")
        t.append(printable(fix))
    problems = report.problems()
    if problems:
        kinds = ", ".join(dict.fromkeys(str(f.kind) for f in problems))
        t.append(f" · {len(problems)} problem(s): {kinds}", style="bold yellow")
    return t


class DoctorScreen(JobDialog[WiringKey | None]):
    BINDINGS = [
        Binding("escape,q", "close", "close"),
        Binding("a", "apply_best", "apply the trained wiring"),
        Binding("e", "toggle_evidence", "show or hide the evidence"),
        Binding("pagedown", "scroll_detail(1)", "scroll the detail down", show=False),
        Binding("pageup", "scroll_detail(-1)", "scroll the detail up", show=False),
    ]

    def __init__(
        self,
        device: DeviceThread,
        session: Summary,
        *,
        n_samples: int = N_SAMPLES,
        sampling: SamplingSettings | None = None,
        trace: int | None = None,
    ) -> None:
        super().__init__()
        self.device = device
        self.session = session
        self.n_samples = n_samples
        self.sampling = sampling  # τ's temperature, which the wiring finding quotes
        self.trace = trace  # the sample on screen: the train/serve trace runs it
        self.report: DoctorReport | None = None
        self.findings: list[Finding] = []
        self.show_evidence = False  # the highlighted finding's evidence (`e`)
        self.verdict: Text | None = None  # the verdict line, and the detail's lines, as shown
        self.detail: list[Text] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="doctor-box", classes="dialog"):
            yield Label("doctor", id="doctor-title")
            yield Static("", id="doctor-verdict")
            yield Static("", id="doctor-status")
            yield FindingList(id="doctor-findings")
            with VerticalScroll(id="doctor-detail-box"):
                yield Static("", id="doctor-detail")
            yield Label(
                "↑↓ finding  ⏎ apply its wiring  a the trained wiring  e evidence  PgUp/PgDn  Esc",
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
            trace=self.trace,
        )
        self.device.submit("doctor", job)

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
        self.verdict = verdict_text(report, self.session)
        self.query_one("#doctor-verdict", Static).update(self.verdict)
        self.query_one("#doctor-status", Static).update(
            Text.assemble(
                f"{len(self.findings)} findings, errors first",
                f"   read: {report.plan.summary()}"
                if report.plan is not None and report.plan.summary()
                else "",
                style="dim",
            )
        )
        options = []
        for f in self.findings:
            t = Text(no_wrap=True, overflow="ellipsis")
            t.append(f"{f.severity:<7} ", style=SEVERITY_STYLE.get(f.severity, ""))
            t.append(f"{f.kind}: ", style="bold")
            t.append(printable(f.summary))  # summaries may name sample files
            if f.wiring is not None:
                t.append("  ⏎ apply", style="italic")
            options.append(Option(t))
        if options:
            end = f"end of the {len(options)} findings"
            options.append(Option(Text(end, style="dim italic"), disabled=True))
        if self.fill_options(options):
            self._show_detail(0)

    def _show_detail(self, index: int | None) -> None:
        detail = self.query_one("#doctor-detail", Static)
        if index is None or not 0 <= index < len(self.findings):
            self.detail = []
            detail.update("")
            return
        f = self.findings[index]
        parts: list[Text] = [
            Text.assemble(
                (f"{index + 1} of {len(self.findings)}  ", "dim"),
                (f"{f.severity} ", SEVERITY_STYLE.get(f.severity, "")),
                (f"{f.kind}", "bold"),
            ),
            Text(printable(f.summary)),
        ]
        parts += [Text.assemble(("- ", "dim"), printable(line)) for line in f.lines]
        if f.fix:
            parts.append(Text.assemble(("fix ", "bold"), printable(f.fix)))
        if f.wiring is not None:
            label = self.session.wiring_label(f.wiring)
            parts.append(Text.assemble(("wiring ", "bold"), label, "  (Enter applies it)"))
        if f.evidence:
            from inspector.tui.evidence import evidence_lines

            if self.show_evidence:
                parts.append(Text("evidence (e hides it)", style="bold"))
                parts += [Text(line) for line in evidence_lines(f.evidence)]
            else:
                parts.append(Text("e shows the evidence", style="dim"))
        self.detail = parts
        detail.update(Group(*parts))
        self.query_one("#doctor-detail-box", VerticalScroll).scroll_home(animate=False)

    def detail_text(self) -> str:
        """The detail as plain text, one line a part (tests read it)."""
        return "\n".join(t.plain for t in self.detail)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show_detail(event.option_index)
        # one line a finding, the detail a fixed height: the highlighted line stays in view
        event.option_list.scroll_to_highlight()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        i = event.option_index
        w = self.findings[i].wiring if i < len(self.findings) else None
        if w is None:
            self.notify("this finding names no wiring to apply", markup=False)
            return
        self.close(tuple(int(x) for x in w))

    def action_toggle_evidence(self) -> None:
        self.show_evidence = not self.show_evidence
        self._show_detail(self.query_one(FindingList).highlighted)

    def action_scroll_detail(self, direction: int) -> None:
        box = self.query_one("#doctor-detail-box", VerticalScroll)
        if direction > 0:
            box.scroll_page_down(animate=False)
        else:
            box.scroll_page_up(animate=False)

    def action_apply_best(self) -> None:
        """The wiring the verdict names as trained (the doctor's recommended one)."""
        if self.report is None:
            self.notify("no result yet", markup=False)
            return
        self.close(tuple(int(x) for x in self.report.serve_wiring))
