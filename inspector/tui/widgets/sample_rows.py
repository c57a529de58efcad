"""The sample list's data: per sample its positions, accuracies and error, the cells they show, and
the sort's order. Flat arrays, no object per sample or cell: 10^5 samples take a few MB.

No Textual (Rich styles only): `samples.SampleList` renders these cells into lines.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable

from rich.style import Style

from inspector.formatting import pct

SORTS = (
    ("#", "index"),
    ("pos", "positions, most first"),
    ("cur", "current-wiring accuracy, lowest first"),
    ("ref", "reference accuracy, lowest first"),
    ("Δ", "cur − ref, largest drop first"),
)
COLUMN_SORTS = {"idx": 0, "pos": 1, "cur": 2, "ref": 3, "delta": 4}  # column key -> sort mode
# (key, title, width): each cell is right-aligned in its width (and cut to it).
COLUMNS = (
    ("st", " ", 1),  # ✗: the sample failed
    ("idx", "#", 4),
    # positions: the rows the draft predicts (the header's count, the cursor's range)
    ("pos", "pos", 5),
    ("cur", "cur%", 6),
    ("ref", "ref%", 6),
    ("delta", "Δ", 6),
)
TABLE_WIDTH = sum(w for _, _, w in COLUMNS)
NO_LENGTH = -1
DELTA_EPS = 0.0005  # |cur − ref| above this is coloured (red a drop, green a gain)
DIM, RED, GREEN, ERROR = (Style.parse(s) for s in ("dim", "red", "green", "bold red"))

Cell = tuple[str, Style | None]  # a cell's text and its own style (over the line's)
Values = tuple[int, float | None, float | None, int, bool]  # see SampleRows.values
HEADER: tuple[Cell, ...] = tuple((title, None) for _, title, _ in COLUMNS)


def _acc(x: float) -> float | None:
    return None if math.isnan(x) else x


class SampleRows:
    """What each sample's line shows, and the order of the lines."""

    def __init__(self, n: int = 0) -> None:
        self.n = n
        self.length = array("i", [NO_LENGTH]) * n
        self.cur = array("d", [math.nan]) * n  # NaN: not computed yet
        self.ref = array("d", [math.nan]) * n
        self.has_ref = bytearray(n)  # a reference wiring is pinned (its column shows)
        self.errors: dict[int, str] = {}  # few
        self.order = array("i", range(n))  # line -> sample
        self.line = array("i", range(n))  # sample -> line

    def update(
        self, i: int, length: int | None, cur: float | None, ref: float | None, has_ref: bool
    ) -> bool:
        """New values for sample i (None keeps a length, clears an accuracy; an errored
        sample keeps its error); whether its line changed."""
        changed = False
        if length is not None and self.length[i] != length:
            self.length[i] = length
            changed = True
        if i in self.errors:
            return changed
        if self.has_ref[i] != has_ref or _acc(self.cur[i]) != cur or _acc(self.ref[i]) != ref:
            self.cur[i] = math.nan if cur is None else cur
            self.ref[i] = math.nan if ref is None else ref
            self.has_ref[i] = has_ref
            changed = True
        return changed

    def set_error(self, i: int, error: str) -> bool:
        if i in self.errors:
            return False
        self.errors[i] = error
        return True

    def clear_error(self, i: int) -> bool:
        """Back to pending (a retry worked); whether sample i had an error."""
        if self.errors.pop(i, None) is None:
            return False
        self.cur[i] = self.ref[i] = math.nan
        self.has_ref[i] = False
        return True

    def values(self, i: int) -> Values:
        """All that sample i's line depends on: (length, cur, ref, has_ref, error?), NaN as None
        (NaN is not equal to itself: a key holding it would never match)."""
        return (
            self.length[i],
            _acc(self.cur[i]),
            _acc(self.ref[i]),
            self.has_ref[i],
            i in self.errors,
        )

    def cells(self, i: int) -> tuple[Cell, ...]:
        """Sample i's cells, one per column of COLUMNS."""
        length, cur, ref, has_ref, error = self.values(i)
        n: Cell = (str(length), None) if length != NO_LENGTH else ("?", DIM)
        if error:
            return (("✗", ERROR), (str(i), None), n, ("error", ERROR), ("", None), ("", None))
        c: Cell = ("…", DIM) if cur is None else (pct(cur, suffix=""), None)
        r: Cell = ("", None)
        if has_ref:
            r = ("…", DIM) if ref is None else (pct(ref, suffix=""), None)
        d: Cell = ("", None)
        if cur is not None and ref is not None:
            x = cur - ref
            style = RED if x < -DELTA_EPS else GREEN if x > DELTA_EPS else None
            d = (pct(x, suffix="", signed=True), style)
        return ((" ", None), (str(i), None), n, c, r, d)

    def sort_key(self, mode: int) -> Callable[[int], tuple]:
        """The key of sort mode `mode` (SORTS) over sample indices; errors last, unknowns after
        the known, ties by index."""
        values = self.values

        def key(i: int) -> tuple:
            length, cur, ref, _, err = values(i)
            if mode == 0:
                return (0, i)
            if err:
                return (2, 0.0, i)
            if mode == 1:
                return (length == NO_LENGTH, -max(length, 0), i)
            if mode == 2:
                return (cur is None, cur or 0.0, i)
            if mode == 3:
                return (ref is None, ref or 0.0, i)
            d = None if cur is None or ref is None else cur - ref
            return (d is None, d or 0.0, i)

        return key

    def sort(self, mode: int) -> None:
        self.order = array("i", sorted(range(self.n), key=self.sort_key(mode)))
        for line, i in enumerate(self.order):
            self.line[i] = line
