"""A capture progress bar on stderr (rich), drawn only when stderr is a terminal."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from inspector.capture.run import Progress


@contextmanager
def progress_bar(label: str = "capturing") -> Iterator[Progress]:
    """Yields a ``(done, total)`` callback that advances a transient bar on stderr."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as Bar

    err = Console(stderr=True)
    with Bar(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    ) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
