"""reconcile over several runs of one draft (`--engine-log` given more than once): the runs are
one engine's, replayed from samples, with one draft length; and the table of every run against
the replay of its own requests (`doctor.reconcile.runs`)."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from inspector.commands.output import report_table, safe
from inspector.errors import InputError
from inspector.formatting import fmt_float


def same_engine(logs, args) -> None:
    """Several runs are one engine's (its replay counts rounds as that engine does), replayed
    from samples."""
    if len(logs) < 2:
        return
    from inspector.engines import engine_words

    named = list(dict.fromkeys(engine_words(lg.engine) for lg in logs))
    if len(named) > 1:
        raise InputError(
            None,
            "--engine-log",
            f"the logs are {' and '.join(named)}'s: several runs are compared under one "
            "engine's replay (each engine counts its rounds its own way); reconcile each "
            "engine's runs apart",
        )
    if args.prompts:
        raise InputError(
            None, "--prompts", "one --engine-log with --prompts (several runs replay from SAMPLES)"
        )


def check_steps(log, given: int | None, steps: int) -> None:
    """The log's own draft length against --steps (or the first log's)."""
    if log.steps is not None and steps != log.steps:
        raise InputError(
            log.path,
            "num_spec_tokens" if log.source == "requests" else "Per-position acceptance rate",
            f"the engine drafted {log.steps} tokens a round, "
            + (f"--steps says {given}" if given else f"another log's {steps}"),
        )
    if log.most_drafted is not None and steps < log.most_drafted:
        raise InputError(
            log.path,
            "per_step_drafted",
            f"a round drafted {log.most_drafted} tokens, --steps says {steps}",
        )


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
