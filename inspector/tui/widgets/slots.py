"""The slot panel: per captured slot, its norm at the cursor and its mean, the fc blocks it feeds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Static

from inspector.tui.panels import slots_renderable

if TYPE_CHECKING:
    from inspector.tui.summary import Summary
    from inspector.tui.view import ViewState


class SlotPanel(Static):
    BORDER_TITLE = "slots"

    def paint(self, session: Summary, v: ViewState, row: int) -> None:
        self.update(slots_renderable(session, v, row))

    def clear(self) -> None:
        self.update("")
