"""A dialog that runs one job on the device thread and lists its result (the doctor, the sweep).

The two share how a job stops and how it fails: closing the dialog sets a cancel event that the
job's progress callback checks, so the run stops at its next step; an input error is posted as
the dialog's failure line; any other error is posted and re-raised, so the engine also handles it
(an out-of-memory error frees the device cache).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from textual.message import Message
from textual.screen import ScreenResultType
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from inspector.tui.screens.dialogs import Dialog


class JobCancelled(Exception):
    """Raised from a job's progress callback once its dialog is closed: stops the run."""


def check_cancel(cancel: threading.Event) -> None:
    """Stop the job (raise `JobCancelled`) once its dialog was closed."""
    if cancel.is_set():
        raise JobCancelled()


def run_guarded(
    body: Callable[[], None],
    post: Callable[[Message], Any],
    failed: Callable[[str], Message],
    cancelled: Callable[[], Message] | None = None,
) -> None:
    """Run `body` on the device thread; post `failed(text)` for an error and `cancelled()` (when
    given) for a cancelled run. Unexpected errors are re-raised after the post."""
    from inspector.errors import InputError

    try:
        body()
    except JobCancelled:
        if cancelled is not None:
            post(cancelled())
    except InputError as e:
        post(failed(e.words()))
    except Exception as e:
        post(failed(f"{type(e).__name__}: {e}"))
        raise


class JobDialog(Dialog[ScreenResultType]):
    """A dialog owning its job's cancel event: closed or unmounted, the job stops."""

    def __init__(self) -> None:
        super().__init__()
        self._cancel = threading.Event()

    def fill_options(self, options: list[Option]) -> bool:
        """Show `options` in the dialog's list, the first highlighted and focused; False when
        there are none."""
        ol = self.query_one(OptionList)
        ol.clear_options()
        ol.add_options(options)
        if not options:
            return False
        ol.highlighted = 0
        ol.focus()
        return True

    def close(self, result: ScreenResultType | None = None) -> None:
        self._cancel.set()
        super().close(result)

    def action_close(self) -> None:
        self.close(None)

    def on_unmount(self) -> None:
        self._cancel.set()
