"""What the device thread reports to the UI: the `Reports` port (one method per event) and the
result arrays it carries. No Textual, no torch.

The engine calls `Reports` from its own thread; the app's implementation
(`messages.PostReports`) posts one Textual message per event to the main screen, so the screen
handles each with its own `on_...` method. Keeping the port a Protocol keeps the engine side
free of Textual (a test checks it): the engine, its jobs and the backend run and test headless.
View results carry the generation number of their request; the UI paints only the latest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    import numpy as np

    from inspector.evaluate import SamplePredictions, StepPredictions
    from inspector.metrics import StepMetrics
    from inspector.metrics.rounds import AcceptStats
    from inspector.serving.expectation import OddsTotals
    from inspector.serving.spec import DraftSpec
    from inspector.tui.summary import SampleData, Summary
    from inspector.tui.tau_settings import Serving
    from inspector.tui.totals import AcceptFigure
    from inspector.wiring import WiringKey


@dataclass(frozen=True)
class SampleAccept:
    """The serving replay of one sample under one wiring and engine settings: the rounds an
    engine takes through its generation runs (one entry per round) and, per token position n,
    what a round starting after x_n would accept."""

    index: int
    wiring: WiringKey
    serving: Serving
    a_by_start: np.ndarray  # int64 [T], uncapped by the runs
    starts: np.ndarray  # int64 [rounds]: n, the round drafts after committed x_0..x_n
    accepted: np.ndarray  # int64 [rounds]
    emitted: np.ndarray  # int64 [rounds]
    stats: AcceptStats
    a_at: np.ndarray  # int64 [T]: a of the round whose first drafted token is t, -1 if none
    # At a temperature: each round's expected accepted count under the rule, and their sums.
    expected: np.ndarray | None = None  # float64 [rounds]
    odds: OddsTotals | None = None

    @property
    def figure(self) -> AcceptFigure:
        """What τ pools of this replay (`totals.AcceptFigure`)."""
        from inspector.tui.totals import AcceptFigure

        return AcceptFigure(self.stats, self.odds)


@dataclass(frozen=True)
class SampleTrees:
    """The draft tree an engine builds at every row of one sample (`tui.trees`): row j's is the
    round whose first drafted token is x_{j+2}. Nodes in the beam's candidate order (a parent
    before its children), M = draft tokens - 1 per row."""

    index: int
    wiring: WiringKey
    spec: DraftSpec
    tokens: np.ndarray  # int64 [R, M]: target ids
    parent: np.ndarray  # int64 [R, M]: the parent's node index, -1 for the root's children
    depth: np.ndarray  # int64 [R, M]: 1 for the root's children
    prob: np.ndarray  # float32 [R, M]: cumulative probability (the beam's score)
    on_path: np.ndarray  # bool [R, M]: the nodes the sample's own continuation takes
    accepted: np.ndarray  # int64 [R]: how many it accepts (to the sample's end)


@dataclass(frozen=True)
class SampleComparison:
    """One sample under the first draft (the current wiring) and the second (`open --compare`,
    its own wiring), under the same engine settings: each one's step-0 predictions and serving
    replay, and the rows where they part (row j predicts x_{j+2}; its round starts after
    x_{j+1}, so `a_by_start[j + 1]` is what that round accepts)."""

    index: int
    wiring: WiringKey  # A's
    spec: DraftSpec
    checkpoint_b: str
    wiring_b: WiringKey
    a: StepPredictions
    b: StepPredictions
    a_by_start: np.ndarray  # int64 [T+]: A's replay, what a round after x_n accepts
    b_by_start: np.ndarray
    stats_a: AcceptStats  # each one's rounds through the sample
    stats_b: AcceptStats
    rows: np.ndarray  # int64: the rows in either list below, in order
    hit_rows: np.ndarray  # loss-masked rows where one draft's top-1 hits and the other's misses
    accept_rows: np.ndarray  # rows whose round would accept a different count


class Scored(NamedTuple):
    """One sample's metrics under one wiring, as the fill sends them."""

    sample: int
    wiring: WiringKey
    metrics: list[StepMetrics]
    length: int


class Reports(Protocol):
    """The device thread's reports, one method per event (called on the device thread)."""

    def load_progress(self, text: str) -> None:
        """A loading stage (importing torch, reading the draft, ...)."""

    def loaded(self, session: Summary) -> None:
        """The inputs are loaded: what the UI needs to know of the draft and the set."""

    def load_failed(self, error: str) -> None: ...

    def view_ready(
        self,
        gen: int,
        sample: SampleData,
        preds: dict[WiringKey, SamplePredictions],
        prefetch: bool,
    ) -> None:
        """Predictions of one sample under some wirings; prefetch: nobody asked to see it."""

    def view_failed(self, gen: int, sample: int, error: str, kind: str) -> None:
        """kind: "sample" (bad input), "oom" or "error"."""

    def scored(
        self, items: list[Scored], errors: list[tuple[int, str]], accepts: list[SampleAccept]
    ) -> None:
        """A batch of the fill: per-sample metrics, failed samples (i, error), replays."""

    def accepts_ready(self, sample: int, serving: Serving, accepts: list[SampleAccept]) -> None:
        """The replays the UI asked for (`DeviceThread.request_accept`): one sample, some wirings."""

    def serving_failed(self, serving: Serving, error: str) -> None:
        """τ cannot be replayed under these settings here (`backend.ServingError`)."""

    def trees_ready(self, trees: SampleTrees) -> None: ...

    def compared(self, comparison: SampleComparison) -> None:
        """A sample under both drafts (`DeviceThread.request_compare`)."""

    def compare_failed(self, error: str) -> None: ...

    def second_ready(self, summary: Summary) -> None:
        """The second draft is loaded (`DeviceThread.request_second`): its own summary."""

    def second_failed(self, error: str) -> None: ...

    def trees_failed(self, error: str) -> None: ...

    def task_done(self, kind: str, result: Any = None, error: str | None = None) -> None:
        """A submitted task (export, doctor, ...) ended: its result or its error text."""

    def job_crashed(self, error: str) -> None:
        """A bug in a job (its traceback): the device thread carries on."""
