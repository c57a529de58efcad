"""The sparkline under the strip: p(true) of every position (loss-masked ones only, if so shown)."""

from __future__ import annotations

from statistics import fmean
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Sparkline, Static

if TYPE_CHECKING:
    from inspector.tui.view import ViewState


class PTrueSpark(Horizontal):
    """A label and the sparkline, in one row."""

    def compose(self) -> ComposeResult:
        yield Static("p(true)", id="spark-label")
        yield Sparkline([], id="spark", summary_function=fmean)

    def paint(self, v: ViewState, *, mask_only: bool) -> None:
        import numpy as np

        p = np.nan_to_num(v.s0.p_true.astype(np.float64), nan=0.0)
        if mask_only and len(v.masked_rows):
            p = p[v.masked_rows]
        self.query_one(Sparkline).data = p.tolist() or [0.0]
