"""The sweep's chart as a PNG file (`sweep --png`), for the places an SVG does not open (a CI
artifact viewer, a chat, a slide): the same points, axes and best mark as `sweep_plot.svg_chart`,
rasterised here with numpy (the layout is `sweep_plot.chart_geometry`, the SVG's) and written with zlib (8-bit RGB, one IDAT chunk), so no plotting or
imaging library is needed.

Text is drawn in a 5x7 bitmap font that holds digits, letters (upper case drawn as lower case)
and the punctuation numbers and names need; any other character is drawn as '?'.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import numpy as np

from inspector.commands.sweep_plot import (
    PAD_B,
    PAD_L,
    PAD_R,
    PAD_T,
    H,
    W,
    chart_geometry,
    y_px,
)
from inspector.formatting import fmt_float

WHITE, GREY, BLUE, RED, BLACK = (
    (255, 255, 255),
    (68, 68, 68),
    (31, 111, 235),
    (209, 36, 47),
    (0,) * 3,
)

# Each glyph: 7 rows of 5 pixels ('#' on), row after row.
_GLYPHS: dict[str, str] = {
    "0": ".###.#...##..###.#.###..##...#.###.",
    "1": "..#...##....#....#....#....#...###.",
    "2": ".###.#...#....#...#...#...#...#####",
    "3": "#####...#...#.....#.....##...#.###.",
    "4": "...#...##..#.#.#..#.#####...#....#.",
    "5": "######....####.....#....##...#.###.",
    "6": "..##..#...#....####.#...##...#.###.",
    "7": "#####....#...#...#...#....#....#...",
    "8": ".###.#...##...#.###.#...##...#.###.",
    "9": ".###.#...##...#.####....#...#..##..",
    ".": "..........................##...##..",
    ",": ".....................##....#...#...",
    "-": "...............#####...............",
    "+": ".......#....#..#####..#....#.......",
    ":": "......##...##........##...##.......",
    "(": "...#...#...#....#....#.....#.....#.",
    ")": ".#.....#.....#....#....#...#...#...",
    "/": ".........#...#...#...#...#.........",
    "_": "..............................#####",
    "=": "..........#####.....#####..........",
    "[": ".###..#....#....#....#....#....###.",
    "]": ".###....#....#....#....#....#..###.",
    " ": "...................................",
    "?": ".###.#...#....#...#...#.........#..",
    "a": "...........###.....#.#####...#.####",
    "b": "#....#....#.##.##..##...##...#####.",
    "c": "...........###.#....#....#...#.###.",
    "d": "....#....#.##.##..###...##...#.####",
    "e": "...........###.#...#######.....###.",
    "f": "..##..#..#.#...###...#....#....#...",
    "g": "......#####...##...#.####....#.###.",
    "h": "#....#....#.##.##..##...##...##...#",
    "i": "..#........##....#....#....#...###.",
    "j": "...#........##....#....#.#..#..##..",
    "k": "#....#....#..#.#.#..##...#.#..#..#.",
    "l": ".##....#....#....#....#....#...###.",
    "m": "..........##.#.#.#.##.#.##...##...#",
    "n": "..........#.##.##..##...##...##...#",
    "o": "...........###.#...##...##...#.###.",
    "p": "..........####.#...#####.#....#....",
    "q": "...........##.##..##.####....#....#",
    "r": "..........#.##.##..##....#....#....",
    "s": "...........###.#.....###.....#####.",
    "t": ".#....#...###...#....#....#..#..##.",
    "u": "..........#...##...##...##..##.##.#",
    "v": "..........#...##...##...#.#.#...#..",
    "w": "..........#...##...##.#.##.#.#.#.#.",
    "x": "..........#...#.#.#...#...#.#.#...#",
    "y": "..........#...##...#.####....#.###.",
    "z": "..........#####...#...#...#...#####",
}


def _glyph(ch: str) -> np.ndarray:
    bits = _GLYPHS.get(ch.lower(), _GLYPHS["?"])
    return np.array([b == "#" for b in bits], dtype=bool).reshape(7, 5)


class Canvas:
    """An RGB image [H, W, 3] with the few primitives a line chart needs."""

    def __init__(self, w: int, h: int) -> None:
        self.px = np.empty((h, w, 3), dtype=np.uint8)
        self.px[:] = WHITE

    def dot(self, x: float, y: float, r: float, colour: tuple[int, ...]) -> None:
        h, w, _ = self.px.shape
        yy, xx = np.ogrid[:h, :w]
        self.px[(xx - x) ** 2 + (yy - y) ** 2 <= r * r] = colour

    def line(
        self, a: tuple[float, float], b: tuple[float, float], colour: tuple[int, ...], width: float
    ) -> None:
        """A segment `width` pixels thick: every pixel within width / 2 of it."""
        h, w, _ = self.px.shape
        (x0, y0), (x1, y1) = a, b
        lo_x, hi_x = int(max(0, min(x0, x1) - width)), int(min(w, max(x0, x1) + width + 1))
        lo_y, hi_y = int(max(0, min(y0, y1) - width)), int(min(h, max(y0, y1) + width + 1))
        yy, xx = np.mgrid[lo_y:hi_y, lo_x:hi_x].astype(np.float64)
        dx, dy = x1 - x0, y1 - y0
        t = ((xx - x0) * dx + (yy - y0) * dy) / ((dx * dx + dy * dy) or 1.0)
        t = t.clip(0.0, 1.0)
        d2 = (xx - x0 - t * dx) ** 2 + (yy - y0 - t * dy) ** 2
        self.px[lo_y:hi_y, lo_x:hi_x][d2 <= (width / 2) ** 2] = colour

    def text(
        self,
        x: float,
        y: float,
        s: str,
        colour: tuple[int, ...] = BLACK,
        anchor: str = "start",
        vertical: bool = False,
    ) -> None:
        """`s` with its baseline at y; anchor "start", "middle" or "end" at x (`vertical`: read
        bottom to top, centred on (x, y))."""
        if not s:
            return
        mask = np.zeros((7, 6 * len(s)), dtype=bool)
        for i, ch in enumerate(s):
            mask[:, 6 * i : 6 * i + 5] = _glyph(ch)
        if vertical:
            mask = np.rot90(mask)
            top, left = int(y - mask.shape[0] / 2), int(x - 3)
        else:
            shift = {"start": 0, "middle": mask.shape[1] / 2, "end": mask.shape[1]}[anchor]
            top, left = int(y - 7), int(x - shift)
        h, w, _ = self.px.shape
        ys, xs = np.nonzero(mask)
        ys, xs = ys + top, xs + left
        keep = (ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)
        self.px[ys[keep], xs[keep]] = colour

    def png(self) -> bytes:
        """The image as PNG bytes (8-bit RGB, filter 0 on every row)."""
        h, w, _ = self.px.shape
        raw = np.concatenate([np.zeros((h, 1), dtype=np.uint8), self.px.reshape(h, w * 3)], 1)

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw.tobytes(), 9))
            + chunk(b"IEND", b"")
        )


def png_chart(
    steps: Sequence[float],
    values: Sequence[float | None],
    labels: Sequence[str],
    best: int | None,
    title: str,
) -> bytes:
    """Accept length against step as PNG bytes: the line, a dot per checkpoint, the best one
    red and labelled, the axes with their end values."""
    c = Canvas(W, H)
    if all(v is None for v in values):
        c.text(10, 44, "no checkpoint has an accept length")
        return c.png()
    pts, (x0, x1, y0, y1) = chart_geometry(steps, values)
    names = [lb for lb, v in zip(labels, values, strict=True) if v is not None]
    vals = [v for v in values if v is not None]
    c.text(PAD_L, 24, title)
    c.line((PAD_L, H - PAD_B), (W - PAD_R, H - PAD_B), GREY, 1)
    c.line((PAD_L, PAD_T), (PAD_L, H - PAD_B), GREY, 1)
    for y in (y0, (y0 + y1) / 2, y1):
        c.text(PAD_L - 6, y_px(y, y0, y1) + 4, fmt_float(y), anchor="end")
    for x, (px, _) in ((x0, pts[0]), (x1, pts[-1])):
        c.text(px, H - PAD_B + 18, f"{x:g}", anchor="middle")
    c.text((PAD_L + W - PAD_R) / 2, H - 8, "training step", anchor="middle")
    c.text(14, (PAD_T + H - PAD_B) / 2, "accept length", vertical=True)
    for a, b in zip(pts, pts[1:], strict=False):
        c.line(a, b, BLUE, 2)
    for (px, py), name, v in zip(pts, names, vals, strict=True):
        is_best = best is not None and labels[best] == name
        c.dot(px, py, 5 if is_best else 3, RED if is_best else BLUE)
        if is_best:
            c.text(px, py - 10, f"best {fmt_float(v)} ({name})", RED, anchor="middle")
    return c.png()
