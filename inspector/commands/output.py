"""Writing what the commands produce: untrusted strings made safe for a terminal and for Rich,
and JSON that is always one complete, valid document."""

from __future__ import annotations

import json
import sys
from typing import IO, Any

from rich.markup import escape
from rich.table import Table

from inspector.formatting import printable
from inspector.strict_json import json_safe

__all__ = ["json_safe", "safe", "stdout_console", "visible", "write_json", "write_json_spooled"]


def visible(text: object) -> str:
    """`text` with control characters shown as escapes (\\n, \\x1b, ...): a file name or a
    message can neither break a one-line error nor send escape sequences to the terminal."""
    return printable(str(text))


def safe(text: object) -> str:
    """`visible(text)` with Rich markup escaped: for any path or input-derived string that is
    printed through Rich (a file named `run[/bold].pt` must print as such, not crash the table)."""
    return escape(visible(text))


def write_json(doc: Any, stream: IO[str] | None = None) -> int:
    """Serialise the whole document first, then write it: a failure can never leave half a
    document on stdout. Returns how many non-finite numbers were written as null."""
    clean, count = json_safe(doc)
    text = json.dumps(clean, indent=1, allow_nan=False)
    out = stream if stream is not None else sys.stdout
    out.write(text + "\n")
    out.flush()
    return count


def stdout_console(width: int | None = None):
    """A Rich console on stdout whose reader may leave early (`eval | head`): the write raises
    BrokenPipeError, which the CLI turns into a quiet exit 0 (Rich's own handler exits 1).
    `width` is the width off a terminal (piped: the callers give 200, so a table is not cut to
    Rich's default 80); a COLUMNS the user set wins over it, as it does on a terminal (the docs'
    examples run at their page's width so)."""
    import os

    from rich.console import Console

    columns = os.environ.get("COLUMNS", "")
    if width is not None and columns.isdigit() and int(columns) > 0:
        width = int(columns)

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

    return _Console(width=width)


def write_json_spooled(doc: dict, spool: Any, stream: IO[str] | None = None) -> int:
    """Like `write_json` for an eval report whose positions are on disk (`PositionSpool`): the
    document is serialised first with a marker per wiring, then written with each wiring's
    spooled positions streamed in at its marker. Returns the number of nulls written."""
    clean, count = json_safe(doc)
    markers = []
    for i, w in enumerate(clean.get("wirings", [])):
        if spool.count(i):
            w["positions"] = marker = f"\x00positions-{i}\x00"
            markers.append((json.dumps(marker), i))
    text = json.dumps(clean, indent=1, allow_nan=False)
    out = stream if stream is not None else sys.stdout
    for quoted, i in markers:
        head, text = text.split(quoted, 1)
        out.write(head + "[")
        for chunk in spool.chunks(i):
            out.write(chunk)
        out.write("]")
    out.write(text + "\n")
    out.flush()
    return count + spool.nonfinite


def report_table(title: str, *columns: str) -> Table:
    """A report's table as every command prints one: its title left, its header bold."""
    return Table(*columns, title=title, title_justify="left", header_style="bold")


# each reconcile verdict's colour, in the EAGLE-3 and the block views alike
VERDICT_COLOURS = {
    "as_is": "green",
    "wrong_wiring": "red",
    "engine_fault": "red",
    "engine_gate": "red",
    "engine_slot": "red",
    "engine_backend": "red",
    "target_hidden_state": "red",
    "other_data": "yellow",
    "synthetic": "magenta",
    "undecided": "yellow",
}
