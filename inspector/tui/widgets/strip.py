"""The token strip: a sample's text, one coloured cell per token, drawn with Textual's Line API.

Only the visible lines are rendered, each once (strips are cached per line until the data, the
colouring or the width changes); a cursor move re-renders just the lines it touches. Samples of
thousands of tokens cost a layout pass of one Python loop and nothing per frame.

Under each line of tokens, the rounds line (`set_rounds`, on unless `show_rounds` is off): under
token t, a, what a round whose first drafted token is t accepts under the serving settings, and the
rounds an engine takes through the sample: each round's first token bold, a rule under the tokens
it emits.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.events import Click
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from inspector.formatting import printable
from inspector.tui.view import HIT, IN_ROUND, MISS, NONE, P_BINS, PROMPT, ROUND_START

GAP = -1  # stands for a run of hidden (prompt) tokens when only masked positions are shown
GAP_TEXT = "⋯"
RULE = "─"


def legend(mode: str, rounds: bool) -> str:
    """The strip's key, as Content markup (its bottom border): the colours, then the rounds line's
    digits and rule (the help screen says more)."""
    if mode == "p":
        colours = "colour [$error]p(true) 0[/] → [$success]1[/]"
    else:
        colours = "[$success]hit[/] [$error underline]miss[/] [magenta underline]not in vocab[/] [dim]prompt[/]"
    if not rounds:
        return colours
    return f"{colours} · [$accent bold]2[/]: a round from here accepts 2, ─ its tokens"


class TokenStrip(ScrollView, can_focus=False):
    """Tokens coloured by hit/miss or by p(true); misses also underlined; prompt tokens dimmed."""

    BORDER_TITLE = "tokens"

    COMPONENT_CLASSES = {
        "strip--none",
        "strip--prompt",
        "strip--hit",
        "strip--miss",
        "strip--oov",
        "strip--cursor",
        "strip--gap",
        "strip--message",
        "strip--a",
        "strip--round",
        "strip--in-round",
    }

    class Clicked(Message):
        def __init__(self, token: int) -> None:
            super().__init__()
            self.token = token

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._texts: list[str] = []
        self._ends: list[bool] = []
        self._kind: list[int] = []
        self._pbin: list[int] = []
        self._show: list[bool] = []
        self._sep = ""
        self._cursor: int | None = None
        self.mode = "hit"  # or "p"
        self._message: str | None = "loading…"
        self._a: Sequence[int] | None = None  # per token: a (-1: no round drafts it)
        self._round: Sequence[int] | None = None  # per token: ROUND_START, IN_ROUND or 0
        self.show_rounds = True  # the rounds line under each token line
        self._rows: list[list[int]] = []
        self._row_of: dict[int, int] = {}
        self._layout_width = -1
        self._cache: dict[int, Strip] = {}
        self._styles: dict[str, Style] | None = None
        self._grad: list[Style] = []
        self.border_subtitle = legend(self.mode, self.show_rounds)

    # --- data ----------------------------------------------------------------------------------
    @property
    def cursor(self) -> int | None:
        return self._cursor

    def show_message(self, text: str) -> None:
        """Replace the tokens with one line of text (loading, errors; control characters escaped)."""
        self._message = printable(text)
        self._texts, self._ends, self._kind, self._pbin, self._show = [], [], [], [], []
        self._cursor = None
        self._relayout()

    def set_tokens(
        self,
        texts: Sequence[str],
        ends_line: Sequence[bool],
        kind: Sequence[int],
        pbin: Sequence[int],
        show: Sequence[bool],
        *,
        sep: str = "",
        cursor: int | None = None,
    ) -> None:
        """New sample data and marks (all lists of length T; not copied, not to be mutated).

        The same texts with the same visibility (a wiring change) keep the layout: only the
        colours change, so only the visible lines are redrawn."""
        same_layout = (
            self._message is None
            and texts is self._texts
            and sep == self._sep
            and list(show) == self._show
        )
        self._message = None
        self._texts, self._ends = texts, ends_line  # type: ignore[assignment]
        self._kind, self._pbin, self._show = kind, pbin, show  # type: ignore[assignment]
        self._sep = sep
        self._cursor = cursor
        if same_layout:
            self._cache.clear()
            self.refresh()
        else:
            self._relayout()
        self._scroll_to_cursor()

    def set_rounds(self, a: Sequence[int] | None, rounds: Sequence[int] | None) -> None:
        """The rounds line's data (lists of length T), or None while it is being computed (the
        line stays, blank, so the text does not jump when it comes)."""
        self._a, self._round = a, rounds
        self._cache.clear()
        self.refresh()

    def set_show_rounds(self, on: bool) -> None:
        if on != self.show_rounds:
            self.show_rounds = on
            self.border_subtitle = legend(self.mode, on)
            self._relayout()
            self._scroll_to_cursor()

    @property
    def lines_per_row(self) -> int:
        return 2 if self.show_rounds and self._message is None else 1

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        self.border_subtitle = legend(mode, self.show_rounds)
        self._cache.clear()
        self.refresh()

    def set_cursor(self, token: int | None) -> None:
        old = self._cursor
        self._cursor = token
        k = self.lines_per_row
        for t in (old, token):
            row = self._row_of.get(t) if t is not None else None
            if row is not None:
                for line in range(row * k, row * k + k):
                    self._cache.pop(line, None)
                self.refresh_lines(row * k, k)
        self._scroll_to_cursor()

    # --- layout ----------------------------------------------------------------------------------
    def _item_text(self, t: int) -> str:
        return GAP_TEXT if t == GAP else self._texts[t]

    def _relayout(self) -> None:
        width = max(self.scrollable_content_region.width, 1)
        self._layout_width = width
        self._cache.clear()
        rows: list[list[int]] = []
        row_of: dict[int, int] = {}
        if self._message is None:
            cur: list[int] = []
            x = 0
            sep_w = len(self._sep)
            prev_hidden = False
            for t, text in enumerate(self._texts):
                if not self._show[t]:
                    if prev_hidden:
                        continue
                    prev_hidden = True
                    item, text = GAP, GAP_TEXT
                else:
                    prev_hidden = False
                    item = t
                w = min(cell_len(text), width) + sep_w
                if cur and x + w > width:
                    rows.append(cur)
                    cur, x = [], 0
                if item != GAP:
                    row_of[item] = len(rows)
                cur.append(item)
                x += w
                if item != GAP and self._ends[t]:
                    rows.append(cur)
                    cur, x = [], 0
            if cur:
                rows.append(cur)
        self._rows, self._row_of = rows, row_of
        self.virtual_size = Size(width, max(len(rows) * self.lines_per_row, 1))
        self.refresh()

    def on_resize(self) -> None:
        if self.scrollable_content_region.width != self._layout_width:
            self._relayout()
            self._scroll_to_cursor()

    def _scroll_to_cursor(self) -> None:
        if self._cursor is None:
            return
        row = self._row_of.get(self._cursor)
        if row is None:
            return
        k = self.lines_per_row
        top = self.scroll_offset.y
        height = max(self.scrollable_content_region.height, 1)
        if row * k < top or row * k + k > top + height:
            y = max(0, row - height // (3 * k)) * k
            self.scroll_to(y=y, animate=False, immediate=True)

    # --- rendering -------------------------------------------------------------------------------
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = None
        self._cache.clear()

    def _get_styles(self) -> dict[str, Style]:
        if self._styles is None:
            names = (
                *("none", "prompt", "hit", "miss", "oov", "cursor", "gap", "message"),
                *("a", "round", "in-round"),
            )
            self._styles = {n: self.get_component_rich_style(f"strip--{n}") for n in names}
            lo = self.get_component_styles("strip--miss").color
            hi = self.get_component_styles("strip--hit").color
            base = self.rich_style
            self._grad = [
                base + Style(color=lo.blend(hi, b / (P_BINS - 1)).rich_color) for b in range(P_BINS)
            ]
        return self._styles

    def _token_style(self, t: int, styles: dict[str, Style]) -> Style:
        k = self._kind[t]
        if k == NONE:
            return styles["none"]
        if k == PROMPT:
            return styles["prompt"]
        if self.mode == "p":
            style = self._grad[self._pbin[t]]
            return style + Style(underline=True) if k != HIT else style
        return styles["hit" if k == HIT else "miss" if k == MISS else "oov"]

    def _render_row(self, row: int, width: int) -> Strip:
        styles = self._get_styles()
        base = self.rich_style
        if self._message is not None:
            if row == 0:
                return Strip(
                    [Segment(self._message[:width], styles["message"])]
                ).extend_cell_length(width, base)
            return Strip.blank(width, base)
        if row >= len(self._rows):
            return Strip.blank(width, base)
        segments: list[Segment] = []
        sep = self._sep
        for t in self._rows[row]:
            text = self._item_text(t)
            if cell_len(text) > width:
                text = text[: max(width - 1, 0)] + "…"
            if t == GAP:
                style = styles["gap"]
            else:
                style = self._token_style(t, styles)
                if t == self._cursor:
                    style = style + styles["cursor"]
            segments.append(Segment(text, style))
            if sep:
                segments.append(Segment(sep, base))
        return Strip(segments).adjust_cell_length(width, base)

    def _render_rounds(self, row: int, width: int) -> Strip:
        """The rounds line under token row `row`: each token's a, left in its cells; a rule
        under the tokens a round emits; a round's first token bold."""
        styles = self._get_styles()
        base = self.rich_style
        a, rounds = self._a, self._round
        if row >= len(self._rows) or a is None or rounds is None or len(a) != len(self._texts):
            return Strip.blank(width, base)
        segments: list[Segment] = []
        sep_w = len(self._sep)
        for t in self._rows[row]:
            w = min(cell_len(self._item_text(t)), width) + sep_w
            n = a[t] if t != GAP else -1
            mark = rounds[t] if t != GAP else 0
            fill = RULE if mark else " "
            text = (str(n) if n >= 0 else fill)[:w]
            text += fill * (w - len(text))
            kind = "round" if mark == ROUND_START else "in-round" if mark == IN_ROUND else "a"
            style = styles[kind]
            if t == self._cursor:
                style = style + styles["cursor"]
            segments.append(Segment(text, style))
        return Strip(segments).adjust_cell_length(width, base)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        line = y + scroll_y
        width = self.scrollable_content_region.width
        strip = self._cache.get(line)
        if strip is None or strip.cell_length != width:
            row, sub = divmod(line, self.lines_per_row)
            strip = self._render_rounds(row, width) if sub else self._render_row(row, width)
            self._cache[line] = strip
        return strip.crop(scroll_x, scroll_x + width)

    # --- mouse -----------------------------------------------------------------------------------
    def token_at(self, x: int, y: int) -> int | None:
        row = (y + self.scroll_offset.y) // self.lines_per_row
        if self._message is not None or row >= len(self._rows):
            return None
        pos = 0
        sep_w = len(self._sep)
        for t in self._rows[row]:
            w = cell_len(self._item_text(t)) + sep_w
            if pos <= x < pos + w:
                return None if t == GAP else t
            pos += w
        return None

    def on_click(self, event: Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        t = self.token_at(offset.x, offset.y)
        if t is not None:
            self.post_message(self.Clicked(t))
