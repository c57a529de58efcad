"""The doctor screen (`d`): findings from `inspector.doctor.diagnose`; Enter applies a wiring."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

if TYPE_CHECKING:
    from inspector.tui.screens.main import MainScreen

WiringKey = tuple[int, ...]
N_SAMPLES = 4
SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "green"}


class DoctorCancelled(Exception):
    """Raised from the doctor's progress callback when the screen was closed."""


class DoctorProgress(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class DoctorScreen(ModalScreen[WiringKey | None]):
    BINDINGS = [
        Binding("escape,q", "close", "close"),
        Binding("a", "apply_best", "apply best wiring"),
    ]

    def __init__(self, main: MainScreen, *, n_samples: int = N_SAMPLES) -> None:
        super().__init__()
        self.main = main
        self.n_samples = n_samples
        self.report: Any = None
        self.findings: list[Any] = []
        self._cancel = threading.Event()

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
        self.main.doctor_screen = self
        try:
            from inspector.doctor import diagnose
        except Exception as e:  # noqa: BLE001 - the doctor is optional to the app
            self.show_result(None, f"the doctor is not available in this build ({e})")
            return
        engine = self.main.engine
        if engine is None:
            self.show_result(None, "no draft loaded")
            return
        n = self.n_samples
        cancel = self._cancel
        self.query_one("#doctor-status", Static).update(
            f"running the doctor on the first {n} samples…"
        )
        post = self.post_message  # thread-safe

        def progress(stage: str, done: int, total: int) -> None:
            if cancel.is_set():
                raise DoctorCancelled()
            post(DoctorProgress(f"doctor: {stage} {done}/{total}"))

        def job(ev: Any) -> Any:
            try:
                return diagnose(ev, n_samples=n, progress=progress)
            except TypeError:  # a doctor without the progress argument
                return diagnose(ev, n_samples=n)

        engine.submit("doctor", job)

    def on_doctor_progress(self, m: DoctorProgress) -> None:
        if self.report is None:
            self.query_one("#doctor-status", Static).update(m.text)

    def show_result(self, report: Any, error: str | None) -> None:
        status = self.query_one("#doctor-status", Static)
        if error is not None:
            if "DoctorCancelled" in error:
                return
            status.update(Text(f"doctor failed: {error}", style="bold red"))
            return
        self.report = report
        self.findings = list(getattr(report, "findings", []) or [])
        s = self.main.session
        best = tuple(getattr(report, "best_wiring", ()) or ())
        label = s.wiring_label(best) if s is not None and best else str(list(best))
        status.update(
            Text.assemble(
                ("best wiring ", "bold"),
                label,
                f"   {len(self.findings)} findings",
            )
        )
        options = []
        for f in self.findings:
            sev = str(getattr(f, "severity", "info"))
            t = Text()
            t.append(f"{sev:<7} ", style=SEVERITY_STYLE.get(sev, ""))
            t.append(f"{getattr(f, 'kind', '')}: ", style="bold")
            t.append(str(getattr(f, "summary", "")))
            if getattr(f, "wiring", None) is not None:
                t.append("  ⏎ apply", style="italic")
            options.append(Option(t))
        ol = self.query_one(OptionList)
        ol.clear_options()
        ol.add_options(options)
        if options:
            ol.highlighted = 0
            ol.focus()
            self._show_detail(0)

    def _show_detail(self, index: int | None) -> None:
        detail = self.query_one("#doctor-detail", Static)
        if index is None or not 0 <= index < len(self.findings):
            detail.update("")
            return
        f = self.findings[index]
        parts: list[Any] = []
        fix = getattr(f, "fix", "")
        if fix:
            parts.append(Text.assemble(("fix ", "bold"), str(fix)))
        w = getattr(f, "wiring", None)
        s = self.main.session
        if w is not None:
            label = s.wiring_label(w) if s is not None else str(list(w))
            parts.append(Text.assemble(("wiring ", "bold"), label, "  (Enter applies it)"))
        evidence = getattr(f, "evidence", None)
        if evidence:
            text = json.dumps(evidence, indent=None, default=str)
            if len(text) > 500:
                text = text[:499] + "…"
            parts.append(Text.assemble(("evidence ", "bold"), text))
        detail.update(Group(*parts))

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show_detail(event.option_index)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        f = self.findings[event.option_index] if event.option_index < len(self.findings) else None
        w = getattr(f, "wiring", None) if f is not None else None
        if w is None:
            self.notify("this finding names no wiring to apply")
            return
        self.dismiss(tuple(int(x) for x in w))

    def action_apply_best(self) -> None:
        best = getattr(self.report, "best_wiring", None) if self.report is not None else None
        if not best:
            self.notify("no result yet")
            return
        self.dismiss(tuple(int(x) for x in best))

    def action_close(self) -> None:
        self._cancel.set()
        self.dismiss(None)

    def on_unmount(self) -> None:
        self._cancel.set()
        if self.main.doctor_screen is self:
            self.main.doctor_screen = None
