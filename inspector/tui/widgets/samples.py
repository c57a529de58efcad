"""The sample list: index, positions, all-tok accuracy under the current and the reference wiring, Δ.

A Line API widget (`ScrollView.render_line`): a fixed header line, then one line per sample in the
sort's order. The values live in flat arrays (10^5 samples cost a few MB, no object per cell);
each line is rendered from them into a Strip kept in a small LRU keyed by what the line shows (the
sample's values, the width, cursor and hover), so an update repaints that one line only, and a
cursor move the two lines it touches. (Textual's DataTable re-rendered every visible row on any
cell update: 50-60 ms a frame during the fill, which key presses waited for.)
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from inspector.tui.widgets.sample_rows import (
    COLUMNS,
    HEADER,
    SORTS,
    TABLE_WIDTH,
    Cell,
    SampleRows,
)

if TYPE_CHECKING:
    from inspector.tui.state import ListRow

STRIP_CACHE = 256  # rendered lines kept: a few screens' worth, whatever the number of samples
# One segment per cell, each with its column in its style (as DataTable's): screenshots merge
# neighbouring segments of equal style, and this keeps the cells apart as they were.
CELL_META = tuple(Style.from_meta({"column": c}) for c in range(len(COLUMNS)))
END_META = Style.from_meta({"column": len(COLUMNS)})


class StripCache:
    """A bounded LRU of rendered lines."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._d: OrderedDict[tuple, Strip] = OrderedDict()

    def __len__(self) -> int:
        return len(self._d)

    def get(self, key: tuple) -> Strip | None:
        strip = self._d.get(key)
        if strip is not None:
            self._d.move_to_end(key)
        return strip

    def put(self, key: tuple, strip: Strip) -> None:
        self._d[key] = strip
        if len(self._d) > self.maxsize:
            self._d.popitem(last=False)

    def clear(self) -> None:
        self._d.clear()


