"""The sample on screen: the token strip, the p(true) sparkline, and under them the position panel
beside the slot panel or the draft tree. One widget, so the screen tells it what changed (the
view, the cursor, the rounds, the tree) and it repaints the panels that show it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical

from inspector.tui.widgets.position import PositionPanel
from inspector.tui.widgets.slots import SlotPanel
from inspector.tui.widgets.spark import PTrueSpark
from inspector.tui.widgets.strip import TokenStrip
from inspector.tui.widgets.tree import TreePanel

if TYPE_CHECKING:
    from inspector.tui.state import ViewModel


class SampleView(Vertical):
    def compose(self) -> ComposeResult:
        self.strip = TokenStrip(id="strip")
        self.spark = PTrueSpark(id="spark-row")
        self.position = PositionPanel(id="detail")
        self.slot_panel = SlotPanel(id="slots")
        self.tree_panel = TreePanel(id="tree")
        yield self.strip
        yield self.spark
        with Horizontal(id="lower"):
            yield self.position
            yield self.slot_panel
            yield self.tree_panel

    def paint(self, st: ViewModel, *, colour: str, mask_only: bool, tree: bool) -> bool:
        """Everything that shows the view (not only the cursor); False when there is none."""
        from inspector.tui.view import strip_marks

        v = st.view
        if v is None or st.session is None:
            return False
        kind, pbin, show = strip_marks(v, mask_only)
        self.strip.mode = colour
        sep = "" if st.session.decoder.has_text else " "
        self.strip.set_tokens(
            v.data.texts, v.data.ends_line, kind, pbin, show, sep=sep, cursor=(st.row or 0) + 2
        )
        self.paint_rounds(st)
        self.spark.paint(v, mask_only=mask_only)
        self.paint_cursor(st, tree=tree)
        return True

    def paint_rounds(self, st: ViewModel) -> None:
        """The strip's rounds line: the current wiring's replay under the current settings."""
        from inspector.tui.view import round_marks

        v = st.view
        if v is None:
            return
        marks = round_marks(st.current_accept(), v.data.length)
        self.strip.set_rounds(*(marks or (None, None)))

    def paint_cursor(self, st: ViewModel, *, tree: bool) -> bool:
        """The cursor: its mark in the strip, the position and slot panels, the tree panel;
        False when there is no view."""
        v, row = st.view, st.row
        if v is None or row is None or st.session is None:
            return False
        self.strip.set_cursor(row + 2)
        self.position.paint(st.session, v, row)
        self.slot_panel.paint(st.session, v, row)
        self.paint_tree(st, tree=tree)
        return True

    def paint_tree(self, st: ViewModel, *, tree: bool) -> None:
        """The tree panel at the cursor, when it is open."""
        v, row, key = st.shown, st.row, st.trees_key()
        if not tree or v is None or row is None or st.session is None or key is None:
            return
        self.tree_panel.paint(st.session, v, st.trees.get(key), row)

    def show_tree(self, on: bool) -> None:
        """The tree panel in place of the slot panel, or the slot panel again."""
        self.tree_panel.display = on
        self.slot_panel.display = not on

    def show_failed(self, text: str) -> None:
        """No view of this sample: the reason in the strip, the panels under it empty."""
        self.strip.show_message(text)
        self.position.clear()
        self.slot_panel.clear()
