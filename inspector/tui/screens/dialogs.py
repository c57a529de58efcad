"""Small modal dialogs."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class GotoScreen(ModalScreen[int | None]):
    """Ask for a position number; Enter jumps, Escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, n_rows: int, current: int) -> None:
        super().__init__()
        self.n_rows = n_rows
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="goto-box", classes="dialog"):
            yield Label(f"go to position (0..{self.n_rows - 1}, now {self.current})")
            yield Input(placeholder="position", type="integer", id="goto-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            self.dismiss(None)
            return
        try:
            self.dismiss(int(text))
        except ValueError:
            self.notify(f"{text!r} is not a position", severity="error")

    def action_cancel(self) -> None:
        self.dismiss(None)
