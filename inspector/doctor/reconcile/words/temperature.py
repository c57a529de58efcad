"""The words of the verdicts at a temperature (`sampled`): what the statistics find (a `Finding`),
said after the engine's figure (`AtTemperature`) or after a build known to verify wrong
(`KnownBuild`)."""

from __future__ import annotations

from dataclasses import dataclass

from inspector.doctor.reconcile.result import PositionCheck
from inspector.doctor.reconcile.words.figures import Fed, Logged
from inspector.doctor.reconcile.words.greedy import Trained
from inspector.formatting import pct

_VERIFY_FAULT = "an engine-side fault in verification"


def _by_chance(fed: Fed) -> str:
    return (
        "by chance it lies within the noise of what this draft is expected to give fed "
        f"{fed.label} ({fed.figure})"
    )


@dataclass(frozen=True)
class Shortfall:
    """Where the engine fell short at a temperature: at `at`'s depth, where it accepted nothing
    from there on (`dead`) or too little; `settings`: the sampling settings' label."""

    at: PositionCheck
    dead: bool
    settings: str

    def __str__(self) -> str:
        c = self.at
        if self.dead:
            where = (
                "accepted no draft at all"
                if c.depth == 1
                else f"accepted no draft past position {c.depth - 2}"
            )
            return (
                f"the engine {where} (0 of {c.engine_rounds:,} rounds at depth {c.depth}) "
                f"where this draft is expected to accept {pct(c.expected_share)} of rounds at "
                f"depth {c.depth} under {self.settings}: {_VERIFY_FAULT}"
            )
        return (
            f"the engine accepted {c.engine_accepted:,} of {c.engine_rounds:,} rounds at depth "
            f"{c.depth} ({pct(c.engine_share)}) where this draft is expected to accept "
            f"{pct(c.expected_share)} under {self.settings} (z {c.z:+.1f}): {_VERIFY_FAULT}"
        )


@dataclass(frozen=True)
class ExpectedTrained:
    """Within the noise of `fed`'s expectation, the trained wiring named (`worse`: `fed`'s
    lies clearly below the trained one's)."""

    fed: Fed
    trained: Trained
    worse: bool

    @property
    def finding(self) -> str:
        f = self.fed
        return (
            f"; that is what this draft is expected to give fed {f.label} ({f.figure})"
            f"{self.trained}"
        )

    @property
    def conclusion(self) -> str:
        return ": your engine feeds the wrong layers" if self.worse else ": the draft is what it is"

    @property
    def statistics(self) -> str:
        return _by_chance(self.fed)


@dataclass(frozen=True)
class ExpectedBest:
    """No search ran; within the noise of `fed`'s expectation, the best of those tried."""

    fed: Fed

    @property
    def finding(self) -> str:
        f = self.fed
        return (
            f"; this draft is {f.figure} when fed {f.label}, the wiring it fits best of those "
            "tried, and the engine's acceptance at every position is within the noise of it"
        )

    @property
    def conclusion(self) -> str:
        return ": the draft is what it is"

    @property
    def statistics(self) -> str:
        return _by_chance(self.fed)


@dataclass(frozen=True)
class ExpectedOther:
    """No search ran; within the noise of `fed`'s expectation only, below `best`'s
    (`configured`: `best` is the wiring the config names)."""

    fed: Fed
    best: Fed
    configured: bool

    @property
    def finding(self) -> str:
        f, b = self.fed, self.best
        return (
            f"; that is what this draft is expected to give fed {f.label} ({f.figure}), while "
            f"fed {b.label} it is {b.figure}"
            + (", what its config names" if self.configured else "")
        )

    @property
    def conclusion(self) -> str:
        return ": your engine feeds the wrong layers"

    @property
    def statistics(self) -> str:
        b = self.best
        return (
            _by_chance(self.fed) + ", which alone would read as the wrong layers fed "
            f"(fed {b.label} it is {b.figure})"
        )


@dataclass(frozen=True)
class BelowExpected:
    """Below every wiring's expectation (`reference`'s named), at `shortfall` where the log
    gives per-position counts."""

    reference: Fed
    shortfall: Shortfall | None = None

    @property
    def _below(self) -> str:
        r = self.reference
        return (
            "below what every wiring is expected to give on these requests "
            f"({r.figure} fed {r.label})"
        )

    @property
    def finding(self) -> str:
        return ", " + self._below

    @property
    def conclusion(self) -> str:
        if self.shortfall is not None:
            return f"; {self.shortfall}"
        return ": " + _VERIFY_FAULT

    @property
    def statistics(self) -> str:
        return f"it is {self._below}{self.conclusion}"


@dataclass(frozen=True)
class FitsNone:
    """Within the noise of no wiring's expectation (`expected`: each wiring's) and not below
    them all."""

    expected: tuple[Fed, ...]

    @property
    def _fits(self) -> str:
        every = ", ".join(f"{c.figure} fed {c.label}" for c in self.expected)
        return f"fits no wiring's expectation ({every})"

    @property
    def finding(self) -> str:
        return f", which {self._fits}"

    @property
    def conclusion(self) -> str:
        return (
            ": the requests, the sampling settings or the verification rule are not the "
            "engine's (--temperature, --top-k, --top-p, --verify)"
        )

    @property
    def statistics(self) -> str:
        return f"it {self._fits}"


Finding = ExpectedTrained | ExpectedBest | ExpectedOther | BelowExpected | FitsNone


@dataclass(frozen=True)
class AtTemperature:
    """The figure at a temperature (`settings`, the sampling settings' label) and what the
    statistics find."""

    logged: Logged
    settings: str
    finding: Finding

    def __str__(self) -> str:
        f = self.finding
        return f"{self.logged} at {self.settings}{f.finding}{f.conclusion}"


@dataclass(frozen=True)
class KnownBuild:
    """The build that logged the figure is known to verify wrong at a temperature (`what`):
    that decides; what the statistics alone find (`finding`) follows, as what it is."""

    logged: Logged
    settings: str
    what: str
    finding: Finding

    def __str__(self) -> str:
        return (
            f"{self.logged} at {self.settings}: this build is known to verify wrong at a "
            f"temperature, as {self.what}, so the figure says nothing about the draft; "
            f"{self.finding.statistics}"
        )
