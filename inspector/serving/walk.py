"""The rounds an engine takes through a sample, and the numbers it logs for them.

A sample's tokens x_0..x_{T-1}; each maximal run of loss-masked tokens x_P..x_E is one generation.
Its first token x_P was emitted by the prefill, so the first round starts with x_0..x_P committed.
A round with x_0..x_n committed accepts a = the drafted tokens matching x_{n+1}, x_{n+2}, ...
(never past x_E), emits a + 1 tokens (the target's bonus token included, never past x_E), and the
next round starts at n + a + 1, until nothing is left to emit.

The engines' accept length is emitted tokens per round, pooled over every round of every request
(SGLang's `accept len` log line, vLLM's "Mean acceptance length"); vLLM's per-position acceptance
rate k is the share of rounds that accepted at least k + 1 drafted tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

BUCKET_TOKENS = 1024  # the context-length buckets of `by_position`


def generation_runs(loss_mask: np.ndarray) -> list[tuple[int, int]]:
    """(P, E) of every maximal run of masked positions, inclusive. Position 0 cannot be
    generated (no token precedes it), so a run starting there starts at 1."""
    m = np.asarray(loss_mask).astype(bool).copy()
    if m.size:
        m[0] = False
    edges = np.flatnonzero(np.diff(np.concatenate(([0], m.astype(np.int8), [0]))))
    return [(int(p), int(e) - 1) for p, e in zip(edges[::2], edges[1::2], strict=True)]


def chain_accepts(hits: Sequence[np.ndarray], length: int) -> np.ndarray:
    """a_by_start [T] of a chain from teacher-forced TTT hits (hits[k][j]: step k at row j
    predicted x_{j+2+k}). A chain step that follows accepted tokens is fed exactly what
    teacher-forced TTT feeds (the draft's own output and the true token), so a round after
    committed x_0..x_n, drafting from row n-1, accepts the leading steps that hit there."""
    a = np.zeros(length, dtype=np.int64)
    chain = np.ones(max(0, length - 1), dtype=bool)
    for hit in hits:
        h = np.zeros_like(chain)
        h[: len(hit)] = hit
        chain &= h
        a[1:] += chain
    return a


@dataclass(frozen=True)
class Round:
    start: int  # n: the round drafts after committed x_0..x_n
    accepted: int  # a
    emitted: int  # a + 1, or fewer at the end of the run


def walk(a_by_start: np.ndarray, runs: list[tuple[int, int]]) -> list[Round]:
    """The rounds through each run; a_by_start[n] is how many drafted tokens of a round starting
    after x_n match x_{n+1}, ... (uncapped: the run's end caps it here)."""
    out: list[Round] = []
    for p, e in runs:
        n = p
        while n < e:
            a = min(int(a_by_start[n]), e - n)
            emitted = min(a + 1, e - n)
            out.append(Round(n, a, emitted))
            n += emitted
    return out


@dataclass
class AcceptStats:
    """Pooled counts over rounds (of one sample, or summed over many)."""

    depth: int  # the most tokens a round can accept (the draft's steps)
    rounds: int = 0
    accepted: int = 0
    emitted: int = 0
    at_least: list[int] = field(default_factory=list)  # [k]: rounds with a >= k + 1
    buckets: dict[int, list[int]] = field(default_factory=dict)  # bucket -> [rounds, emitted]

    def __post_init__(self) -> None:
        if not self.at_least:
            self.at_least = [0] * self.depth

    @classmethod
    def of(cls, rounds: list[Round], depth: int, bucket: int = BUCKET_TOKENS) -> AcceptStats:
        s = cls(depth)
        for r in rounds:
            s.rounds += 1
            s.accepted += r.accepted
            s.emitted += r.emitted
            for k in range(min(r.accepted, depth)):
                s.at_least[k] += 1
            b = s.buckets.setdefault(r.start // bucket, [0, 0])
            b[0] += 1
            b[1] += r.emitted
        return s

    def add(self, other: AcceptStats) -> None:
        self.rounds += other.rounds
        self.accepted += other.accepted
        self.emitted += other.emitted
        self.at_least = [a + b for a, b in zip(self.at_least, other.at_least, strict=True)]
        for k, (n, e) in other.buckets.items():
            b = self.buckets.setdefault(k, [0, 0])
            b[0] += n
            b[1] += e

    @property
    def accept_length(self) -> float | None:
        """Tokens emitted per round (the bonus token included); None without rounds."""
        return self.emitted / self.rounds if self.rounds else None

    @property
    def per_depth(self) -> list[float | None]:
        """[k]: the share of rounds that accepted at least k + 1 drafted tokens (vLLM's
        per-position acceptance rate; non-increasing; also what its synthetic rates take)."""
        return [c / self.rounds if self.rounds else None for c in self.at_least]

    def by_position(self, bucket: int = BUCKET_TOKENS) -> list[dict]:
        return [
            {
                "start": k * bucket,
                "end": (k + 1) * bucket,
                "rounds": n,
                "accept_length": e / n,
            }
            for k, (n, e) in sorted(self.buckets.items())
        ]
