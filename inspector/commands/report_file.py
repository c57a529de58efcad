"""`--report FILE.md | FILE.html`: a self-contained report of a run (its tables, its chart, its
settings and its inputs' fingerprints) that a reviewer opens without the tool.

Markdown carries the chart as text (a code block); HTML carries the SVG inline, with no script,
no stylesheet link and no remote content. An input's fingerprint is the sha256 of its small JSON
files (config.json, data_config.json) and of the names and sizes of every other file: cheap on
a 100 GB checkpoint, and it changes whenever a file is added, removed, resized or reconfigured.
"""

from __future__ import annotations

import hashlib
import html
import json
from dataclasses import dataclass, field
from pathlib import Path

from inspector.errors import InputError

SMALL_JSON = 1 << 20


@dataclass
class ReportTable:
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Report:
    title: str
    settings: dict
    inputs: list[tuple[str, str, str]]  # (role, path, fingerprint)
    tables: list[tuple[str, ReportTable]] = field(default_factory=list)
    chart_text: str | None = None
    chart_svg: str | None = None
    verdict: str | None = None
    notes: list[str] = field(default_factory=list)


def fingerprint(path: str | Path) -> str:
    """sha256 (first 16 hex digits) of a file or folder, as the module docstring says."""
    p = Path(path)
    h = hashlib.sha256()
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    for f in files:
        rel = f.name if f == p else str(f.relative_to(p))
        size = f.stat().st_size
        h.update(f"{rel}\0{size}\0".encode())
        if f.suffix == ".json" and size <= SMALL_JSON:
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _md_cell(x: str) -> str:
    return x.replace("|", "\\|").replace("\n", " ")


def to_markdown(r: Report) -> str:
    out = [f"# {r.title}", ""]
    if r.verdict:
        out += [f"**{r.verdict}**", ""]
    for heading, t in r.tables:
        out += [f"## {heading}", ""]
        out.append("| " + " | ".join(_md_cell(h) for h in t.headers) + " |")
        out.append("|" + "---|" * len(t.headers))
        for row in t.rows:
            out.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
        if t.caption:
            out += ["", t.caption]
        out.append("")
    if r.chart_text:
        out += ["## Chart", "", "```", r.chart_text, "```", ""]
    if r.notes:
        out += ["## Notes", "", *[f"- {_md_cell(n)}" for n in r.notes], ""]
    out += ["## Settings", "", "```json", json.dumps(r.settings, indent=2, sort_keys=True), "```"]
    out += ["", "## Inputs", "", "| role | path | fingerprint |", "|---|---|---|"]
    out += [f"| {_md_cell(a)} | `{_md_cell(b)}` | `{c}` |" for a, b, c in r.inputs]
    out += ["", f"Fingerprints: {_FP_TEXT}", ""]
    return "\n".join(out)


_FP_TEXT = (
    "sha256 of the small JSON files and of every file's name and size (the first 16 hex digits)."
)


def to_html(r: Report) -> str:
    e = html.escape
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(r.title)}</title>",
        "<style>body{font-family:sans-serif;max-width:64em;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;"
        "text-align:right}td:first-child,th:first-child{text-align:left}"
        "pre{background:#f6f8fa;padding:.5em}</style>",
        "</head><body>",
        f"<h1>{e(r.title)}</h1>",
    ]
    if r.verdict:
        out.append(f"<p><strong>{e(r.verdict)}</strong></p>")
    for heading, t in r.tables:
        out.append(f"<h2>{e(heading)}</h2><table><tr>")
        out += [f"<th>{e(h)}</th>" for h in t.headers]
        out.append("</tr>")
        for row in t.rows:
            out.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
        out.append("</table>")
        if t.caption:
            out.append(f"<p>{e(t.caption)}</p>")
    if r.chart_svg:
        out += ["<h2>Chart</h2>", _safe_svg(r.chart_svg)]
    elif r.chart_text:
        out += ["<h2>Chart</h2>", f"<pre>{e(r.chart_text)}</pre>"]
    if r.notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in r.notes) + "</ul>")
    out.append("<h2>Settings</h2>")
    out.append(f"<pre>{e(json.dumps(r.settings, indent=2, sort_keys=True))}</pre>")
    out.append("<h2>Inputs</h2><table><tr><th>role</th><th>path</th><th>fingerprint</th></tr>")
    out += [
        f"<tr><td>{e(a)}</td><td><code>{e(b)}</code></td><td><code>{e(c)}</code></td></tr>"
        for a, b, c in r.inputs
    ]
    out += ["</table>", f"<p>Fingerprints: {e(_FP_TEXT)}</p>", "</body></html>", ""]
    return "\n".join(out)


def _safe_svg(svg: str) -> str:
    # our own chart (`sweep_plot.svg_chart`) escapes every text it holds; refuse anything else
    if "<script" in svg.lower() or "href" in svg.lower():
        raise ValueError("refusing an SVG with scripts or links")
    return svg


def write_report(path: str | Path, report: Report) -> None:
    p = Path(path)
    if p.suffix.lower() in (".md", ".markdown"):
        text = to_markdown(report)
    elif p.suffix.lower() in (".html", ".htm"):
        text = to_html(report)
    else:
        raise InputError(p, "--report", "a .md or .html file")
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as e:
        raise InputError(p, "--report", f"cannot write: {e.strerror or e}") from None


def from_rich(table) -> ReportTable:
    """A rich Table's headers, cells and caption as plain text: a report shows exactly what the
    terminal showed."""

    def plain(x) -> str:
        return x.plain if hasattr(x, "plain") else str(x)

    cols = list(table.columns)
    cells = [[plain(c) for c in col.cells] for col in cols]
    rows = [list(r) for r in zip(*cells, strict=True)] if cells else []
    return ReportTable([plain(c.header) for c in cols], rows, plain(table.caption or ""))
