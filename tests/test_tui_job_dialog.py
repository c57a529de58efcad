"""How a dialog's device-thread job ends: cancelled, an input error, an unexpected error, done."""

from __future__ import annotations

import threading

import pytest

from inspector.errors import InputError
from inspector.tui.screens.job_dialog import JobCancelled, check_cancel, run_guarded


def _run(body, *, cancelled=True):
    posted: list[object] = []
    run_guarded(
        body,
        posted.append,
        failed=lambda text: ("failed", text),
        cancelled=(lambda: ("cancelled",)) if cancelled else None,
    )
    return posted


def test_a_finished_body_posts_only_what_it_posts():
    assert _run(lambda: None) == []


def test_a_cancelled_run_posts_cancelled_or_nothing():
    def body():
        raise JobCancelled()

    assert _run(body) == [("cancelled",)]
    assert _run(body, cancelled=False) == []


def test_an_input_error_is_posted_as_its_line_and_not_raised():
    def body():
        raise InputError("data_3.pt", "loss_mask", "length 5, input_ids has 7")

    (posted,) = _run(body)
    assert posted[0] == "failed"
    assert posted[1] == str(InputError("data_3.pt", "loss_mask", "length 5, input_ids has 7"))


def test_an_unexpected_error_is_posted_with_its_type_then_raised():
    posted: list[object] = []

    def body():
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(RuntimeError):
        run_guarded(body, posted.append, failed=lambda text: text)
    assert posted == ["RuntimeError: CUDA out of memory"]


def test_check_cancel_raises_only_once_set():
    cancel = threading.Event()
    check_cancel(cancel)
    cancel.set()
    with pytest.raises(JobCancelled):
        check_cancel(cancel)
