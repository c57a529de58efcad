"""reconcile over several runs of one draft (`--engine-log` given more than once): the table of
every run against the replay of its own requests (`doctor.reconcile.runs`; the runs are checked to
be one engine's, with one draft length, in `doctor.reconcile.request`)."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from inspector.commands.output import report_table, safe
from inspector.formatting import fmt_float


def render_runs(comparison, results) -> Group | Text:
    """Every run against the replay of its requests, under the wiring they are held to."""
    if comparison is None:
        return Text(
            "runs: no run departs from a replay that another run equals (each run's own verdict "
            "above)"
        )
    from inspector.doctor.reconcile.blame import DRIFT, MIN_SHORT
    from inspector.doctor.reconcile.result import short_label

    table = report_table(
        safe(
            "each run against the replay of its own requests fed "
            f"{short_label(comparison.wiring)}: within {DRIFT:.0%} equal; below by more, and "
            f"{MIN_SHORT} tokens short, departs"
        )
    )
    for col, justify in (
        ("run", "left"),
        ("logged", "right"),
        ("replay", "right"),
        ("short", "right"),
        ("verdict", "left"),
        ("", "left"),
    ):
        table.add_column(col, justify=justify, no_wrap=col == "run")
    for c, result in zip(comparison.checks, results, strict=True):
        mark = "departs" if c.run in comparison.departing else ("equal" if c.equal else "")
        table.add_row(
            safe(c.run),
            fmt_float(c.engine_accept_length),
            fmt_float(c.replay_accept_length),
            f"{c.short:.0f}",
            result.verdict.value,
            mark,
        )
    return Group(table)
