"""The engine-settings sweep (Ctrl+S in the serving dialog): `accept --sweep`'s grid replayed on the
device thread over the first samples under the current wiring, ranked by the speedup it buys
under the default cost model; Enter applies the highlighted setting to τ.

The job posts plain rows (a setting, its accept length, its speedup and ranks) straight back to
the screen, as the doctor screen's job does, so no torch object reaches the app.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from inspector.formatting import fmt_float, printable
from inspector.tui.screens.job_dialog import JobDialog, check_cancel, run_guarded
from inspector.wiring import WiringKey

if TYPE_CHECKING:
    import threading

    from inspector.serving.spec import DraftSpec
    from inspector.tui.device_thread import DeviceThread

N_SAMPLES = 8
# accept --sweep's default grid
STEPS, TOPKS, TOKENS = (1, 2, 3, 4), (1, 2, 4), (4, 8, 16)


@dataclass(frozen=True)
class SweepLine:
    """One setting's result, as the screen lists it."""

    spec: DraftSpec
    accept_length: float | None
    lower_bound: bool
    speedup: float | None
    rank_speedup: int
    rank_accept: int


class SweepProgress(Message):
    def __init__(self, done: int, total: int) -> None:
        super().__init__()
        self.done, self.total = done, total


class SweepFinished(Message):
    def __init__(self, lines: list[SweepLine] | None, error: str | None = None) -> None:
        super().__init__()
        self.lines, self.error = lines, error


def sweep_job(
    wiring: WiringKey, n_samples: int, cancel: threading.Event, post: Callable[[Message], Any]
) -> Callable[[Any], None]:
    """The device-thread task: the default grid over the evaluator's first `n_samples` samples under
    `wiring`, each setting counted as `accept` counts it alone."""

    def progress(done: int, total: int) -> None:
        check_cancel(cancel)
        post(SweepProgress(done, total))

    def job(backend: Any) -> None:
        ev = backend.evaluator

        def body() -> None:
            from inspector.serving.cost import CostModel, sweep_grid
            from inspector.serving.settings_sweep import run_sweep
            from inspector.wiring import Wiring

            specs, _ = sweep_grid(STEPS, TOPKS, TOKENS)
            report = run_sweep(
                ev,
                specs,
                [Wiring(tuple(wiring))],
                cost=CostModel(),
                limit=n_samples,
                progress=progress,
            )
            lines = [
                SweepLine(
                    r.spec,
                    r.accept_length,
                    r.stats.is_bound,
                    r.speedup,
                    r.rank_speedup,
                    r.rank_accept,
                )
                for r in report.rows
            ]
            post(SweepFinished(sorted(lines, key=lambda x: x.rank_speedup)))

        run_guarded(body, post, failed=lambda text: SweepFinished(None, text))

    return job


class SweepScreen(JobDialog["DraftSpec | None"]):
    BINDINGS = [Binding("escape,q", "close", "close")]

    def __init__(self, device: DeviceThread, wiring: WiringKey, wiring_label: str) -> None:
        super().__init__()
        self.device = device
        self.wiring = wiring
        self.wiring_label = wiring_label
        self.lines: list[SweepLine] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="sweep-box", classes="dialog"):
            yield Label("engine settings sweep (greedy)", classes="dialog-title")
            yield Static("", id="sweep-status")
            yield OptionList(id="sweep-rows")
            yield Label(
                "ranked by speedup: accept length / round cost (a draft forward 0.05, a "
                "verification 1.0 target decode steps)  ↑↓ setting  Enter apply  Esc close",
                id="sweep-keys",
            )

    def on_mount(self) -> None:
        self.query_one("#sweep-status", Static).update(
            Text(
                f"replaying {len(STEPS)} steps x {len(TOPKS)} topk x {len(TOKENS)} budgets on "
                f"the first {N_SAMPLES} samples fed {printable(self.wiring_label)}…"
            )
        )
        job = sweep_job(self.wiring, N_SAMPLES, self._cancel, self.post_message)
        self.device.submit("sweep", job)

    def on_sweep_progress(self, m: SweepProgress) -> None:
        if not self.lines:
            self.query_one("#sweep-status", Static).update(f"sweep: sample {m.done}/{m.total}")

    def on_sweep_finished(self, m: SweepFinished) -> None:
        status = self.query_one("#sweep-status", Static)
        if m.lines is None:
            status.update(Text(f"sweep failed: {printable(m.error or '')}", style="bold red"))
            return
        self.lines = m.lines
        best = m.lines[0] if m.lines else None
        status.update(
            Text.assemble(
                ("best ", "bold"),
                best.spec.flags() if best is not None else "-",
                f"   {len(m.lines)} settings fed {printable(self.wiring_label)}",
            )
        )
        self.fill_options([Option(self._line(x)) for x in m.lines])

    @staticmethod
    def _line(x: SweepLine) -> Text:
        s = x.spec
        name = (
            f"steps {s.steps} chain"
            if s.is_chain
            else f"steps {s.steps} topk {s.topk} tokens {s.draft_tokens}"
        )
        al = (
            "-"
            if x.accept_length is None
            else (">=" if x.lower_bound else "") + fmt_float(x.accept_length)
        )
        sp = "-" if x.speedup is None else f"x{x.speedup:.2f}"
        t = Text()
        t.append(f"#{x.rank_speedup:<3}", style="bold")
        t.append(f"{name:<28}")
        t.append(f"accept len {al:<7} speedup {sp:<7} (#{x.rank_accept} by length)")
        return t

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        i = event.option_index
        if 0 <= i < len(self.lines):
            self.close(self.lines[i].spec)
