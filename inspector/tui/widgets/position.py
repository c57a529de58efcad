"""The position panel: the cursor's tokens, hit or miss, p, the top-10, TTT steps and pins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inspector.tui.panels import detail_renderable
from inspector.tui.widgets.fixed import FixedSizeStatic

if TYPE_CHECKING:
    from inspector.tui.summary import Summary
    from inspector.tui.view import ViewState

DEFAULT_WIDTH = 48  # before the first layout, when the panel has no width yet


class PositionPanel(FixedSizeStatic):
    BORDER_TITLE = "position"

    def paint(self, session: Summary, v: ViewState, row: int) -> None:
        """Row `row` of the view; token texts shrink to the panel's width, numbers never do."""
        width = self.content_size.width or DEFAULT_WIDTH
        self.show(detail_renderable(session, v, row, width))

    def clear(self) -> None:
        self.show("")
