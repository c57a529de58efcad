"""How every view writes a number or a user-supplied string: the app's panels, the CLI tables and
the doctor's wording share these, so one figure reads the same everywhere.

Counts read as `Counts.fmt()` ('386/1235 31.3%'); a bare fraction as `pct`; floats that may be
NaN or Inf as `fmt_float` / `fmt_norm`; any text that came from the inputs (file names, error
texts) goes through `printable` before it reaches the terminal.
"""

from __future__ import annotations

import math

# How every view colours a doctor finding's severity (Rich styles; the keys are the values of
# `doctor.finding.Severity`, a str enum, so the enum looks them up too).
SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "green"}


def pct(x: float | None, *, suffix: str = "%", signed: bool = False) -> str:
    """A fraction as a percentage with one decimal ('31.3%'); '-' when there is none."""
    if x is None:
        return "-"
    return f"{100 * x:+.1f}{suffix}" if signed else f"{100 * x:.1f}{suffix}"


def fmt_float(x: float, digits: int = 2) -> str:
    """`digits` decimals; NaN / Inf shown as such."""
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    return f"{x:.{digits}f}"


def fmt_norm(x: float) -> str:
    """4 significant digits in at most 6 cells; NaN / Inf shown as such."""
    x = float(x)
    if not math.isfinite(x):
        return fmt_float(x)
    a = abs(x)
    if a >= 1e5:
        return f"{x:.1e}".replace("e+0", "e").replace("e+", "e")
    if a >= 1000:
        return f"{x:.0f}"
    if a >= 100:
        return f"{x:.1f}"
    if a >= 10:
        return f"{x:.2f}"
    return f"{x:.3f}"


def printable(text: str) -> str:
    """`text` with every control character (newline, ESC, ...) written as an escape.

    A file name may hold anything but '/' and NUL: a newline would break a one-line message or a
    panel row, and an ESC would reach the terminal as a command. Rich markup needs no escaping
    here: the views build `rich.text.Text` objects and notify with markup off.
    """
    if text.isprintable():
        return text
    out = []
    for c in text:
        if c.isprintable():
            out.append(c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x100:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(f"\\u{ord(c):04x}")
    return "".join(out)
