"""The wiring editor (`w`): pick the slot that feeds each fc block, or a preset."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Label, Static

from inspector.formatting import fmt_float, printable
from inspector.tui.screens.dialogs import Dialog
from inspector.wiring import WiringKey

if TYPE_CHECKING:
    from inspector.tui.summary import Summary


class WiringEditor(Dialog[WiringKey | None]):
    """↑/↓ choose the fc block, ←/→ (or a digit) its slot, t/s presets, Enter applies."""

    BINDINGS = [
        Binding("up,k", "block(-1)", "block", show=False),
        Binding("down,j", "block(1)", "block", show=False),
        Binding("left,h", "slot(-1)", "slot", show=False),
        Binding("right,l", "slot(1)", "slot", show=False),
        Binding("t", "preset('train')", "train"),
        Binding("s", "preset('serve')", "serve"),
        Binding("enter", "apply", "apply", priority=True),
        Binding("escape", "cancel", "cancel"),
    ] + [Binding(str(d), f"pick({d})", show=False) for d in range(10)]

    def __init__(self, session: Summary, wiring: WiringKey) -> None:
        super().__init__()
        self.session = session
        self.choice = list(wiring)
        self.original = tuple(wiring)
        self.block = 0

    def compose(self) -> ComposeResult:
        with Vertical(id="wiring-box", classes="dialog"):
            yield Label("wiring: which captured slot feeds each fc block", id="wiring-title")
            yield Static(id="wiring-grid")
            yield Label(
                "↑↓ block  ←→ or 0-9 slot  t train  s serve  Enter apply  Esc cancel",
                id="wiring-keys",
            )
            with Horizontal(id="wiring-buttons"):
                yield Button("apply", id="apply", variant="primary")
                yield Button("cancel", id="cancel")

    def on_mount(self) -> None:
        self._paint()

    def _paint(self) -> None:
        s = self.session
        table = Table(box=None, show_header=True, header_style="bold", padding=(0, 1))
        table.add_column("", no_wrap=True)
        table.add_column("fc block", no_wrap=True)
        table.add_column("|W_b|", justify="right", no_wrap=True)
        table.add_column("slot (HF index)", no_wrap=True)
        for b in range(s.n_blocks):
            line = Text()
            for i, info in enumerate(s.slot_info):
                hf = "" if info.hf_index is None else f" {info.hf_index}"
                cell = f" {i}:{info.label}{hf} "
                if i == self.choice[b]:
                    line.append(cell, style="reverse bold" if b == self.block else "bold underline")
                else:
                    line.append(cell, style="dim")
            norm = s.fc_norms[b] if b < len(s.fc_norms) else float("nan")
            table.add_row("▶" if b == self.block else " ", f"b{b}", fmt_float(norm), line)
        w = tuple(self.choice)
        summary = Text(f"fc ← {s.wiring_label(w)}")
        name = s.preset_name(w)
        if name:
            summary.append(f"  ({name})", style="bold")
        if w != self.original:
            summary.append("  (changed)", style="italic")
        from rich.console import Group

        self.query_one("#wiring-grid", Static).update(Group(table, Text(), summary))

    def action_block(self, d: int) -> None:
        self.block = (self.block + d) % self.session.n_blocks
        self._paint()

    def action_slot(self, d: int) -> None:
        n = len(self.session.slot_info)
        self.choice[self.block] = (self.choice[self.block] + d) % n
        self._paint()

    def action_pick(self, i: int) -> None:
        if 0 <= i < len(self.session.slot_info):
            self.choice[self.block] = i
            self._paint()

    def action_preset(self, name: str) -> None:
        w = self.session.presets.get(name)
        if w is None:
            error = self.session.preset_errors.get(name, f"no {name} preset")
            self.notify(printable(error), severity="error", markup=False)
            return
        self.choice = list(w)
        self._paint()

    def action_apply(self) -> None:
        self.close(tuple(self.choice))

    def action_cancel(self) -> None:
        self.close(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply":
            self.action_apply()
        else:
            self.action_cancel()
