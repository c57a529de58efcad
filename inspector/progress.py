"""Progress, reported and drawn one way: the engine's long passes take a callback, and the
commands draw it as one transient bar on stderr."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# (units done, units in all; None while unknown): samples, prompts x wirings, ...
Progress = Callable[[int, int | None], None]
# (stage, done, total): the doctor's passes, each stage a line of its own
StageProgress = Callable[[str, int, int], None]


def _bar(console: Any, hidden: bool, label: str) -> Any:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as Bar

    return Bar(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=hidden or not console.is_terminal,
    )


def _console(err: Any) -> Any:
    from rich.console import Console

    return err if err is not None else Console(stderr=True)


@contextmanager
def progress_bar(label: str, err: Any = None, *, hidden: bool = False) -> Iterator[Progress]:
    """Yields a `Progress` callback that advances a transient bar labelled `label` on the Rich
    console `err` (default: a new one on stderr). No bar is drawn when that console is no
    terminal, or when `hidden` (torchrun's other ranks)."""
    with _bar(_console(err), hidden, label) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@contextmanager
def stage_progress_bar(err: Any = None) -> Iterator[StageProgress]:
    """The same bar for passes in stages: the label is the current stage's name."""
    with _bar(_console(err), False, "{task.description}") as bar:
        task = bar.add_task("", total=None)
        yield lambda stage, done, total: bar.update(
            task, description=stage, completed=done, total=total
        )