class SampleList(ScrollView, can_focus=True):
    """One line per sample file; a sample's line changes in place as its metrics arrive."""

    ALLOW_SELECT = False
    BORDER_TITLE = "samples"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("up", "cursor(-1)", "Cursor up", show=False),
        Binding("down", "cursor(1)", "Cursor down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,ctrl+home", "edge(False)", "Top", show=False),
        Binding("end,ctrl+end", "edge(True)", "Bottom", show=False),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "sample-list--header",
        "sample-list--header-hover",
        "sample-list--cursor",
        "sample-list--hover",
    }
    # DataTable's default look, which this list had before.
    DEFAULT_CSS = """
    SampleList {
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .sample-list--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .sample-list--header {
                background-tint: $foreground 5%;
            }
        }
        & > .sample-list--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .sample-list--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .sample-list--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .sample-list--header-hover {
            background: $accent 30%;
        }
        & > .sample-list--hover {
            background: $block-hover-background;
        }
    }
    """

    class _FromList(Message):
        """A message of this list (`control` is the list, as Textual's own widgets' are)."""

        def __init__(self, sample_list: SampleList) -> None:
            super().__init__()
            self.sample_list = sample_list

        @property
        def control(self) -> SampleList:
            return self.sample_list

    class Selected(_FromList):
        """A sample chosen (Enter, or a click on the cursor's line): show it."""

        def __init__(self, sample_list: SampleList, sample: int) -> None:
            super().__init__(sample_list)
            self.sample = sample

    class Highlighted(_FromList):
        """The cursor moved onto another sample (not selected)."""

        def __init__(self, sample_list: SampleList, sample: int) -> None:
            super().__init__(sample_list)
            self.sample = sample

    class HeaderClicked(_FromList):
        """A click on a column title; `column` is its key (COLUMNS, COLUMN_SORTS)."""

        def __init__(self, sample_list: SampleList, column: str) -> None:
            super().__init__(sample_list)
            self.column = column

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.sort_mode = 0
        self.rows = SampleRows()
        self._cursor = 0  # the cursor's line
        self._hover: int | None = None  # the line under the mouse (-1: the header)
        self._hover_shown = False  # keys hide the hover mark until the mouse moves
        self.strips = StripCache(STRIP_CACHE)
        self.strips_built = 0  # lines rendered (the cache's misses), for tests
        self._look: tuple | None = None  # what the cached strips were styled under
        self._styles: dict[tuple[bool, bool, bool], tuple[Style, Style]] = {}

    # --- the data ------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.rows.n

    def set_samples(self, n: int) -> None:
        self.rows = SampleRows(n)
        self._cursor = 0
        self._hover = None
        self.strips.clear()
        self.virtual_size = Size(TABLE_WIDTH, n + 1)
        self.scroll_to(0, 0, animate=False, force=True)
        self.refresh()

    def set_values(
        self,
        i: int,
        *,
        length: int | None = None,
        cur: float | None = None,
        ref: float | None = None,
        has_ref: bool = False,
        error: str | None = None,
    ) -> None:
        """Update sample i's line if it changed (None keeps a length, clears an accuracy)."""
        rows = self.rows
        if not 0 <= i < rows.n:
            return
        changed = error is not None and rows.set_error(i, error)
        if rows.update(i, length, cur, ref, has_ref) or changed:
            self._refresh_line(rows.line[i])

    def show_row(self, i: int, r: ListRow | None) -> None:
        """Sample i's line from the state (`ViewModel.list_row`; None: no wiring yet)."""
        if r is not None:
            self.set_values(i, length=r.length, cur=r.cur, ref=r.ref, has_ref=r.has_ref)

    def clear_error(self, i: int) -> None:
        if 0 <= i < self.rows.n and self.rows.clear_error(i):
            self._refresh_line(self.rows.line[i])

    def row_cells(self, i: int) -> tuple[str, ...]:
        """The texts of sample i's line (as rendered, before alignment)."""
        return tuple(text for text, _ in self.rows.cells(i))

    def cells_at(self, line: int) -> tuple[str, ...]:
        """The texts of the `line`-th line under the header (the sort's order)."""
        return self.row_cells(self.rows.order[line])

    @property
    def row_count(self) -> int:
        return self.n

    def sample_at(self, line: int) -> int:
        return self.rows.order[line]

    @property
    def cursor_row(self) -> int:
        """The cursor's line (0: the first under the header)."""
        return self._cursor

    @property
    def cursor_sample(self) -> int | None:
        return self.rows.order[self._cursor] if self.n else None

    # --- sorting -------------------------------------------------------------------------------
    def cycle_sort(self, current: int, mode: int | None = None) -> str:
        """Sort by the next mode (or by `mode`), keep sample `current` under the cursor; returns
        the sort's description."""
        self.sort_mode = (self.sort_mode + 1) % len(SORTS) if mode is None else mode
        self.apply_sort(current)
        name, desc = SORTS[self.sort_mode]
        self.border_title = f"samples · {name}"
        return desc

    def apply_sort(self, current: int | None = None) -> None:
        """Reorder the lines by the sort mode; the cursor stays on its line unless `current`
        is given (then it moves to that sample's)."""
        self.rows.sort(self.sort_mode)
        self.refresh()
        if current is not None:
            self.show_sample(current)

    # --- the cursor ----------------------------------------------------------------------------
    def show_sample(self, i: int) -> None:
        """Move the cursor to sample i (without selecting it)."""
        if 0 <= i < self.n:
            self.move_cursor(self.rows.line[i])

    def move_cursor(self, line: int, *, scroll: bool = True) -> None:
        """The cursor to a line (clamped), scrolled into view."""
        if not self.n:
            return
        line = max(0, min(self.n - 1, line))
        old, self._cursor = self._cursor, line
        if old != line:
            self._refresh_line(old)
            self._refresh_line(line)
            self.post_message(self.Highlighted(self, self.rows.order[line]))
        if scroll:
            self.scroll_to_cursor()

    def scroll_to_cursor(self) -> None:
        """The least scroll that shows the cursor's line under the header."""
        rows = self.scrollable_content_region.height - 1
        if rows <= 0 or not self.n:
            return
        top = round(self.scroll_y)
        if self._cursor < top:
            self.scroll_to(y=self._cursor, animate=False, force=True)
        elif self._cursor >= top + rows:
            self.scroll_to(y=self._cursor - rows + 1, animate=False, force=True)

    def on_resize(self) -> None:
        self.scroll_to_cursor()

    def _show_hover(self, on: bool) -> None:
        if self._hover_shown != on:
            self._hover_shown = on
            if self._hover is not None:
                self._refresh_line(self._hover)

    def action_cursor(self, delta: int) -> None:
        self._show_hover(False)
        self.move_cursor(self._cursor + delta)

    def action_page(self, direction: int) -> None:
        """A page down (1) or up (-1): the view and the cursor move by the lines shown."""
        self._show_hover(False)
        rows = max(1, self.scrollable_content_region.height - 1)
        self.scroll_relative(y=direction * rows, animate=False, force=True)
        self.move_cursor(self._cursor + direction * rows)

    def action_edge(self, last: bool) -> None:
        self._show_hover(False)
        self.move_cursor(self.n - 1 if last else 0)

    def action_select_cursor(self) -> None:
        self._show_hover(False)
        if self.n:
            self.post_message(self.Selected(self, self.rows.order[self._cursor]))

    # --- the mouse -----------------------------------------------------------------------------
    def _line_at(self, event: events.MouseEvent) -> tuple[int | None, int]:
        """(line under the pointer: -1 the header, None outside the lines; content x)."""
        offset = event.get_content_offset(self)
        if offset is None:
            return None, 0
        x = offset.x + round(self.scroll_x)
        if offset.y == 0:
            return -1, x
        line = offset.y - 1 + round(self.scroll_y)
        return (line if 0 <= line < self.n else None), x

    def on_mouse_move(self, event: events.MouseMove) -> None:
        line, _ = self._line_at(event)
        old, self._hover = self._hover, line
        shown, self._hover_shown = self._hover_shown, True
        if old != line or not shown:
            for y in (old, line):
                if y is not None:
                    self._refresh_line(y)

    def on_leave(self) -> None:
        self._show_hover(False)

    def on_click(self, event: events.Click) -> None:
        self._show_hover(True)
        line, x = self._line_at(event)
        if line == -1:
            column = self._column_at(x)
            if column is not None:
                self.post_message(self.HeaderClicked(self, column))
        elif line is not None:
            event.stop()
            if line == self._cursor:
                self.post_message(self.Selected(self, self.rows.order[line]))
            else:
                self.move_cursor(line)

    @staticmethod
    def _column_at(x: int) -> str | None:
        for key, _, width in COLUMNS:
            if x < width:
                return key
            x -= width
        return None

    # --- rendering -----------------------------------------------------------------------------
    def _refresh_line(self, line: int) -> None:
        """Repaint one line (-1: the header) if it is in view."""
        y = 0 if line < 0 else line + 1 - round(self.scroll_y)
        if (line < 0 or y >= 1) and y < self.size.height:
            self.refresh(Region(0, y, self.size.width, 1))

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._look = None

    def render_lines(self, crop: Region) -> list[Strip]:
        look = (self.rich_style, self.get_pseudo_class_state())
        if look != self._look:  # focus, theme or stylesheet changed: new colours everywhere
            self._look = look
            self._styles.clear()
            self.strips.clear()
        return super().render_lines(crop)

    def _line_styles(self, header: bool, cursor: bool, hover: bool) -> tuple[Style, Style]:
        """(under every cell, over every cell) of a line: DataTable's composition with
        cursor_foreground_priority="css" (the cursor's colour wins over a cell's own)."""
        key = (header, cursor, hover)
        styles = self._styles.get(key)
        if styles is None:
            get = self.get_component_rich_style
            base = get("sample-list--header") if header else self.rich_style
            component = Style()
            if hover:
                component += get("sample-list--hover")
                if header:
                    component += get("sample-list--header-hover")
            if cursor:
                component += get("sample-list--cursor")
            styles = self._styles[key] = (base + component, Style.from_color(component.color))
        return styles

    def _strip(self, cells: tuple[Cell, ...], styles: tuple[Style, Style], width: int) -> Strip:
        under, over = styles
        segments = []
        for (text, style), (_, _, w), meta in zip(cells, COLUMNS, CELL_META, strict=True):
            n = cell_len(text)
            text = " " * (w - n) + text if n <= w else text[:w]
            cell = under + style + over if style else under + over
            segments.append(Segment(text, cell + meta))
        segments.append(Segment(" " * max(0, width - TABLE_WIDTH), under + END_META))
        self.strips_built += 1
        strip = Strip(segments)
        if width < TABLE_WIDTH or self.scroll_x:
            x = round(self.scroll_x)
            strip = strip.crop(x, x + width).adjust_cell_length(width, self.rich_style)
        return strip

    def render_line(self, y: int) -> Strip:
        """Line y of the widget: the header (y 0, never scrolled), then the sort's lines."""
        width, scroll_x = self.size.width, round(self.scroll_x)
        line = -1 if y == 0 else y - 1 + round(self.scroll_y)
        if not -1 <= line < self.n:
            return Strip.blank(width, self.rich_style)
        i = -1 if line < 0 else self.rows.order[line]
        cursor = line == self._cursor
        hover = self._hover_shown and line == self._hover
        values = self.rows.values(i) if i >= 0 else ()
        key = (i, *values, width, scroll_x, cursor, hover)
        strip = self.strips.get(key)
        if strip is None:
            cells = HEADER if i < 0 else self.rows.cells(i)
            strip = self._strip(cells, self._line_styles(i < 0, cursor, hover), width)
            self.strips.put(key, strip)
        return strip
