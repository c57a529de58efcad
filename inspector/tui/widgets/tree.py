"""The draft tree panel (`T`, in place of the slot panel): the tree an engine drafts at the cursor."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inspector.formatting import printable
from inspector.tui.panels import tree_renderable
from inspector.tui.widgets.fixed import FixedSizeStatic

if TYPE_CHECKING:
    from inspector.tui.events import SampleTrees
    from inspector.tui.summary import Summary
    from inspector.tui.view import ViewState

# Before the first layout, when the panel has no size yet.
DEFAULT_WIDTH, DEFAULT_HEIGHT = 36, 15


class TreePanel(FixedSizeStatic):
    BORDER_TITLE = "draft tree"

    def paint(self, session: Summary, v: ViewState, trees: SampleTrees | None, row: int) -> None:
        """Row `row`'s tree (trees None: still being computed); nodes beyond the panel's
        height give way to the sample's path and its alternatives."""
        width = self.content_size.width or DEFAULT_WIDTH
        height = self.content_size.height or DEFAULT_HEIGHT
        self.show(tree_renderable(session, v, trees, row, width, height))

    def failed(self, error: str) -> None:
        self.show(f"no draft tree: {printable(error)}")
