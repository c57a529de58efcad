"""The expected accept length at a temperature, from the rounds a loop ran: each round's
acceptance odds given its start (`sampling.RoundOdds`), pooled as the engines pool.

Two figures, and what each means:

- **expected accept length** 1 + sum_r E[a_r | start_r] / rounds: the engine's pooled figure
  with each round's random acceptance replaced by its expectation under the rule, on the round
  starts this run reached. Its interval is a bootstrap over requests (the unit an engine's
  traffic varies by): how much another set of requests like these would move it.
- **realised vs expected**: sum_r (a_r - E[a_r | start_r]) is a sum of martingale differences
  (each term has mean 0 given everything before it), so z = that sum / sqrt(sum_r Var[a_r |
  start_r]) is about standard normal when the verification follows the rule. |z| > 4 says the
  run did not verify as the rule says: the check that holds the live loop, and an engine's log,
  to the rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from inspector.serving.sampling import RoundOdds
from inspector.stats.bootstrap import DEFAULT_LEVEL, DEFAULT_RESAMPLES


@dataclass
class SampleOdds:
    """One request's rounds' odds: E[a], Var[a], P(a >= k) per round ([R], [R], [R, depth])."""

    expected: np.ndarray
    variance: np.ndarray
    at_least: np.ndarray

    @classmethod
    def of(cls, rounds: list[RoundOdds], depth: int) -> SampleOdds:
        return cls(
            np.array([r.expected for r in rounds], dtype=np.float64),
            np.array([r.variance for r in rounds], dtype=np.float64),
            np.array([r.at_least for r in rounds], dtype=np.float64).reshape(len(rounds), depth),
        )

    def to_dict(self) -> dict:
        return {"expected": [round(float(x), 6) for x in self.expected]}


@dataclass
class OddsTotals:
    """Rounds' odds summed (one request's, or pooled over many): the sums `Expectation` takes
    its figures from, without its interval (the app pools these as samples arrive)."""

    depth: int
    rounds: int = 0
    expected: float = 0.0  # sum of E[a | start]
    variance: float = 0.0  # sum of Var[a | start]
    realised: int = 0  # sum of the a the run took
    at_least: list[float] = field(default_factory=list)  # [k]: expected rounds with a >= k + 1

    def __post_init__(self) -> None:
        if not self.at_least:
            self.at_least = [0.0] * self.depth

    @classmethod
    def of(cls, odds: SampleOdds, accepted: np.ndarray, depth: int) -> OddsTotals:
        at = odds.at_least.sum(axis=0)  # [R, depth]: zeros of its depth without rounds
        return cls(
            depth,
            int(odds.expected.size),
            float(odds.expected.sum()),
            float(odds.variance.sum()),
            int(np.asarray(accepted).sum()),
            [float(x) for x in at],
        )

    def add(self, other: OddsTotals) -> None:
        self.rounds += other.rounds
        self.expected += other.expected
        self.variance += other.variance
        self.realised += other.realised
        self.at_least = [a + b for a, b in zip(self.at_least, other.at_least, strict=True)]

    @property
    def accept_length(self) -> float | None:
        """1 + sum E[a] / rounds: the engine's pooled figure in expectation."""
        return 1 + self.expected / self.rounds if self.rounds else None

    @property
    def per_depth(self) -> list[float | None]:
        """[k]: the expected share of rounds accepting at least k + 1 drafted tokens."""
        return [x / self.rounds if self.rounds else None for x in self.at_least]

    @property
    def z(self) -> float | None:
        """(realised - expected) / its standard deviation under the rule (None: no variance)."""
        if self.variance <= 0:
            return None
        return (self.realised - self.expected) / math.sqrt(self.variance)


@dataclass(frozen=True)
class Expectation:
    """A wiring's pooled expectation over its requests (module docstring)."""

    rounds: int
    realised: int
    expected: float
    variance: float
    at_least: tuple[float, ...]  # expected rounds accepting >= k, k = 1..depth
    low: float | None  # the expected accept length's bootstrap interval
    high: float | None
    level: float

    @classmethod
    def of(
        cls,
        odds: list[SampleOdds],
        accepted: list[np.ndarray],
        depth: int,
        *,
        seed: int = 0,
        resamples: int = DEFAULT_RESAMPLES,
        level: float = DEFAULT_LEVEL,
    ) -> Expectation:
        per = [OddsTotals.of(o, a, depth) for o, a in zip(odds, accepted, strict=True)]
        tot = OddsTotals(depth)
        for t in per:
            tot.add(t)
        rounds = np.array([t.rounds for t in per], dtype=np.float64)
        exp = np.array([t.expected for t in per], dtype=np.float64)
        low = high = None
        if len(odds) and rounds.sum() > 0:
            rows = np.random.default_rng(seed).integers(0, len(odds), size=(resamples, len(odds)))
            den = rounds[rows].sum(axis=1)
            ok = den > 0
            with np.errstate(invalid="ignore", divide="ignore"):
                al = np.where(ok, 1 + exp[rows].sum(axis=1) / den, np.nan)
            tail = (1 - level) / 2
            low, high = (float(x) for x in np.nanquantile(al, [tail, 1 - tail]))
        return cls(
            tot.rounds,
            tot.realised,
            tot.expected,
            tot.variance,
            tuple(tot.at_least),
            low,
            high,
            level,
        )

    @property
    def accept_length(self) -> float | None:
        return 1 + self.expected / self.rounds if self.rounds else None

    @property
    def realised_accept_length(self) -> float | None:
        return 1 + self.realised / self.rounds if self.rounds else None

    @property
    def per_depth(self) -> list[float]:
        """The expected share of rounds accepting at least k + 1 drafted tokens."""
        return [x / self.rounds if self.rounds else 0.0 for x in self.at_least]

    @property
    def z(self) -> float | None:
        """(realised - expected) / its standard deviation under the rule (None: no variance)."""
        if self.variance <= 0:
            return None
        return (self.realised - self.expected) / math.sqrt(self.variance)

    def to_dict(self) -> dict:
        return {
            "accept_length": self.accept_length,
            "ci_low": self.low,
            "ci_high": self.high,
            "level": self.level,
            "expected_accepted": self.expected,
            "realised_accepted": self.realised,
            "realised_accept_length": self.realised_accept_length,
            "z": self.z,
            "expected_accepted_per_pos": list(self.at_least),
            "per_depth": self.per_depth,
            "meaning": (
                "accept_length: 1 + the sum over rounds of E[accepted | the round's start] under "
                "the verification rule / rounds (the interval: bootstrap over requests); z: "
                "(realised - expected) / sqrt(sum of Var[accepted | start]), about N(0, 1) when "
                "verification follows the rule"
            ),
        }
