"""Accept length against the training step, drawn two ways from the same points: a text chart for
the terminal (block characters, no dependency) and a self-contained SVG file."""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import escape

from inspector.formatting import fmt_float

BARS = " ▁▂▃▄▅▆▇█"
# The file charts' layout (the SVG and the PNG draw the same one), in pixels.
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 720, 360, 64, 24, 40, 48


def chart_geometry(
    steps: Sequence[float], values: Sequence[float | None]
) -> tuple[list[tuple[float, float]], tuple[float, float, float, float]]:
    """The pixel centre of each checkpoint with an accept length, in order, and the axes' range
    (x0, x1, y0, y1): a span under 0.1 is widened by 0.05 each side."""
    pts = [(s, v) for s, v in zip(steps, values, strict=True) if v is not None]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    y0, y1 = (y0 - 0.05, y1 + 0.05) if y1 - y0 < 0.1 else (y0, y1)
    out = [(x_px(x, x0, x1), y_px(y, y0, y1)) for x, y in pts]
    return out, (x0, x1, y0, y1)


def x_px(x: float, x0: float, x1: float) -> float:
    return PAD_L + (x - x0) / ((x1 - x0) or 1) * (W - PAD_L - PAD_R)


def y_px(y: float, y0: float, y1: float) -> float:
    return PAD_T + (y1 - y) / ((y1 - y0) or 1) * (H - PAD_T - PAD_B)


def text_chart(
    labels: Sequence[str], values: Sequence[float | None], best: int | None, height: int = 8
) -> list[str]:
    """Rows of a column chart, one column per checkpoint in order (x: their order, y: accept
    length from the lowest to the highest), the best marked ▲ under its column, the axis values
    at the left."""
    vals = [v for v in values if v is not None]
    if not vals:
        return ["(no checkpoint has an accept length)"]
    lo, hi = min(vals), max(vals)
    span = hi - lo or 1.0
    width = max(len(fmt_float(hi)), len(fmt_float(lo)))
    # each column's height in eighths of a row
    eighths = [None if v is None else round((v - lo) / span * (height * 8 - 8)) + 8 for v in values]
    rows = []
    for r in range(height, 0, -1):
        axis = fmt_float(hi) if r == height else fmt_float(lo) if r == 1 else ""
        cells = []
        for e in eighths:
            if e is None:
                cells.append("·" if r == 1 else " ")
                continue
            fill = e - (r - 1) * 8
            cells.append(BARS[max(0, min(8, fill))])
        rows.append(f"{axis:>{width}} │" + "".join(c * 2 + " " for c in cells).rstrip())
    rows.append(" " * width + " └" + "─" * (3 * len(values)))
    if best is not None:
        rows.append(" " * width + "  " + "   " * best + "▲ best: " + labels[best])
    rows.append(" " * width + "  " + f"{labels[0]} → {labels[-1]}" if labels else "")
    return rows


def svg_chart(
    steps: Sequence[float],
    values: Sequence[float | None],
    labels: Sequence[str],
    best: int | None,
    title: str,
) -> str:
    """A line chart of accept length against step as one SVG document (no scripts, no links)."""
    w, h, pad_l, pad_r, pad_t, pad_b = W, H, PAD_L, PAD_R, PAD_T, PAD_B
    pts = [(s, v, lb) for s, v, lb in zip(steps, values, labels, strict=True) if v is not None]
    if not pts:
        return (
            '<svg xmlns="http://www.w3.org/2000/svg" width="720" height="80"><text x="10" '
            'y="40">no checkpoint has an accept length</text></svg>\n'
        )
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    _, (x0, x1, y0, y1) = chart_geometry(xs, ys)

    def px(x: float) -> float:
        return x_px(x, x0, x1)

    def py(y: float) -> float:
        return y_px(y, y0, y1)

    line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{pad_l}" y="22" font-size="14">{escape(title)}</text>',
        f'<line x1="{pad_l}" y1="{h - pad_b}" x2="{w - pad_r}" y2="{h - pad_b}" stroke="#444"/>',
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{h - pad_b}" stroke="#444"/>',
    ]
    for y in (y0, (y0 + y1) / 2, y1):
        out.append(
            f'<text x="{pad_l - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{fmt_float(y)}</text>'
        )
    for x in (x0, x1):
        out.append(f'<text x="{px(x):.1f}" y="{h - pad_b + 18}" text-anchor="middle">{x:g}</text>')
    out.append(
        f'<text x="{(pad_l + w - pad_r) / 2:.1f}" y="{h - 8}" text-anchor="middle">'
        "training step</text>"
    )
    out.append(
        f'<text x="14" y="{(pad_t + h - pad_b) / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {(pad_t + h - pad_b) / 2:.1f})">accept length</text>'
    )
    out.append(f'<polyline points="{line}" fill="none" stroke="#1f6feb" stroke-width="2"/>')
    for x, y, lb in pts:
        is_best = best is not None and labels[best] == lb
        colour = "#d1242f" if is_best else "#1f6feb"
        out.append(
            f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="{5 if is_best else 3}" '
            f'fill="{colour}"><title>{escape(lb)}: {fmt_float(y, 4)}</title></circle>'
        )
        if is_best:
            out.append(
                f'<text x="{px(x):.1f}" y="{py(y) - 10:.1f}" text-anchor="middle" '
                f'fill="{colour}">best {fmt_float(y)} ({escape(lb)})</text>'
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"
