"""What the device thread reports to the UI: plain dataclasses, no Textual.

The engine calls its `post` callback with one of these from its own thread; the app wraps each in
one Textual message (`messages.DeviceEvent`) and the main screen dispatches on the type.
Results carry the generation number of their request; the UI paints only the latest one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from inspector.metrics import StepMetrics
    from inspector.serving.spec import DraftSpec
    from inspector.serving.walk import AcceptStats
    from inspector.tui.summary import SampleData, Session
    from inspector.wiring import WiringKey


@dataclass(frozen=True)
class LoadProgress:
    text: str


@dataclass(frozen=True)
class Loaded:
    session: Session


@dataclass(frozen=True)
class LoadFailed:
    error: str


@dataclass(frozen=True)
class ViewData:
    """Predictions of one sample under some wirings; prefetch=True when nobody asked to see it."""

    gen: int
    sample: SampleData
    preds: dict[WiringKey, Any]  # SamplePredictions
    prefetch: bool


@dataclass(frozen=True)
class ViewFailed:
    gen: int
    sample: int
    error: str
    kind: str  # "sample" (bad input), "oom", "error"


@dataclass(frozen=True)
class SampleAccept:
    """The serving replay of one sample under one wiring and engine settings: the rounds an
    engine takes through its generation runs (one entry per round) and, per token position n,
    what a round starting after x_n would accept."""

    index: int
    wiring: WiringKey
    spec: DraftSpec
    a_by_start: np.ndarray  # int64 [T], uncapped by the runs
    starts: np.ndarray  # int64 [rounds]: n, the round drafts after committed x_0..x_n
    accepted: np.ndarray  # int64 [rounds]
    emitted: np.ndarray  # int64 [rounds]
    stats: AcceptStats
    a_at: np.ndarray  # int64 [T]: a of the round whose first drafted token is t, -1 if none


@dataclass(frozen=True)
class AcceptData:
    """Replays the UI asked for (`Engine.request_accept`): one sample, some wirings."""

    sample: int
    spec: DraftSpec
    accepts: list[SampleAccept]


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
class StatsBatch:
    """Per-sample metrics (sample, wiring, [StepMetrics], length), failed samples (i, error) and
    the fill's serving replays."""

    items: list[tuple[int, WiringKey, list[StepMetrics], int]]
    errors: list[tuple[int, str]]
    accepts: list[SampleAccept] = field(default_factory=list)


@dataclass(frozen=True)
class TaskDone:
    """A submitted task (export, doctor, ...) ended: its result or its error text."""

    kind: str
    result: Any = None
    error: str | None = None


Event = (
    LoadProgress
    | Loaded
    | LoadFailed
    | ViewData
    | ViewFailed
    | StatsBatch
    | AcceptData
    | SampleTrees
    | TaskDone
)
