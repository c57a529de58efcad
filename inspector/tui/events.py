"""What the device thread reports to the UI: plain dataclasses, no Textual.

The engine calls its `post` callback with one of these from its own thread; the app wraps each in
one Textual message (`messages.DeviceEvent`) and the main screen dispatches on the type.
Results carry the generation number of their request; the UI paints only the latest one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inspector.metrics import StepMetrics
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
class StatsBatch:
    """Per-sample metrics (sample, wiring, [StepMetrics], length) and failed samples (i, error)."""

    items: list[tuple[int, WiringKey, list[StepMetrics], int]]
    errors: list[tuple[int, str]]


@dataclass(frozen=True)
class TaskDone:
    """A submitted task (export, doctor, ...) ended: its result or its error text."""

    kind: str
    result: Any = None
    error: str | None = None


Event = LoadProgress | Loaded | LoadFailed | ViewData | ViewFailed | StatsBatch | TaskDone
