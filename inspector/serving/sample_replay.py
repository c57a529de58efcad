"""One sample's replayed rounds (`SampleReplay`): the rounds an engine takes through it, as
arrays, with what they were walked from, so that the same sample can be walked again under the
engine's own schedule of drafted tokens (`rescheduled`: vLLM's per-request `per_step_drafted`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from inspector.engines import Engine
from inspector.metrics import Counts
from inspector.metrics.rounds import AcceptStats, Round, Run, generation_runs, walk
from inspector.sample import Continuation
from inspector.serving.expectation import SampleOdds

__all__ = ["SampleReplay", "sample_runs"]


def sample_runs(loss_mask: np.ndarray, continuation: Continuation | None) -> list[Run]:
    """The sample's generation runs, each knowing how far the target's continuation is known:
    to its own end, and for a run that ends the sample, through the continuation past it."""
    t = int(np.asarray(loss_mask).size)
    out = []
    for p, e in generation_runs(loss_mask):
        if continuation is not None and e == t - 1:
            out.append(Run(p, e, e + continuation.length, continuation.finish))
        else:
            out.append(Run(p, e, e))
    return out


@dataclass
class SampleReplay:
    """The rounds through one sample, as arrays (one entry per round)."""

    index: int
    path: str
    starts: np.ndarray
    accepted: np.ndarray  # the engine's count per round (past the stop in a last round)
    emitted: np.ndarray
    a_by_start: np.ndarray  # [T (+ C)]: what a round starting after x_n would accept
    depth: int
    # positions whose token is not the target's own argmax, of the positions generated
    off_target: Counts | None = None
    bounded: np.ndarray | None = None  # bool per round: the count is a lower bound
    after_stop: np.ndarray | None = None  # bool per round: SGLang's round after the stop
    # SGLang's per-request figure: completion tokens (the prefill's included) / verify rounds
    completion_tokens: int = 0
    # at a temperature (the live loop): each round's odds under the verification rule
    odds: SampleOdds | None = None
    category: str | None = None  # the request's category, where its sample names one
    # tokens each round drafted, where they are not all `depth` (a schedule's; a live loop that
    # stopped drafting early); 0: a round that drafted nothing (no draft, not counted)
    drafted: np.ndarray | None = None
    # what the rounds were walked from (None: a live loop's own rounds, not walked): the
    # sample's runs and the engine, so that `rescheduled` walks them again
    runs: tuple[Run, ...] | None = None
    engine: Engine = Engine.VLLM

    def __post_init__(self) -> None:
        if self.bounded is None:
            self.bounded = np.zeros(len(self.starts), dtype=bool)
        if self.after_stop is None:
            self.after_stop = np.zeros(len(self.starts), dtype=bool)

    @classmethod
    def of(
        cls,
        index: int,
        path: str,
        a_by_start: np.ndarray,
        loss_mask: np.ndarray,
        depth: int,
        off_target: Counts | None = None,
        *,
        continuation: Continuation | None = None,
        engine: Engine = Engine.VLLM,
        category: str | None = None,
        schedule: Sequence[int] | None = None,
    ) -> SampleReplay:
        """The rounds `engine` takes through the sample (`walk`), each drafting `depth` tokens
        or as `schedule` gives them."""
        runs = tuple(sample_runs(loss_mask, continuation))
        out = cls(
            index,
            path,
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
            a_by_start,
            depth,
            off_target,
            completion_tokens=sum(r.end - r.start + 1 for r in runs),
            category=category,
            runs=runs,
            engine=engine,
        )
        return out._walked(schedule)

    def _walked(self, schedule: Sequence[int] | None) -> SampleReplay:
        """This sample's rounds walked (again) under `schedule` (None: `depth` every round)."""
        assert self.runs is not None
        rounds = walk(
            self.a_by_start, self.runs, depth=self.depth, engine=self.engine, schedule=schedule
        )
        arr = np.array(
            [[r.start, r.accepted, r.emitted, r.bounded, r.after_stop] for r in rounds],
            dtype=np.int64,
        ).reshape(-1, 5)
        drafted = None
        if schedule is not None or self.engine.caps_at_remaining:
            drafted = np.array([r.drafted for r in rounds], dtype=np.int64)
        return SampleReplay(
            self.index,
            self.path,
            arr[:, 0],
            arr[:, 1],
            arr[:, 2],
            self.a_by_start,
            self.depth,
            self.off_target,
            arr[:, 3].astype(bool),
            arr[:, 4].astype(bool),
            self.completion_tokens,
            self.odds,
            self.category,
            drafted,
            self.runs,
            self.engine,
        )

    def rescheduled(self, schedule: Sequence[int]) -> SampleReplay:
        """The same sample walked with each round drafting what `schedule` gives it (the
        engine's own per-round counts, in order; rounds past its end draft `depth`; 0: no
        draft). A live loop's rounds (not walked from a_by_start) are returned as they are
        where they already drafted so; otherwise they cannot be re-walked (ValueError)."""
        plan = [int(d) for d in schedule]
        own = self.drafted_per_round()
        if all((plan[i] if i < len(plan) else self.depth) == d for i, d in enumerate(own)):
            return self
        if self.runs is None:
            raise ValueError(
                "the live loop's rounds are its own: they cannot be walked under another "
                "schedule of drafted tokens"
            )
        return self._walked(plan)

    def without_overlap_round(self) -> SampleReplay:
        """This request as SGLang counts it without its overlap scheduler (`--sglang-overlap
        off`; SGLang 0.5.23 forces it off for speculative decoding on CPU,
        srt/arg_groups/speculative_hook.py): the round run after the stop is neither run
        nor counted. Dropping it is exact: it came after every round the request used."""
        assert self.after_stop is not None
        keep = ~self.after_stop
        if keep.all():
            return self
        odds = self.odds
        if odds is not None:
            odds = SampleOdds(odds.expected[keep], odds.variance[keep], odds.at_least[keep])
        return replace(
            self,
            starts=self.starts[keep],
            accepted=self.accepted[keep],
            emitted=self.emitted[keep],
            bounded=None if self.bounded is None else self.bounded[keep],
            after_stop=self.after_stop[keep],
            drafted=None if self.drafted is None else self.drafted[keep],
            odds=odds,
        )

    def drafted_per_round(self) -> list[int]:
        """Tokens each round drafted (`depth` where no schedule says otherwise)."""
        if self.drafted is None:
            return [self.depth] * len(self.starts)
        return [int(d) for d in self.drafted]

    @property
    def rounds(self) -> list[Round]:
        drafted = [None] * len(self.starts) if self.drafted is None else self.drafted.tolist()
        return [
            Round(int(s), int(a), int(e), bool(b), bool(x), d)
            for s, a, e, b, x, d in zip(
                self.starts,
                self.accepted,
                self.emitted,
                self.bounded,
                self.after_stop,
                drafted,
                strict=True,
            )
        ]

    def to_dict(self) -> dict:
        d: dict = {
            "index": self.index,
            "path": self.path,
            "accepted": self.accepted.tolist(),
            "emitted": self.emitted.tolist(),
        }
        if self.drafted is not None and bool((self.drafted != self.depth).any()):
            d["drafted"] = self.drafted.tolist()
        if self.bounded.any():
            d["lower_bound"] = True
        if self.after_stop.any():
            d["rounds_after_stop"] = int(self.after_stop.sum())
        d["spec_accept_length"] = self.spec_accept_length
        if self.odds is not None:
            d.update(self.odds.to_dict())
        if self.category is not None:
            d["category"] = self.category
        return d

    @property
    def spec_accept_length(self) -> float | None:
        """SGLang's per-request meta_info.spec_accept_length: completion tokens (the prefill's
        included, cut at the stop) / spec_verify_ct, which leaves the round after the stop out."""
        n = int((~self.after_stop).sum())
        return self.completion_tokens / n if n else None

    @property
    def stats(self) -> AcceptStats:
        return AcceptStats.of(self.rounds, self.depth)
