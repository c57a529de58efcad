"""Two drafts' replays over the same samples, paired by sample: the accept length of each (1 +
accepted / rounds, pooled as the engines log it), B - A with a paired bootstrap interval over the
requests, the difference by draft depth, by context bucket and by the samples' category (where
they name one: SPEED-Bench's coding, math, ...), and the round starts where one draft accepts
more than the other.

Torch-free: it reads two `WiringAccept`s (each one `Replayer.run` over its own evaluator), so a
comparison costs two replays and the bootstrap.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from inspector.metrics.rounds import BUCKET_TOKENS
from inspector.serving.replay import SampleReplay, WiringAccept
from inspector.stats.bootstrap import DEFAULT_LEVEL, DEFAULT_RESAMPLES, PairedDiff, Resampler

FIRST_POSITIONS = 5  # the round starts quoted per direction


@dataclass(frozen=True)
class Disagreements:
    """Round starts (every position the replay drafts a round after) where one draft accepts
    more than the other, and the first few of each direction as (sample index, position)."""

    a_more: int
    b_more: int
    first_a_more: list[tuple[int, int]]
    first_b_more: list[tuple[int, int]]

    def to_dict(self) -> dict:
        return {
            "a_more": self.a_more,
            "b_more": self.b_more,
            "first_a_more": [{"sample": s, "position": p} for s, p in self.first_a_more],
            "first_b_more": [{"sample": s, "position": p} for s, p in self.first_b_more],
        }


@dataclass
class Comparison:
    """B against A over the requests both replays read (paired by sample index)."""

    a: WiringAccept
    b: WiringAccept
    indices: list[int]  # the samples compared
    accept_length: PairedDiff  # a, b: accepted / rounds; add 1 for the accept length
    per_depth: list[PairedDiff]  # [k]: the share of rounds accepting at least k + 1 tokens
    by_bucket: list[tuple[int, PairedDiff]] = field(default_factory=list)  # (bucket start, ...)
    disagreements: Disagreements = field(default_factory=lambda: Disagreements(0, 0, [], []))
    resamples: int = DEFAULT_RESAMPLES
    seed: int = 0
    # (category, its requests, B - A over them), where the samples name categories
    by_category: list[tuple[str, int, PairedDiff]] = field(default_factory=list)

    @property
    def accept_length_a(self) -> float | None:
        x = self.accept_length.a
        return None if x is None else 1 + x

    @property
    def accept_length_b(self) -> float | None:
        x = self.accept_length.b
        return None if x is None else 1 + x

    def to_dict(self) -> dict:
        al = self.accept_length
        return {
            "samples": len(self.indices),
            "resamples": self.resamples,
            "seed": self.seed,
            "level": al.level,
            "accept_length": {
                "a": self.accept_length_a,
                "b": self.accept_length_b,
                "diff": al.diff,
                "ci_low": al.low,
                "ci_high": al.high,
            },
            "rounds": {"a": _rounds(self.a, self.indices), "b": _rounds(self.b, self.indices)},
            "per_depth": [{"depth": k + 1, **d.to_dict()} for k, d in enumerate(self.per_depth)],
            "by_bucket": [
                {
                    "start": s,
                    "end": s + BUCKET_TOKENS,
                    **_shifted(d),
                }
                for s, d in self.by_bucket
            ],
            "by_category": [
                {"category": c, "requests": n, **_shifted(d)} for c, n, d in self.by_category
            ],
            "disagreements": self.disagreements.to_dict(),
        }


def _shifted(d: PairedDiff) -> dict:
    """A bucket's figures as accept lengths (1 + accepted / rounds); the difference unchanged."""
    out = d.to_dict()
    for k in ("a", "b"):
        if out[k] is not None:
            out[k] = 1 + out[k]
    return out


def _rounds(w: WiringAccept, indices: list[int]) -> int:
    by = {s.index: s for s in w.per_sample}
    return int(sum(len(by[i].starts) for i in indices))


