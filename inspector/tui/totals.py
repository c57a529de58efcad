"""Per-sample figures and their pool per group, with one add and one drop: the app's set totals.

The accuracy bar pools two kinds of per-sample figures over the samples done so far: the step
metrics of each wiring, and the serving replays of each (wiring, engine settings). Both follow the
same rules, written once here: a sample counts once per group; a sample that fails later (a bad
file, an out-of-memory error) leaves every pool it is in at once, as `eval` skips it. No Textual,
no numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from inspector.metrics import StepMetrics
    from inspector.metrics.rounds import AcceptStats
    from inspector.serving.expectation import OddsTotals

G = TypeVar("G", bound=Hashable)  # a group: a wiring, or (wiring, engine settings)
V = TypeVar("V")  # a sample's figure, and its pool: the same type (metrics add up)


@dataclass
class Total(Generic[V]):
    """The pool of one group and the number of samples in it."""

    value: V
    n_samples: int


class Totals(Generic[G, V]):
    """Each sample's figure per group (`by_sample`, keyed (sample, group)) and each group's pool.

    `pool(values, like)` sums figures (none at all gives the zero shaped like `like`: an
    `AcceptStats` keeps its depth). A drop re-pools a group from the samples that stay rather than
    subtracting: the merged counts have no inverse worth trusting, and a drop is rare."""

    def __init__(self, pool: Callable[[Iterable[V], V], V], total: type[Total[V]] = Total) -> None:
        self._pool = pool
        self._total = total  # the pools' type (state.SetTotals names its value `steps`)
        self.by_sample: dict[tuple[int, G], V] = {}
        self.pools: dict[G, Total[V]] = {}

    def add(self, i: int, group: G, value: V) -> bool:
        """Count sample i's figure in its group; False when it is counted already."""
        key = (i, group)
        if key in self.by_sample:
            return False
        self.by_sample[key] = value
        tot = self.pools.get(group)
        if tot is None:
            self.pools[group] = self._total(self._pool([value], value), 1)
        else:
            tot.value = self._pool([tot.value, value], value)
            tot.n_samples += 1
        return True

    def drop(self, i: int) -> None:
        """Sample i leaves every group it is in (a group left empty keeps a zero pool)."""
        groups = [g for (j, g) in self.by_sample if j == i]
        for g in groups:
            del self.by_sample[(i, g)]
        for g in groups:
            tot = self.pools.get(g)
            if tot is None:
                continue
            rest = [v for (_, h), v in self.by_sample.items() if h == g]
            tot.value = self._pool(rest, tot.value)
            tot.n_samples = len(rest)

    def get(self, i: int, group: G) -> V | None:
        return self.by_sample.get((i, group))

    def total(self, group: G) -> Total[V] | None:
        return self.pools.get(group)


def pool_steps(values: Iterable[list[StepMetrics]], like: list[StepMetrics]) -> list[StepMetrics]:
    """Step metrics summed step by step (`sum_steps`: ours and the trainers' counts alike)."""
    from inspector.metrics import sum_steps

    return sum_steps(values)


@dataclass
class AcceptFigure:
    """What τ pools of a replay: the walk's counts and, at a temperature, its rounds' odds."""

    stats: AcceptStats
    odds: OddsTotals | None = None  # None: greedy

    @property
    def accept_length(self) -> float | None:
        """The replay's 1 + accepted / rounds; at a temperature, its expectation on the same
        rounds (1 + sum E[a] / rounds)."""
        return self.stats.accept_length if self.odds is None else self.odds.accept_length

    @property
    def is_bound(self) -> bool:
        """A request's last round ran past what its sample knows (its count, and so its
        expectation there, is a lower bound)."""
        return self.stats.is_bound


def pool_accepts(values: Iterable[AcceptFigure], like: AcceptFigure) -> AcceptFigure:
    """Replays pooled as the engines log them (`AcceptStats.add`: rounds and emitted tokens),
    and their odds summed alike (one group's replays are all greedy, or all at one temperature)."""
    from inspector.metrics.rounds import AcceptStats

    stats = AcceptStats(like.stats.depth)
    # its own type: importing `serving.expectation` here would import torch on the UI thread
    odds = None if like.odds is None else type(like.odds)(like.odds.depth)
    for v in values:
        stats.add(v.stats)
        if odds is not None:
            assert v.odds is not None  # a group is one setting: all greedy, or all at one T
            odds.add(v.odds)
    return AcceptFigure(stats, odds)
