"""`sweep --png`: the chart as a PNG written with numpy and zlib. The file is decoded here by a
reader written from the PNG specification (signature, chunk CRCs, IHDR, one zlib stream of
filter-0 rows), and its pixels are checked where the chart puts them: each checkpoint's dot, the
line between them, the best one red, white where nothing is drawn."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from inspector.commands import sweep_png as sp


def decode(data: bytes) -> np.ndarray:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks = 8, []
    while at < len(data):
        (n,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + n]
        (crc,) = struct.unpack(">I", data[at + 8 + n : at + 12 + n])
        assert crc == zlib.crc32(kind + body), kind
        chunks.append((kind, body))
        at += 12 + n
    assert [k for k, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    w, h, depth, colour, comp, filt, inter = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, colour, comp, filt, inter) == (8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    raw = np.frombuffer(zlib.decompress(chunks[1][1]), dtype=np.uint8).reshape(h, 1 + 3 * w)
    assert (raw[:, 0] == 0).all()  # filter type 0 on every row
    return raw[:, 1:].reshape(h, w, 3)


STEPS = [100.0, 200.0, 300.0, 400.0]
VALUES = [2.1, 2.6, None, 2.4]
LABELS = ["step_100", "step_200", "step_300", "step_400"]


def test_every_glyph_is_seven_rows_of_five():
    assert all(len(g) == 35 and set(g) <= {".", "#"} for g in sp._GLYPHS.values())
    # distinct digits, so a figure cannot read as another
    digits = [sp._GLYPHS[d] for d in "0123456789"]
    assert len(set(digits)) == 10


def test_the_dots_the_line_and_the_best():
    img = decode(sp.png_chart(STEPS, VALUES, LABELS, 1, "run: accept length"))
    assert img.shape == (sp.H, sp.W, 3)
    pts, (x0, x1, y0, y1) = sp.chart_geometry(STEPS, VALUES)
    assert (x0, x1, y0, y1) == (100.0, 400.0, 2.1, 2.6)
    assert len(pts) == 3  # the checkpoint with no accept length has no dot
    colours = [tuple(img[round(y), round(x)]) for x, y in pts]
    assert colours == [sp.BLUE, sp.RED, sp.BLUE]
    # the extremes sit on the plot's edges: the lowest at its bottom, the highest at its top
    assert pts[0] == pytest.approx((sp.PAD_L, sp.H - sp.PAD_B))
    assert pts[1][1] == pytest.approx(sp.PAD_T)
    assert pts[2][0] == pytest.approx(sp.W - sp.PAD_R)
    for a, b in zip(pts, pts[1:], strict=False):
        mid = ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)
        assert tuple(img[round(mid[1]), round(mid[0])]) == sp.BLUE
    # the best's label above it, in red; nothing drawn in the plot's empty upper right
    bx, by = pts[1]
    band = img[int(by) - 18 : int(by) - 8, int(bx) - 60 : int(bx) + 60]
    assert (band == sp.RED).all(-1).sum() > 40
    assert (img[sp.PAD_T : sp.PAD_T + 40, sp.W - 120 : sp.W - sp.PAD_R - 10] == 255).all()
    # the axes, grey
    assert tuple(img[sp.H - sp.PAD_B, (sp.PAD_L + sp.W) // 2]) == sp.GREY
    assert tuple(img[(sp.PAD_T + sp.H) // 2, sp.PAD_L]) == sp.GREY


def test_a_flat_run_is_widened_and_none_at_all_is_said():
    _, (_, _, y0, y1) = sp.chart_geometry([1.0, 2.0], [2.0, 2.04])
    assert (y0, y1) == pytest.approx((1.95, 2.09))
    img = decode(sp.png_chart([1.0, 2.0], [None, None], ["a", "b"], None, "t"))
    drawn = (img != 255).any(-1)
    assert drawn.any() and not drawn[60:].any()  # one line of text at the top, no chart


def test_text_is_drawn_where_anchored():
    c = sp.Canvas(200, 40)
    c.text(100, 20, "1.50", anchor="end")
    ys, xs = np.nonzero((c.px != 255).any(-1))
    assert xs.max() < 100 and xs.min() >= 100 - 6 * 4 and ys.min() >= 13 and ys.max() < 20
    c = sp.Canvas(40, 200)
    c.text(14, 100, "accept", vertical=True)
    ys, xs = np.nonzero((c.px != 255).any(-1))
    assert ys.max() - ys.min() > xs.max() - xs.min()  # read bottom to top
