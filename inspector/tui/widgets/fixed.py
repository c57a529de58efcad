"""A Static whose size comes from the stylesheet, never from its content."""

from __future__ import annotations

from textual.visual import VisualType
from textual.widgets import Static


class FixedSizeStatic(Static):
    """Repaints without a layout pass. Static.update re-lays out the whole screen by default,
    which every key press paid for (a reflow of all panels and a full-screen render, about half
    of a cursor move's time); panels sized by `width`/`height` rules do not need it."""

    def show(self, content: VisualType) -> None:
        self.update(content, layout=False)
