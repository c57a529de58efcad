"""`--fail-under`: the gates `accept` and `compare` apply to what they report, for CI.

A gate's failure exits `ExitCode.GATE` (3; `exit_codes` holds every status) with one line on
stderr; the report is printed first, as usual."""

from __future__ import annotations

from inspector.commands.exit_codes import ExitCode
from inspector.formatting import fmt_float

EXIT_GATE = ExitCode.GATE


def signed(x: float, digits: int = 4) -> str:
    """`x` with its sign always shown (a difference; -0 shown as +0)."""
    x = float(x) + 0.0
    return ("+" if x >= 0 else "") + fmt_float(x, digits)


def accept_gate(report, threshold: float) -> str | None:
    """The line naming the first reported wiring whose accept length is below `threshold`
    (None when every wiring reaches it). A wiring without rounds has no accept length: it fails."""
    for w in report.wirings:
        al = w.stats.accept_length
        if al is None or al < threshold:
            shown = "none (no rounds)" if al is None else fmt_float(al, 4)
            return f"fail-under: wiring {w.label} has accept length {shown}, below {threshold:g}"
    return None


def compare_gate(comparison, threshold: float) -> str | None:
    """The line saying B is worse than A by more than `threshold` (diff < -threshold), with the
    interval; None otherwise. No difference (no rounds) fails."""
    d = comparison.accept_length
    if d.diff is not None and d.diff >= -threshold:
        return None
    diff = "none (no rounds)" if d.diff is None else signed(d.diff)
    ci = (
        ""
        if d.low is None or d.high is None
        else f", {d.level:.0%} CI [{signed(d.low)}, {signed(d.high)}]"
    )
    return (
        f"fail-under: B's accept length is worse than A's by more than {threshold:g}: "
        f"B - A = {diff}{ci}"
    )


def gate_exit(err, gate, report, threshold: float | None) -> int:
    """0 without a threshold or when `gate` passes; else its line on `err` and `EXIT_GATE`."""
    if threshold is None:
        return 0
    line = gate(report, threshold)
    if line is None:
        return 0
    err.print(line, highlight=False, soft_wrap=True, markup=False)
    return EXIT_GATE
