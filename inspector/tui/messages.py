"""The device thread's reports as Textual messages: one message per event, and `PostReports`, the
`events.Reports` the app gives the engine, which posts each to the main screen.

`post_message` is thread-safe, so the device thread posts directly; each message reaches its own
`on_...` handler on the UI thread. `can_replace`: while the UI is busy, a message still queued
gives way to a newer one that carries all it does (Textual drops the older), so a burst of
results costs one repaint, not one each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from textual.message_pump import MessagePump

    from inspector.evaluate import SamplePredictions
    from inspector.tui.events import SampleAccept, SampleComparison, SampleTrees, Scored
    from inspector.tui.summary import SampleData, Summary
    from inspector.tui.tau_settings import Serving
    from inspector.wiring import WiringKey

# Fields as a dataclass (toolong's habit), identity as Textual's own messages (no field equality).
report = dataclass(eq=False)


@report
class LoadProgress(Message, bubble=False):
    """A loading stage; only the newest one is worth showing."""

    text: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LoadProgress)


@report
class FirstLookProgress(Message, bubble=False):
    """The doctor's search for the trained wiring (`first_look`): its stage and how far it got;
    only the newest is worth showing. Posted by the task itself (not a `Reports` event)."""

    text: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FirstLookProgress)


@report
class Loaded(Message, bubble=False):
    session: Summary


@report
class LoadFailed(Message, bubble=False):
    error: str


@report
class ViewReady(Message, bubble=False):
    """Predictions of one sample under some wirings (gen -1 and prefetch: nobody asked)."""

    gen: int
    sample: SampleData
    preds: dict[WiringKey, SamplePredictions]
    prefetch: bool

    def can_replace(self, message: Message) -> bool:
        # Predictions of a (sample, wiring) are the same whichever request made them: a later
        # result of the same sample holding every wiring of this one supersedes it (it caches
        # the same arrays, and shows the view whenever this one would have).
        return (
            isinstance(message, ViewReady)
            and message.sample.index == self.sample.index
            and message.preds.keys() >= self.preds.keys()
            and (message.gen >= self.gen or message.prefetch)
        )


@report
class ViewFailed(Message, bubble=False):
    gen: int
    sample: int
    error: str
    kind: str  # "sample" (bad input), "oom", "error"


@report
class ScoredBatch(Message, bubble=False):
    """A batch of the fill: per-sample metrics, failed samples (i, error), serving replays."""

    items: list[Scored]
    errors: list[tuple[int, str]]
    accepts: list[SampleAccept]


@report
class AcceptsReady(Message, bubble=False):
    """The replays the UI asked for: one sample, some wirings, one set of settings."""

    sample: int
    serving: Serving
    accepts: list[SampleAccept]

    def can_replace(self, message: Message) -> bool:
        return (
            isinstance(message, AcceptsReady)
            and (message.sample, message.serving) == (self.sample, self.serving)
            and {a.wiring for a in message.accepts} >= {a.wiring for a in self.accepts}
        )


@report
class ServingFailed(Message, bubble=False):
    """τ cannot be replayed under these settings (the target a temperature needs)."""

    serving: Serving
    error: str


@report
class TreesReady(Message, bubble=False):
    trees: SampleTrees

    def can_replace(self, message: Message) -> bool:
        t, o = self.trees, getattr(message, "trees", None)
        return (
            isinstance(message, TreesReady)
            and o is not None
            and (o.index, o.wiring, o.spec) == (t.index, t.wiring, t.spec)
        )


@report
class TreesFailed(Message, bubble=False):
    error: str


@report
class Compared(Message, bubble=False):
    """A sample under both drafts (`open --compare`)."""

    comparison: SampleComparison


@report
class CompareFailed(Message, bubble=False):
    error: str


@report
class SecondReady(Message, bubble=False):
    """The second draft (`open --compare`) is loaded: its summary."""

    summary: Summary


@report
class SecondFailed(Message, bubble=False):
    error: str


@report
class TaskDone(Message, bubble=False):
    """A submitted task (export, doctor, ...) ended: its result or its error text."""

    kind: str
    result: Any = None
    error: str | None = None


@report
class JobCrashed(Message, bubble=False):
    """A bug in a device-thread job: its traceback (the thread carries on)."""

    error: str


class PostReports:
    """`events.Reports` that posts each report to `target` (the main screen) as its message."""

    def __init__(self, target: MessagePump) -> None:
        self._target = target

    def _post(self, message: Message) -> None:
        try:
            self._target.post_message(message)
        except Exception:  # noqa: BLE001 - the app may be closing
            pass

    def load_progress(self, text: str) -> None:
        self._post(LoadProgress(text))

    def loaded(self, session: Summary) -> None:
        self._post(Loaded(session))

    def load_failed(self, error: str) -> None:
        self._post(LoadFailed(error))

    def view_ready(
        self,
        gen: int,
        sample: SampleData,
        preds: dict[WiringKey, SamplePredictions],
        prefetch: bool,
    ) -> None:
        self._post(ViewReady(gen, sample, preds, prefetch))

    def view_failed(self, gen: int, sample: int, error: str, kind: str) -> None:
        self._post(ViewFailed(gen, sample, error, kind))

    def scored(
        self, items: list[Scored], errors: list[tuple[int, str]], accepts: list[SampleAccept]
    ) -> None:
        self._post(ScoredBatch(items, errors, accepts))

    def accepts_ready(self, sample: int, serving: Serving, accepts: list[SampleAccept]) -> None:
        self._post(AcceptsReady(sample, serving, accepts))

    def serving_failed(self, serving: Serving, error: str) -> None:
        self._post(ServingFailed(serving, error))

    def trees_ready(self, trees: SampleTrees) -> None:
        self._post(TreesReady(trees))

    def trees_failed(self, error: str) -> None:
        self._post(TreesFailed(error))

    def compared(self, comparison: SampleComparison) -> None:
        self._post(Compared(comparison))

    def compare_failed(self, error: str) -> None:
        self._post(CompareFailed(error))

    def second_ready(self, summary: Summary) -> None:
        self._post(SecondReady(summary))

    def second_failed(self, error: str) -> None:
        self._post(SecondFailed(error))

    def task_done(self, kind: str, result: Any = None, error: str | None = None) -> None:
        self._post(TaskDone(kind, result, error))

    def job_crashed(self, error: str) -> None:
        self._post(JobCrashed(error))
