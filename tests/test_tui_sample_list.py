"""The sample list widget on its own (no device, no session): what it shows, that an update
re-renders only its own line, that its memory stays bounded on 10^5 samples, keys and mouse."""

from __future__ import annotations

import tracemalloc

from textual import events
from textual.app import App, ComposeResult

from inspector.tui.widgets.samples import STRIP_CACHE, SampleList

SIZE = (60, 20)  # the list: 31 wide (29 inside the border), 18 lines inside (a header + 17)
VISIBLE = 17


class ListApp(App):
    CSS = (
        "SampleList { width: 31; height: 1fr; border: round $primary; scrollbar-size-vertical: 1; }"
    )

    def __init__(self) -> None:
        super().__init__()
        self.got: list[tuple[str, object]] = []

    def compose(self) -> ComposeResult:
        yield SampleList(id="samples")

    def on_sample_list_selected(self, m: SampleList.Selected) -> None:
        self.got.append(("selected", m.sample))

    def on_sample_list_highlighted(self, m: SampleList.Highlighted) -> None:
        self.got.append(("highlighted", m.sample))

    def on_sample_list_header_clicked(self, m: SampleList.HeaderClicked) -> None:
        self.got.append(("header", m.column))


def fill(lst: SampleList, n: int) -> None:
    lst.set_samples(n)
    for i in range(n):
        lst.set_values(i, length=100 + i, cur=0.5 + 0.01 * (i % 7), ref=0.53, has_ref=True)


def spy_lines(lst: SampleList) -> list[int]:
    """The lines Textual asks the widget to render from now on."""
    calls: list[int] = []
    render = lst.render_line

    def spy(y: int):
        calls.append(y)
        return render(y)

    lst.render_line = spy  # type: ignore[method-assign]
    return calls


def segment_at(lst: SampleList, y: int, column: int):
    """The segment of cell `column` on line y (one segment per cell, then the padding)."""
    return list(lst.render_line(y))[column]


async def test_cells_and_their_styles():
    app = ListApp()
    async with app.run_test(size=SIZE) as pilot:
        lst = app.query_one(SampleList)
        lst.set_samples(5)
        assert lst.row_cells(0) == (" ", "0", "?", "…", "", "")  # nothing known yet
        lst.set_values(1, length=120, cur=0.60, ref=0.62, has_ref=True)  # a drop: red
        lst.set_values(2, length=130, cur=0.64, ref=0.62, has_ref=True)  # a gain: green
        lst.set_values(3, length=140, cur=0.6203, ref=0.62, has_ref=True)  # within 0.05 points
        lst.set_values(4, error="bad file")
        lst.set_values(4, length=7, cur=0.9)  # an error stays; a length still arrives
        await pilot.pause()
        assert lst.row_cells(1) == (" ", "1", "120", "60.0", "62.0", "-2.0")
        assert lst.row_cells(2)[5] == "+2.0" and lst.row_cells(3)[5] == "+0.0"
        assert lst.row_cells(4) == ("✗", "4", "7", "error", "", "")
        lines = [lst.render_line(y) for y in range(6)]
        titles = [" ", "   #", "  pos", "  cur%", "  ref%", "     Δ"]
        assert [s.text for s in list(lines[0])[:6]] == titles
        assert [s.text for s in list(lines[2])[:6]] == [
            " ",
            "   1",
            "  120",
            "  60.0",
            "  62.0",
            "  -2.0",
        ]
        assert segment_at(lst, 2, 5).style.color.name == "red"
        assert segment_at(lst, 3, 5).style.color.name == "green"
        assert segment_at(lst, 4, 5).style.color.name != "red"
        assert segment_at(lst, 4, 5).style.color.name != "green"
        err, pending = segment_at(lst, 5, 0).style, segment_at(lst, 1, 3).style
        assert err.bold and err.color.name == "red" and segment_at(lst, 5, 3).text == " error"
        assert pending.dim and segment_at(lst, 1, 2).style.dim  # "…" and "?" are dim
        lst.set_values(1, length=120, cur=0.60, ref=None, has_ref=False)  # the pin is gone
        assert lst.row_cells(1)[4:] == ("", "")
        lst.clear_error(4)  # a retry worked: pending again
        assert lst.row_cells(4) == (" ", "4", "7", "…", "", "")


