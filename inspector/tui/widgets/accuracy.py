"""The accuracy bar: per shown wiring this sample's and the set's accuracy and τ, the flips."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import Static

from inspector.tui.accuracy import accuracy_text, accuracy_title

if TYPE_CHECKING:
    from inspector.tui.state import ViewModel

MIN_WIDTH = 20


class AccuracyBar(Static):
    BORDER_TITLE = "accuracy"  # until loaded; then the view and what τ replays
    _shown: Text | None = None

    def paint(
        self, st: ViewModel, *, metrics: str, narrow: bool, looking: str | None = None
    ) -> None:
        """The bar for the state's wirings in view `metrics` (state.METRICS); nothing changes
        before a session and a wiring. `looking`: how far the search for the trained wiring got,
        while it runs."""
        title = accuracy_title(metrics, st.serving)
        if self.border_title != title:
            self.border_title = title
        width = max(self.content_size.width, MIN_WIDTH)
        text = accuracy_text(st, metrics=metrics, narrow=narrow, width=width, looking=looking)
        if text is None or text == self._shown:
            return
        # Its height follows its lines: lay the screen out again only when their count changes.
        relayout = self._shown is None or text.plain.count("\n") != self._shown.plain.count("\n")
        self._shown = text
        self.update(text, layout=relayout)