def _per_sample(reps: list[SampleReplay], depth: int, buckets: list[int]) -> dict[str, np.ndarray]:
    """Per request: rounds, accepted, rounds accepting >= k + 1 (per k), and per context bucket
    its rounds and accepted."""
    n = len(reps)
    out = {
        "rounds": np.array([len(r.starts) for r in reps], dtype=np.float64),
        "accepted": np.array([r.accepted.sum() for r in reps], dtype=np.float64),
        "at_least": np.zeros((depth, n)),
        "bucket_rounds": np.zeros((len(buckets), n)),
        "bucket_accepted": np.zeros((len(buckets), n)),
    }
    col = {b: j for j, b in enumerate(buckets)}
    for i, r in enumerate(reps):
        for k in range(depth):
            out["at_least"][k, i] = (r.accepted >= k + 1).sum()
        for b, a in zip(r.starts // BUCKET_TOKENS, r.accepted, strict=True):
            out["bucket_rounds"][col[int(b)], i] += 1
            out["bucket_accepted"][col[int(b)], i] += a
    return out


def disagreements(
    a: list[SampleReplay], b: list[SampleReplay], first: int = FIRST_POSITIONS
) -> Disagreements:
    """Where a round starting after x_n would accept more under one draft than the other
    (a_by_start: 0 where no round can start under either), in sample then position order."""
    a_more = b_more = 0
    fa: list[tuple[int, int]] = []
    fb: list[tuple[int, int]] = []
    for ra, rb in zip(a, b, strict=True):
        m = min(len(ra.a_by_start), len(rb.a_by_start))
        xa, xb = ra.a_by_start[:m], rb.a_by_start[:m]
        pa, pb = np.flatnonzero(xa > xb), np.flatnonzero(xb > xa)
        a_more += pa.size
        b_more += pb.size
        fa += [(ra.index, int(p)) for p in pa[: max(0, first - len(fa))]]
        fb += [(rb.index, int(p)) for p in pb[: max(0, first - len(fb))]]
    return Disagreements(a_more, b_more, fa, fb)


def compare(
    a: WiringAccept,
    b: WiringAccept,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    first: int = FIRST_POSITIONS,
) -> Comparison:
    """B against A over the samples both replayed (a sample one of them skipped is left out of
    both), with one paired bootstrap draw for every figure."""
    if a.depth != b.depth:
        raise ValueError("the two replays ran under different draft steps")
    by_a = {s.index: s for s in a.per_sample}
    by_b = {s.index: s for s in b.per_sample}
    indices = sorted(by_a.keys() & by_b.keys())
    ra, rb = [by_a[i] for i in indices], [by_b[i] for i in indices]
    buckets = sorted(
        {int(x) for r in ra + rb for x in np.unique(np.asarray(r.starts) // BUCKET_TOKENS)}
    )
    sa, sb = _per_sample(ra, a.depth, buckets), _per_sample(rb, b.depth, buckets)
    rs = Resampler(len(indices), resamples=resamples, seed=seed, level=level)
    overall = rs.ratio_diff(sa["accepted"], sa["rounds"], sb["accepted"], sb["rounds"])
    depth = [
        rs.ratio_diff(sa["at_least"][k], sa["rounds"], sb["at_least"][k], sb["rounds"])
        for k in range(a.depth)
    ]
    by_bucket = [
        (
            bk * BUCKET_TOKENS,
            rs.ratio_diff(
                sa["bucket_accepted"][j],
                sa["bucket_rounds"][j],
                sb["bucket_accepted"][j],
                sb["bucket_rounds"][j],
            ),
        )
        for j, bk in enumerate(buckets)
    ]
    # a category's requests only: the same draw, the others' counts zeroed, so a resample
    # without any of its requests is left out (its denominator is 0)
    cats = [r.category if r.category is not None else rb[i].category for i, r in enumerate(ra)]
    by_category = []
    for c in sorted({x for x in cats if x is not None}):
        m = np.array([x == c for x in cats], dtype=np.float64)
        d = rs.ratio_diff(
            sa["accepted"] * m, sa["rounds"] * m, sb["accepted"] * m, sb["rounds"] * m
        )
        by_category.append((c, int(m.sum()), d))
    return Comparison(
        a,
        b,
        indices,
        overall,
        depth,
        by_bucket,
        disagreements(ra, rb, first),
        resamples,
        seed,
        by_category,
    )
