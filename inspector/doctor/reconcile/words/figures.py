"""The parts every verdict's words quote: the engine's figure (`logged_text`, `Logged`), a
wiring named with its figure (`Fed`), an expectation at a temperature (`expected_text`)."""

from __future__ import annotations

from dataclasses import dataclass

from inspector.engines import engine_words
from inspector.formats.engine_log import EngineLog
from inspector.formatting import fmt_float
from inspector.serving.expectation import Expectation


def fmt_figure(x: float | None) -> str:
    return "-" if x is None else fmt_float(x)


def logged_text(log: EngineLog) -> str:
    """The engine's figure as a verdict quotes it: its accept length with the counts or requests
    it was read from."""
    al = fmt_figure(log.accept_length)
    if log.figure == "spec_accept_length":
        return f"spec_accept_length {al} over {len(log.requests)} requests"
    if log.rounds is not None and log.accepted is not None and log.source != "requests":
        return f"{al} ({log.accepted} accepted in {log.rounds} rounds, {log.description})"
    if log.source == "requests":
        return f"{al} over {len(log.requests)} requests"
    return f"{al} ({log.description})"


def expected_text(e: Expectation) -> str:
    """A wiring's expectation at a temperature: its accept length and bootstrap interval."""
    al = fmt_float(e.accept_length) if e.accept_length is not None else "-"
    if e.low is None or e.high is None:
        return f"expected {al}"
    return f"expected {al} [{fmt_float(e.low)}, {fmt_float(e.high)}]"


@dataclass(frozen=True)
class Logged:
    """Who logged the engine's figure (the engine, or the build its start-up line names), and the
    figure as the verdict quotes it (`logged_text`)."""

    by: str
    figure: str

    @classmethod
    def of(cls, log: EngineLog) -> Logged:
        return cls(engine_words(log.engine), logged_text(log))

    @classmethod
    def build(cls, log: EngineLog) -> Logged:
        """Named by the build its start-up line states (`EngineLog.start`)."""
        assert log.start is not None
        return cls(f"{log.start.label} ({log.start.where})", logged_text(log))

    def __str__(self) -> str:
        return f"{self.by} logged {self.figure}"


@dataclass(frozen=True)
class Fed:
    """A wiring as a verdict names it: its short label and its figure, a replay's accept length
    or, at a temperature, what the draft is expected to give fed it."""

    label: str
    accept_length: float | None = None
    expected: Expectation | None = None

    @property
    def figure(self) -> str:
        if self.expected is not None:
            return expected_text(self.expected)
        return fmt_figure(self.accept_length)
