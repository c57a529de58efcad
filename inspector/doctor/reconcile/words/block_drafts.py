"""The words of a block draft's verdicts (`block`): the configured wiring's replay, another
wiring's, or none, with where the engine first departs."""

from __future__ import annotations

from dataclasses import dataclass

from inspector.doctor.reconcile.result import Gap


@dataclass(frozen=True)
class RoundForRound:
    """`equal` of `requests` paired requests equal the replay round for round."""

    equal: int
    requests: int

    def __str__(self) -> str:
        return f" ({self.equal} of {self.requests} requests round for round)"


@dataclass(frozen=True)
class BlockAsConfigured:
    """A block draft's figure (`figure`, `logged_text`) equals the configured wiring's replay."""

    figure: str
    layers: tuple[int, ...]
    per_request: RoundForRound | None = None

    def __str__(self) -> str:
        return (
            f"the engine's figure {self.figure} equals the replay of the configured wiring "
            f"HF {list(self.layers)}{self.per_request or ''}: the draft is served as configured"
        )


@dataclass(frozen=True)
class BlockOtherLayers:
    """A block draft's figure equals the replay of another wiring (`name`, `layers`; `fed_by`:
    the engines that feed it), not the configured one (`configured`)."""

    figure: str
    name: str
    layers: tuple[int, ...]
    fed_by: tuple[str, ...]
    configured: tuple[int, ...]
    per_request: RoundForRound | None = None

    def __str__(self) -> str:
        by = ""
        if self.fed_by:
            s = "s" if len(self.fed_by) == 1 else ""
            by = f", what {', '.join(self.fed_by)} feed{s}"
        return (
            f"the engine's figure {self.figure} equals the replay of {self.name} "
            f"HF {list(self.layers)}{by}{self.per_request or ''}, not the configured "
            f"HF {list(self.configured)}: the engine fed the draft other layers"
        )


@dataclass(frozen=True)
class Departure:
    """The first paired request and round where the engine's count departs from the replay."""

    gap: Gap

    def __str__(self) -> str:
        g = self.gap
        return (
            f"request {g.request} (sample {g.sample}) departs at round {g.round}: the engine "
            f"accepted {g.engine}, the replay {g.replay}"
        )


@dataclass(frozen=True)
class OtherLength:
    """A paired request whose rounds agree with the replay's as far as both go, but not in
    number."""

    request: str
    sample: int
    rounds: int
    replay_rounds: int

    def __str__(self) -> str:
        return (
            f"request {self.request} (sample {self.sample}) runs {self.rounds} rounds, the "
            f"replay {self.replay_rounds}"
        )


@dataclass(frozen=True)
class BlockNoneEqual:
    """A block draft's figure equals no replay: below them all (`below`) or not; where the
    engine first departs from the configured replay, and how many faults of the engine
    (`engine`) in computing block drafts are known (`known`, in the notes)."""

    figure: str
    below: bool
    departure: Departure | OtherLength | None
    known: int
    engine: str

    def __str__(self) -> str:
        what = (
            "below every wiring's replay: the engine accepts less than this draft does on these "
            "requests (an engine-side fault)"
            if self.below
            else "equal to no wiring's replay: not the requests the samples hold, or a draft the "
            "engine computes otherwise"
        )
        out = f"the engine's figure {self.figure} is {what}"
        if self.departure is not None:
            out += f"; against the configured wiring, {self.departure}"
        if self.known:
            s = "s" if self.known > 1 else ""
            out += (
                f"; {self.known} known fault{s} of {self.engine} in computing block drafts, in "
                "the notes"
            )
        return out
