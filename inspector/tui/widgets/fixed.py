"""A Static whose size comes from the stylesheet, never from its content."""

from __future__ import annotations

from rich.text import Text
from textual.visual import VisualType
from textual.widgets import Static


class FixedSizeStatic(Static):
    """Repaints without a layout pass. Static.update re-lays out the whole screen by default,
    which every key press paid for (a reflow of all panels and a full-screen render, about half
    of a cursor move's time); panels sized by `width`/`height` rules do not need it."""

    _shown: object = None

    def show(self, content: VisualType) -> None:
        # An unchanged Text is not repainted: a repaint's region joins the frame's others into
        # one box, and a header repainted on every key press made that box the whole screen,
        # the sample list included (30 ms a frame to re-render while the fill updates it).
        if isinstance(content, Text) and content == self._shown:
            return
        self._shown = content
        self.update(content, layout=False)