async def test_an_update_re_renders_its_line_only():
    app = ListApp()
    async with app.run_test(size=SIZE) as pilot:
        lst = app.query_one(SampleList)
        fill(lst, 50)
        await pilot.pause()
        lines = spy_lines(lst)
        built = lst.strips_built
        lst.set_values(3, length=103, cur=0.9, ref=0.53, has_ref=True)
        await pilot.pause()
        assert lines == [4] and lst.strips_built == built + 1  # the header is line 0
        assert lst.row_cells(3)[3] == "90.0"
        # Unchanged values, or a sample out of view: nothing is rendered.
        lines.clear()
        lst.set_values(3, length=103, cur=0.9, ref=0.53, has_ref=True)
        lst.set_values(40, length=140, cur=0.1, ref=0.53, has_ref=True)
        await pilot.pause()
        assert lines == [] and lst.strips_built == built + 1
        # A cursor move renders the two lines it touches.
        lst.show_sample(5)
        await pilot.pause()
        assert sorted(lines) == [1, 6] and lst.cursor_row == 5 and lst.cursor_sample == 5
        assert ("highlighted", 5) in app.got


async def test_ten_to_the_five_samples_stay_bounded():
    n = 100_000
    app = ListApp()
    async with app.run_test(size=SIZE) as pilot:
        lst = app.query_one(SampleList)
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            fill(lst, n)
            grown = sum(
                s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename")
            )
        finally:
            tracemalloc.stop()
        assert grown < 6 * 2**20, grown  # flat arrays: ~30 bytes a sample
        await pilot.pause()
        largest = 0
        for top in range(0, n, 997):  # scroll through, every line of each view rendered
            lst.scroll_to(y=top, animate=False, force=True)
            for y in range(VISIBLE + 1):
                lst.render_line(y)
            largest = max(largest, len(lst.strips))
        assert largest <= STRIP_CACHE
        assert [s.text for s in list(lst.render_line(0))[:2]] == [" ", "   #"]  # the header
        lst.cycle_sort(n - 1, mode=2)  # lowest current accuracy first; the cursor keeps n-1
        await pilot.pause()
        assert lst.cursor_sample == n - 1 and lst.border_title == "samples · cur"
        curs = [float(lst.cells_at(r)[3]) for r in range(0, n, 1000)]
        assert curs == sorted(curs)
        # the sort scrolled the cursor's row into view: between the first and the last shown
        top = round(lst.scroll_y)
        assert top <= lst.cursor_row < top + VISIBLE, (top, lst.cursor_row)
        y = lst.cursor_row - top + 1  # its line, under the header
        first = lst.render_line(y)
        built = lst.strips_built
        assert lst.render_line(y) is first and lst.strips_built == built  # served from the cache


async def test_keys_and_mouse():
    app = ListApp()
    async with app.run_test(size=SIZE) as pilot:
        lst = app.query_one(SampleList)
        fill(lst, 100)
        lst.focus()
        await pilot.pause()
        await pilot.press("down", "down")
        assert lst.cursor_row == 2
        await pilot.press("pagedown")
        assert lst.cursor_row == 2 + VISIBLE and round(lst.scroll_y) == VISIBLE
        await pilot.press("pageup", "up", "up")
        assert lst.cursor_row == 0 and lst.scroll_y == 0
        await pilot.press("end")
        assert lst.cursor_row == 99 and round(lst.scroll_y) == 100 - VISIBLE
        await pilot.press("home", "enter")
        assert lst.cursor_row == 0 and app.got[-1] == ("selected", 0)
        await pilot.click(SampleList, offset=(15, 1))  # border, then the cur% title
        assert app.got[-1] == ("header", "cur")
        await pilot.click(SampleList, offset=(3, 4))  # the third line: the cursor moves
        assert lst.cursor_row == 2 and app.got[-1] == ("highlighted", 2)
        await pilot.click(SampleList, offset=(3, 4))  # again: selected
        assert app.got[-1] == ("selected", 2)
        lst.post_message(events.MouseScrollDown(lst, 3, 4, 0, 1, 0, False, False, False))
        await pilot.pause()
        assert lst.scroll_y > 0 and lst.cursor_row == 2  # the wheel scrolls, the cursor stays
