"""The rounds an engine takes through a sample, and the numbers it logs for them.

A sample's tokens x_0..x_{T-1}; each maximal run of loss-masked tokens x_P..x_E is one generation.
Its first token x_P was emitted by the prefill, so the first round starts with x_0..x_P committed.
A round with x_0..x_n committed drafts from row n-1; it emits a + 1 tokens (the target's bonus
token included, never past x_E), and the next round starts at n + a + 1, until nothing is left to
emit.

What the round *counts*, a, is what the engines count: the drafted tokens that match the target's
own continuation x_{n+1}, x_{n+2}, ..., in the last round also past x_E (the engines take the count
before the stop trims the output). Past x_E the sample may hold the target's continuation (a
capture writes it, outside the request: `Sample.continuation`); where it does not, the last round's
count is a lower bound and the round says so (`bounded`).

The engines' accept length is 1 + accepted / rounds, pooled over every round of every request;
vLLM's per-position acceptance rate k is the share of rounds that accepted at least k + 1 drafted
tokens. SGLang's overlap scheduler adds one round after a request's stop (`engines`).

A round drafts the spec's depth, or where the engine's own schedule is known (vLLM's per-request
`per_step_drafted`; a live loop that stops drafting early), the number of tokens the schedule
gives it: a chain's first d drafted tokens are those of its deeper chain, so such a round counts
min(a, d). A round scheduled 0 drafts nothing: it emits the target's one token and is no draft.
vLLM 0.32 counts a round only where the request had scheduled draft tokens (v1/core/sched/
scheduler.py for the per-request metrics; `make_spec_decoding_stats` 2969 for the
pooled `num_drafts`), so such a round is left out of the rounds, as it is of vLLM's counts.

llama.cpp's `llama-server` caps every round by the request's room: it drafts min(k, remaining - 1)
tokens, remaining = max new tokens - generated, and a round with no room (the request's last
token) is a plain decode, not counted (`engines`). For a run that ended by length x_E is the
max-tokens' last, so a round after x_n drafts at most E - n - 1; a run that stopped by EOS does
not show its max tokens and drafts k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from inspector.engines import Engine

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
class Run:
    """One generation x_P..x_E of a sample, and how far the target's own continuation is known:
    up to x_known (E, or further where the sample carries the continuation past its stop)."""

    start: int  # P: the prefill emitted x_P
    end: int  # E: the last token the request received
    known: int  # the last position whose token is the target's continuation
    finish: str = "length"  # "length" (max tokens) or "stop" (EOS): SGLang's overlap round

    @classmethod
    def of(cls, run: tuple[int, int] | Run) -> Run:
        return run if isinstance(run, Run) else cls(run[0], run[1], run[1])


@dataclass(frozen=True)
class Round:
    start: int  # n: the round drafts after committed x_0..x_n
    accepted: int  # a: the drafted tokens the engine counts as accepted
    emitted: int  # tokens the request received: a + 1, or fewer at its stop (0 after it)
    bounded: bool = False  # a is a lower bound: the continuation past the stop is not known
    after_stop: bool = False  # SGLang's overlap round, run and counted after the request's stop
    # tokens the round drafted where a schedule gave them (None: the spec's depth); 0: the round
    # drafted nothing, emitted the target's token and is no draft (left out of the counts)
    drafted: int | None = None

    @property
    def is_draft(self) -> bool:
        return self.drafted != 0


def _counted(a_by_start: np.ndarray, n: int, known: int, depth: int) -> tuple[int, bool]:
    """(a, bounded) of a round after x_n that drafts `depth` tokens (0: no cap is a lower bound)
    when the target's continuation is known up to x_known: a_by_start[n] was computed on tokens
    that may run past x_known (another turn's text), so it is capped there; a cap below the
    round's depth leaves a lower bound. A chain's first `depth` drafted tokens are those of the
    deeper chain a_by_start counts, so a shallower round accepts min(a, depth)."""
    room = known - n
    if room <= 0 or n >= len(a_by_start):
        # nothing of the target's continuation after x_n is known (or was drafted over)
        return 0, depth > 0
    raw = int(a_by_start[n])
    if depth > 0:
        raw = min(raw, depth)
    return min(raw, room), raw >= room and room < depth


def _overlap_round(run: Run, last: Round | None) -> bool:
    """Whether SGLang's overlap scheduler runs (and counts) a round after this run's stop: it
    skips only a request sure to end by length with its next token (output + 1 >= max new
    tokens before the last round), which a run ending by length shows as a last round after
    x_E-1; a stop by EOS, even at the prefill, is never known in advance."""
    if run.finish == "stop":
        return True
    return last is not None and run.end - last.start > 1


def check_schedule(schedule: Sequence[int], depth: int | None) -> list[int]:
    """The schedule as a list, refused where a round would draft more than `depth` (what
    a_by_start counts) or a negative number of tokens."""
    plan = [int(d) for d in schedule]
    if depth is None:
        raise ValueError("a schedule needs the depth a_by_start was counted to")
    bad = next((d for d in plan if not 0 <= d <= depth), None)
    if bad is not None:
        raise ValueError(f"a round scheduled to draft {bad} tokens: the replay counts 0..{depth}")
    return plan


def walk(
    a_by_start: np.ndarray,
    runs: Sequence[tuple[int, int] | Run],
    *,
    depth: int | None = None,
    engine: Engine = Engine.VLLM,
    schedule: Sequence[int] | None = None,
) -> list[Round]:
    """The rounds through each run; a_by_start[n] is how many drafted tokens of a round starting
    after x_n match x_{n+1}, ... (computed on every token the sample has, its continuation past
    the stop included; positions past x_T-1 index that continuation).

    depth: the most tokens a round drafts (None: no cap is a lower bound, the old reading).
    engine: SGLang adds its overlap round after a request's stop (see `engines`).
    schedule: the tokens each round drafts, in the order the rounds run (the engine's own, as
      its log gives them), each 0..depth; a round past its end drafts `depth`. A round scheduled
      0 emits one token and is no draft (the module docstring)."""
    out: list[Round] = []
    cap = depth if depth is not None else 0
    plan = check_schedule(schedule, depth) if schedule is not None else None

    def drafts() -> int | None:
        if plan is None:
            return None
        return plan[len(out)] if len(out) < len(plan) else cap

    for run in map(Run.of, runs):
        p, e = run.start, run.end
        n = p
        last: Round | None = None
        while n < e:
            d = _room_capped(engine, run, n, drafts(), depth)
            if d == 0:  # no draft: the target's one token
                last = Round(n, 0, 1, drafted=0)
                out.append(last)
                n += 1
                continue
            a, bounded = _counted(a_by_start, n, run.known, cap if d is None else d)
            emitted = min(a + 1, e - n)
            last = Round(n, a, emitted, bounded, drafted=d)
            out.append(last)
            n += emitted
        if engine.overlap_round and _overlap_round(run, last):
            # the next round was launched before this one's result was read: it drafts after
            # the whole accepted path and the bonus, past the stop
            n2 = p if last is None else last.start + last.accepted + 1
            d = drafts()
            depth_here = cap if d is None else d
            if d == 0 or (last is not None and last.bounded):
                out.append(Round(n2, 0, 0, depth_here > 0 and d != 0, True, d))
            else:
                a, bounded = _counted(a_by_start, n2, run.known, depth_here)
                out.append(Round(n2, a, 0, bounded, True, d))
    return out


def _room_capped(engine: Engine, run: Run, n: int, d: int | None, depth: int | None) -> int | None:
    """The tokens a round after x_n drafts under the engine's rule: llama.cpp's server drafts at
    most the room left before max tokens less one (E - n - 1 in a run that ended by length,
    `get_n_draft_max`, tools/server/server-context.cpp); no room: 0, a plain decode."""
    if not engine.caps_at_remaining or run.finish != "length":
        return d
    room = max(run.end - n - 1, 0)
    want = d if d is not None else depth
    return room if want is None else min(want, room)


@dataclass
class AcceptStats:
    """Pooled counts over rounds (of one sample, or summed over many)."""

    depth: int  # the most tokens a round can accept (the draft's steps)
    rounds: int = 0
    accepted: int = 0
    emitted: int = 0
    bounded: int = 0  # rounds whose count is a lower bound (one per request at most)
    after_stop: int = 0  # SGLang's overlap rounds after a request's stop
    undrafted: int = 0  # rounds that drafted nothing (a schedule's 0): no drafts, not counted
    at_least: list[int] = field(default_factory=list)  # [k]: rounds with a >= k + 1
    buckets: dict[int, list[int]] = field(default_factory=dict)  # bucket -> [rounds, accepted]

    def __post_init__(self) -> None:
        if not self.at_least:
            self.at_least = [0] * self.depth

    @classmethod
    def of(cls, rounds: list[Round], depth: int, bucket: int = BUCKET_TOKENS) -> AcceptStats:
        s = cls(depth)
        for r in rounds:
            if not r.is_draft:
                if not r.after_stop:
                    s.undrafted += 1
                    s.emitted += r.emitted
                continue
            s.rounds += 1
            s.accepted += r.accepted
            s.emitted += r.emitted
            s.bounded += r.bounded
            s.after_stop += r.after_stop
            for k in range(min(r.accepted, depth)):
                s.at_least[k] += 1
            b = s.buckets.setdefault(r.start // bucket, [0, 0])
            b[0] += 1
            b[1] += r.accepted
        return s

    def add(self, other: AcceptStats) -> None:
        self.rounds += other.rounds
        self.accepted += other.accepted
        self.emitted += other.emitted
        self.bounded += other.bounded
        self.after_stop += other.after_stop
        self.undrafted += other.undrafted
        self.at_least = [a + b for a, b in zip(self.at_least, other.at_least, strict=True)]
        for k, (n, e) in other.buckets.items():
            b = self.buckets.setdefault(k, [0, 0])
            b[0] += n
            b[1] += e

    @property
    def accept_length(self) -> float | None:
        """1 + accepted / rounds, as both engines log it; None without rounds. A lower bound
        where `bounded` rounds are counted (see `is_bound`)."""
        return 1 + self.accepted / self.rounds if self.rounds else None

    @property
    def is_bound(self) -> bool:
        """Whether `accept_length` is a lower bound: some request's last round ran into the end
        of what the sample knows of the target's continuation."""
        return self.bounded > 0

    @property
    def emitted_per_round(self) -> float | None:
        """Tokens the requests received per round (the last round cut at the stop; the
        overlap rounds after a stop left out, the rounds without a draft in): the old reading,
        under its own name."""
        n = self.rounds - self.after_stop + self.undrafted
        return self.emitted / n if n else None

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
                "accept_length": 1 + a / n,
            }
            for k, (n, a) in sorted(self.buckets.items())
        ]
