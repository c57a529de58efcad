"""Small modal dialogs."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, ScreenResultType
from textual.widgets import Input, Label


class Dialog(ModalScreen[ScreenResultType]):
    """A modal screen that closes only while it is on top.

    Textual's `dismiss` pops whatever screen is on top. Keys queued faster than screens change
    (a held Enter, a paste, Enter then Escape) can reach a dialog after it was dismissed: its
    second dismiss would pop the screen underneath, the main screen included."""

    def close(self, result: ScreenResultType | None = None) -> None:
        if self.is_current:
            self.dismiss(result)


class GotoScreen(Dialog[int | None]):
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
            self.close(None)
            return
        try:
            self.close(int(text))
        except ValueError:
            self.notify(f"{text!r} is not a position", severity="error", markup=False)

    def action_cancel(self) -> None:
        self.close(None)
