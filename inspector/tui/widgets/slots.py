"""The slot panel: per captured slot, its norm at the cursor and its mean, the fc blocks it feeds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inspector.tui.panels import slots_renderable
from inspector.tui.widgets.fixed import FixedSizeStatic

if TYPE_CHECKING:
    from inspector.tui.summary import Summary
    from inspector.tui.view import ViewState


class SlotPanel(FixedSizeStatic):
    BORDER_TITLE = "slots"

    def paint(self, session: Summary, v: ViewState, row: int) -> None:
        self.show(slots_renderable(session, v, row))

    def clear(self) -> None:
        self.show("")
