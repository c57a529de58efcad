"""Small modal dialogs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen, ScreenResultType
from textual.widgets import Input, Label

from inspector.formatting import printable

if TYPE_CHECKING:
    from inspector.serving.spec import DraftSpec


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


class ServingScreen(Dialog["DraftSpec | None"]):
    """The engine settings τ replays: steps, topk and draft tokens, as SGLang names them.
    Enter (in any field) applies them, Escape cancels; a bad combination says why and stays."""

    BINDINGS = [
        Binding("escape", "cancel", "cancel"),
        Binding("ctrl+s", "sweep", "sweep the settings"),
    ]

    def __init__(self, spec: DraftSpec, sweep: Callable[[], Screen] | None = None) -> None:
        super().__init__()
        self.spec = spec
        self._sweep = sweep  # the sweep screen's factory (None: no device to run it on)

    def compose(self) -> ComposeResult:
        s = self.spec
        tokens = "" if s.is_chain else str(s.draft_tokens)
        with Vertical(id="serving-box", classes="dialog"):
            yield Label("serving settings: the engine τ replays (greedy)", classes="dialog-title")
            for name, value, hint in (
                ("steps", str(s.steps), "--speculative-num-steps"),
                ("topk", str(s.topk), "--speculative-eagle-topk (1: a chain)"),
                ("tokens", tokens, "--speculative-num-draft-tokens (a chain: steps + 1)"),
            ):
                with Horizontal(classes="serving-row"):
                    yield Label(name, classes="serving-name")
                    yield Input(value, type="integer", id=f"serving-{name}")
                    yield Label(hint, classes="serving-hint")
            yield Label("", id="serving-error")
            keys = "Enter applies · Esc cancels"
            if self._sweep is not None:
                keys += " · Ctrl+S sweeps the settings (ranked, Enter applies one)"
            yield Label(keys, classes="serving-hint")

    def read(self) -> DraftSpec:
        """The settings typed (InputError when they do not make an engine's settings)."""
        from inspector.errors import InputError
        from inspector.serving.spec import DraftSpec

        values: dict[str, int | None] = {}
        for name in ("steps", "topk", "tokens"):
            text = self.query_one(f"#serving-{name}", Input).value.strip()
            try:
                values[name] = int(text) if text else None
            except ValueError:
                raise InputError(None, name, f"{text!r} is not a number") from None
        if values["steps"] is None:
            raise InputError(None, "steps", "required")
        topk = values["topk"] or 1
        tokens = None if topk == 1 else values["tokens"]  # a chain verifies steps + 1
        return DraftSpec(values["steps"], topk, tokens)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        from inspector.errors import InputError

        try:
            spec = self.read()
        except InputError as e:
            self.query_one("#serving-error", Label).update(printable(str(e)))
            return
        self.close(spec)

    def action_cancel(self) -> None:
        self.close(None)

    def action_sweep(self) -> None:
        if self._sweep is None:
            return

        def chosen(spec: DraftSpec | None) -> None:
            if spec is not None:
                self.close(spec)

        self.app.push_screen(self._sweep(), chosen)
