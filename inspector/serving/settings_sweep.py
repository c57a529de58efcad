"""`accept --sweep`: the replay of a grid of engine settings, ranked by accept length and by
the speedup each buys under a stated cost model.

One pass per topk gives every (steps, draft_tokens) of it: the beam's levels do not depend on
how deep it goes, so an s-step beam's candidates are the first topk + (s-1)*topk^2 of the
deepest one, and every budget selects from those (`beam.Candidates.select`); a chain within
the evaluator's TTT steps reads its predictions, a shorter chain their prefix
(`Replayer.a_by_starts`). Each setting is then walked and counted as its own replay would be:
vLLM's count for a chain, SGLang's for a tree, unless an engine is given.

The grid and the cost model are `cost`'s (no torch: the parser reads their defaults).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import torch

from inspector.engines import Engine, default_engine
from inspector.evaluate import Evaluator
from inspector.evaluate.report import RunReport
from inspector.formats.sample_set import SkippedSample
from inspector.metrics.rounds import AcceptStats
from inspector.serving.cost import CostModel
from inspector.serving.replay import Replayer, SampleReplay, WiringAccept
from inspector.serving.spec import DraftSpec
from inspector.serving.tree_forward import deepest
from inspector.wiring import Wiring, named_label


def groups(specs: Sequence[DraftSpec]) -> list[list[int]]:
    """Indices of `specs` by (topk, kv): each group shares one beam, one pass."""
    by: dict[tuple[int, str], list[int]] = {}
    for i, s in enumerate(specs):
        by.setdefault((s.topk, s.kv), []).append(i)
    return list(by.values())


@dataclass
class SweepRow:
    """One (wiring, setting) of the sweep: its replay pooled as `accept` pools it."""

    spec: DraftSpec
    engine: Engine
    accept: WiringAccept
    cost: CostModel
    rank_accept: int = 0  # 1 = the highest accept length of its wiring
    rank_speedup: int = 0

    @cached_property
    def stats(self) -> AcceptStats:
        """The pooled rounds, once: ranking reads them many times, and pooling walks every
        round of every sample (read after the pass has filled `accept`)."""
        return self.accept.stats

    @property
    def accept_length(self) -> float | None:
        return self.stats.accept_length

    @property
    def speedup(self) -> float | None:
        return self.cost.speedup(self.accept_length, self.spec)

    def to_dict(self) -> dict:
        st = self.stats
        return {
            "wiring": list(self.accept.wiring.slots),
            "label": self.accept.label,
            "name": self.accept.name,
            "setting": self.spec.to_dict(),
            "engine": self.engine.value,
            "flags": self.spec.flags(),
            "rounds": st.rounds,
            "accepted": st.accepted,
            "emitted": st.emitted,
            "accept_length": st.accept_length,
            "accept_length_is_lower_bound": st.is_bound,
            "per_depth": st.per_depth,
            "round_cost": self.cost.round_cost(self.spec),
            "speedup": self.speedup,
            "rank_accept_length": self.rank_accept,
            "rank_speedup": self.rank_speedup,
            "per_sample": [
                {"index": s.index, "rounds": len(s.starts), "accepted": int(s.accepted.sum())}
                for s in self.accept.per_sample
            ],
        }


def _rank(rows: list[SweepRow], key: Callable[[SweepRow], float | None]) -> list[SweepRow]:
    """Best first; ties keep grid order (the cheaper, shallower setting first); no rounds last."""
    return sorted(rows, key=lambda r: -(key(r) if key(r) is not None else float("-inf")))


@dataclass(kw_only=True)
class SweepReport(RunReport):
    rows: list[SweepRow]
    cost: CostModel
    grid: dict
    skipped_settings: list[str] = field(default_factory=list)

    def wirings(self) -> list[str]:
        """Wiring labels, in the order given."""
        return list(dict.fromkeys(r.accept.label for r in self.rows))

    def of(self, label: str) -> list[SweepRow]:
        return [r for r in self.rows if r.accept.label == label]

    def best(self, label: str) -> SweepRow | None:
        """The setting of wiring `label` with the highest speedup (None without rounds)."""
        ranked = [r for r in _rank(self.of(label), lambda r: r.speedup) if r.speedup is not None]
        return ranked[0] if ranked else None

    def to_dict(self) -> dict:
        best = {}
        for label in self.wirings():
            b = self.best(label)
            if b is not None:
                best[label] = {**b.spec.to_dict(), "flags": b.spec.flags(), "speedup": b.speedup}
        return {
            "config": {"mode": "sweep", "grid": self.grid, "cost": self.cost.to_dict()},
            "cost_model": self.cost.describe() + "; speedup = accept_length / round cost",
            **self.run_dict(),
            "settings": [r.to_dict() for r in self.rows],
            "skipped_settings": self.skipped_settings,
            "recommendation": best,
            **self.skipped_dict(),
        }


def run_sweep(
    ev: Evaluator,
    specs: Sequence[DraftSpec],
    wirings: Sequence[Wiring],
    *,
    cost: CostModel | None = None,
    engine: Engine | None = None,
    names: Sequence[str | None] | None = None,
    limit: int | None = None,
    indices: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
    skipped_settings: Sequence[str] = (),
) -> SweepReport:
    """Every setting of `specs` under every wiring, one beam per topk and sample.

    engine: whose counting every setting follows; None: each setting's own (vLLM for a chain,
    SGLang for a tree), as `accept` would count it alone."""
    cost = cost or CostModel()
    n = len(ev.samples) if limit is None else min(limit, len(ev.samples))
    todo = list(range(n)) if indices is None else [i for i in indices if i < n]
    engines = [engine if engine is not None else default_engine(s.is_chain) for s in specs]
    parts = groups(specs)
    reps = {tuple(g): Replayer(ev, deepest([specs[i] for i in g])) for g in parts}
    rows = [
        SweepRow(
            spec,
            eng,
            WiringAccept(w, named_label(w, ev.slot_info, nm), spec.steps, name=nm),
            cost,
        )
        for w, nm in zip(wirings, names or [None] * len(wirings), strict=True)
        for spec, eng in zip(specs, engines, strict=True)
    ]
    skipped: list[SkippedSample] = []

    def replay(i: int) -> list[SampleReplay]:
        out: list[SampleReplay | None] = [None] * len(rows)
        for wi, w in enumerate(wirings):
            for g, rep in reps.items():
                a = rep.a_by_starts(i, w, [specs[j] for j in g], keep=False)
                for j, aj in zip(g, a, strict=True):
                    out[wi * len(specs) + j] = rep.sample_replay(i, aj, specs[j], engines[j])
        return [r for r in out if r is not None]

    with torch.inference_mode():
        for _, results in ev.each_sample(todo, replay, skipped, progress):
            for row, r in zip(rows, results, strict=True):
                row.accept.per_sample.append(r)
    for label in dict.fromkeys(r.accept.label for r in rows):
        mine = [r for r in rows if r.accept.label == label]
        for rank, r in enumerate(_rank(mine, lambda r: r.accept_length), start=1):
            r.rank_accept = rank
        for rank, r in enumerate(_rank(mine, lambda r: r.speedup), start=1):
            r.rank_speedup = rank
    grid = {
        "steps": sorted({s.steps for s in specs}),
        "topk": sorted({s.topk for s in specs}),
        "draft_tokens": sorted({s.draft_tokens for s in specs if not s.is_chain}),
        "kv": specs[0].kv,
        "engine": engine.value if engine is not None else None,
    }
    return SweepReport(
        **SweepReport.fields_of(ev, todo, skipped),
        rows=rows,
        cost=cost,
        grid=grid,
        skipped_settings=list(skipped_settings),
    )
