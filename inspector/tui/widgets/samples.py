"""The sample list: index, length, all-tok accuracy under the current and the reference wiring, Δ."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import DataTable

from inspector.formatting import pct

if TYPE_CHECKING:
    from inspector.tui.state import ListRow

SORTS = (
    ("#", "index"),
    ("len", "length, longest first"),
    ("cur", "current-wiring accuracy, lowest first"),
    ("ref", "reference accuracy, lowest first"),
    ("Δ", "cur − ref, largest drop first"),
)
COLUMN_SORTS = {"idx": 0, "len": 1, "cur": 2, "ref": 3, "delta": 4}  # column key -> sort mode


class SampleList(DataTable):
    """One row per sample file; cells change in place as per-sample metrics arrive."""

    BORDER_TITLE = "samples"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False, cell_padding=0)
        # DataTable keys its render caches by a counter that every cell update bumps, so during the
        # fill they fill up with renders no frame reads again (10^4 cells, 10^3 rows and lines: some
        # 10^5 objects). They live long enough to reach the collector's oldest generation, and every
        # full collection, which holds the GIL, traversed them: 0.1-0.15 s on a loaded machine,
        # several times a minute, each one a stalled key press. A few screens' worth is plenty.
        self._cell_render_cache.maxsize = 2000
        self._row_render_cache.maxsize = 400
        self._row_renderable_cache.maxsize = 400
        self._line_cache.maxsize = 400
        self.sort_mode = 0
        self.n = 0
        # Per sample: (length | None, cur acc | None, ref acc | None, error | None)
        self._vals: dict[int, list] = {}

    def on_mount(self) -> None:
        self.add_column(" ", key="st", width=1)
        self.add_column(Text("#", justify="right"), key="idx", width=4)
        self.add_column(Text("len", justify="right"), key="len", width=5)
        self.add_column(Text("cur%", justify="right"), key="cur", width=6)
        self.add_column(Text("ref%", justify="right"), key="ref", width=6)
        self.add_column(Text("Δ", justify="right"), key="delta", width=6)

    def set_samples(self, n: int) -> None:
        self.clear()
        self.n = n
        self._vals = {i: [None, None, None, None] for i in range(n)}
        for i in range(n):  # the row key is the sample index, stable under sorting
            self.add_row(
                " ",
                Text(str(i), justify="right"),
                Text("?", style="dim", justify="right"),
                Text("…", style="dim", justify="right"),
                "",
                "",
                key=str(i),
            )

    @staticmethod
    def _pct(x: float | None) -> Text:
        return Text(
            "…" if x is None else pct(x, suffix=""),
            justify="right",
            style="dim" if x is None else "",
        )

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
        """Update the cells of sample i that changed (None keeps a length, clears an accuracy)."""
        if i not in self._vals:
            return
        vals = self._vals[i]
        key = str(i)
        if length is not None and vals[0] != length:
            vals[0] = length
            self.update_cell(key, "len", Text(str(length), justify="right"))
        if error is not None and vals[3] is None:
            vals[3] = error
            self.update_cell(key, "st", Text("✗", style="bold red"))
            self.update_cell(key, "cur", Text("error", style="bold red", justify="right"))
            self.update_cell(key, "ref", "")
            self.update_cell(key, "delta", "")
            return
        if vals[3] is not None:
            return
        if vals[1] != cur or vals[2] != ref:
            vals[1], vals[2] = cur, ref
            self.update_cell(key, "cur", self._pct(cur))
            self.update_cell(key, "ref", self._pct(ref) if has_ref else "")
            if cur is not None and ref is not None:
                d = cur - ref
                style = "red" if d < -0.0005 else "green" if d > 0.0005 else ""
                delta = Text(pct(d, suffix="", signed=True), style=style, justify="right")
                self.update_cell(key, "delta", delta)
            else:
                self.update_cell(key, "delta", "")

    def show_row(self, i: int, r: ListRow | None) -> None:
        """Sample i's row from the state (`ViewModel.list_row`; None: no wiring yet)."""
        if r is not None:
            self.set_values(i, length=r.length, cur=r.cur, ref=r.ref, has_ref=r.has_ref)

    def clear_error(self, i: int) -> None:
        vals = self._vals.get(i)
        if vals is None or vals[3] is None:
            return
        vals[1] = vals[2] = vals[3] = None
        key = str(i)
        self.update_cell(key, "st", " ")
        self.update_cell(key, "cur", self._pct(None))

    def sort_key(self) -> Callable[[int], tuple]:
        mode = self.sort_mode
        vals = self._vals

        def key(cell: object) -> tuple:
            i = int(cell.plain if isinstance(cell, Text) else cell)  # type: ignore[arg-type]
            length, cur, ref, err = vals.get(i, [None] * 4)
            if mode == 0:
                return (0, i)
            if err is not None:
                return (2, 0.0, i)
            if mode == 1:
                return (length is None, -(length or 0), i)
            if mode == 2:
                return (cur is None, cur or 0.0, i)
            if mode == 3:
                return (ref is None, ref or 0.0, i)
            d = None if cur is None or ref is None else cur - ref
            return (d is None, d or 0.0, i)

        return key

    def cycle_sort(self, current: int, mode: int | None = None) -> str:
        """Sort by the next mode (or by `mode`), keep sample `current` under the cursor; returns
        the sort's description."""
        self.sort_mode = (self.sort_mode + 1) % len(SORTS) if mode is None else mode
        self.apply_sort(current)
        name, desc = SORTS[self.sort_mode]
        self.border_title = f"samples · {name}"
        return desc

    def apply_sort(self, current: int | None = None) -> None:
        self.sort("idx", key=self.sort_key())
        if current is not None:
            self.show_sample(current)

    def show_sample(self, i: int) -> None:
        """Move the row cursor to sample i (without selecting it)."""
        try:
            row = self.get_row_index(str(i))
        except Exception:  # noqa: BLE001 - rows not built yet
            return
        if self.cursor_row != row:
            self.move_cursor(row=row, animate=False)
