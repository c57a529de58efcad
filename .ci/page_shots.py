"""The docs stage's browser check (.ci/docs): the built site served on 127.0.0.1, a few pages
screenshot by headless Chromium, each PNG checked to be the window's size and not blank.

    python .ci/page_shots.py SITE_DIR OUT_DIR

SITE_DIR is `mkdocs build`'s output. Writes OUT_DIR/<name>.png for the home page, a guide and
the Commands page, and prints one line each: its size, its number of distinct colours and the
share of its most common colour. Exits 1 when Chromium is missing or a screenshot is missing,
of another size, or blank (fewer than MIN_COLOURS colours, or one colour over MAX_SHARE of the
pixels: an error page, a white page, an unstyled page are caught so). Standard library only
(the stage's venv holds what the README installs and the docs extra): the PNG is decoded here.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import struct
import subprocess
import sys
import threading
import urllib.request
import zlib
from collections import Counter
from pathlib import Path

WIDTH, HEIGHT = 1280, 1000
PAGES = {  # name -> path on the site
    "home": "",
    "guide-low-acceptance": "guides/low-acceptance/",
    "commands": "reference/commands/",
}
MIN_COLOURS = 64  # text antialiased on a themed page gives hundreds; a blank page 1 or 2
MAX_SHARE = 0.97  # the background's share: a page of text leaves far more than 3% to the rest


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of raw pixel bytes) of an 8-bit, non-interlaced PNG (what Chromium
    writes: RGB or RGBA), its filters undone."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    if header is None:
        raise ValueError("no IHDR")
    w, h, depth, colour, _, _, interlace = header
    channels = {2: 3, 6: 4, 0: 1, 4: 2}.get(colour)
    if depth != 8 or interlace or channels is None:
        raise ValueError(f"unsupported PNG (depth {depth}, colour type {colour})")
    raw = zlib.decompress(b"".join(idat))
    stride, bpp = w * channels, channels
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, [bytes(r[i : i + 3]) for r in rows for i in range(0, stride, channels)]


def check(path: Path) -> str | None:
    """None when the screenshot is the window's size and not blank; else why."""
    if not path.is_file():
        return "no screenshot written"
    w, h, pixels = png_pixels(path)
    if (w, h) != (WIDTH, HEIGHT):
        return f"{w}x{h}, not the window's {WIDTH}x{HEIGHT}"
    counts = Counter(pixels)
    share = counts.most_common(1)[0][1] / len(pixels)
    print(f"  {path.name}: {w}x{h}, {len(counts)} colours, the commonest {share:.1%} of pixels")
    if len(counts) < MIN_COLOURS:
        return f"blank: {len(counts)} distinct colours (fewer than {MIN_COLOURS})"
    if share > MAX_SHARE:
        return f"blank: one colour covers {share:.1%} of the page"
    return None


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, int]:
    handler = functools.partial(_Quiet, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, httpd.server_address[1]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


def main(site: Path, out: Path) -> int:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("page shots: no chromium (apt-get install chromium)", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    httpd, port = serve(site)
    failed = 0
    try:
        for name, page in PAGES.items():
            png = out / f"{name}.png"
            png.unlink(missing_ok=True)
            url = f"http://127.0.0.1:{port}/{page}"
            try:  # the page is there (a 404 would screenshot as a page too)
                urllib.request.urlopen(url, timeout=30).close()
            except OSError as e:
                print(f"FAIL {url}: {e}")
                failed += 1
                continue
            subprocess.run(
                [
                    chromium,
                    "--headless",
                    "--no-sandbox",  # CI runs as root
                    "--disable-gpu",
                    "--hide-scrollbars",
                    "--virtual-time-budget=5000",  # the theme's scripts run before the shot
                    f"--window-size={WIDTH},{HEIGHT}",
                    f"--screenshot={png}",
                    url,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=120,
            )
            why = check(png)
            print(f"{'FAIL' if why else 'ok  '} {url} -> {png}" + (f": {why}" if why else ""))
            failed += why is not None
    finally:
        httpd.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python .ci/page_shots.py SITE_DIR OUT_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
