"""What the app shows of a block draft (DFlash, DFlash2) over samples: per sample and wiring the
blocks (`block_eval.predict_blocks`, cached), per position in one block the draft's token, the
true one, p and rank; per wiring the set's accuracy by block position and accept length (the
same `BlockWiringReport` `eval` prints); the slots' norms. The app's worker computes them, the
app only displays what is computed. Memory stays bounded however many samples are browsed:
samples are read from the set by index, blocks kept in a `ByteLRU`."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from inspector.cache import ByteLRU
from inspector.draft import Draft
from inspector.engines import Engine
from inspector.evaluate.block_eval import (
    COUNTED_BY,
    BlockPredictions,
    BlockWiringReport,
    block_of,
    predict_blocks,
)
from inspector.sample import Sample
from inspector.wiring import Wiring, WiringKey


@dataclass(frozen=True)
class BlockRow:
    """Block position k (1..B-1) of the block drafted after committed x_0..x_n."""

    position: int
    at: int  # n + k: the sample position it drafts
    pred: int
    true: int  # -1 past the sample
    p: float  # p of the true token
    rank: int  # of the true token (0: the draft's top)
    hit: bool
    scored: bool  # x_{n+k} is a generated token of the anchor's run
    accepted: bool  # inside the block's accepted prefix (every position before it hit too)


def slot_norms_of(sample: Sample) -> list[float]:
    """Per slot, the mean L2 norm of the sample's rows (accumulated in float32, no copy)."""
    return [
        float(torch.linalg.vector_norm(s, dim=-1, dtype=torch.float32).mean()) for s in sample.slots
    ]


class BlockBrowser:
    """A block draft over samples of a set, read by index when computed, never held here.

    Two sides: the worker's (`prepare`, `totals`: they read a sample and run the forward) and
    the view's (`cached`, `anchors`, `rows`, `sample_accuracy`, `slot_norms`, `has_totals`,
    `cached_totals`: they read what the worker left, None where it has not run). Each sample's
    blocks are kept in a `ByteLRU` bounded by the budget's `app_predictions` share, plus the
    last one prepared (so the one on screen is shown whatever its size); the set's totals read
    each sample once and keep none of its blocks. A lock guards the caches: the worker threads
    write them, the UI thread reads them."""

    def __init__(
        self,
        draft: Draft,
        sample_set,
        indices: Sequence[int],
        engines: Sequence[Engine] = COUNTED_BY,
        *,
        cache_bytes: int | None = None,
    ) -> None:
        from inspector.memory import resolve_budget

        self.draft = draft
        self.block = block_of(draft)
        self.sample_set = sample_set
        self.indices = list(indices)  # the set's index of each browsable sample
        self.engines = tuple(engines)
        if cache_bytes is None:
            cache_bytes = resolve_budget(None, draft.device).host_share("app_predictions")
        self._blocks: ByteLRU[tuple[int, WiringKey], BlockPredictions] = ByteLRU(cache_bytes)
        self._last: tuple[tuple[int, WiringKey], BlockPredictions] | None = None
        self._norms: ByteLRU[int, list[float]] = ByteLRU(cache_bytes, sizeof=lambda v: 8 * len(v))
        self._totals: dict[WiringKey, BlockWiringReport] = {}
        self._lock = threading.Lock()
        self.fc_norms = draft.fc_block_norms()
        self.slot_info = list(sample_set.slot_info)

    def __len__(self) -> int:
        return len(self.indices)

    def sample(self, j: int) -> Sample:
        """The j-th browsable sample, read from the set (its own byte-bounded cache)."""
        return self.sample_set[self.indices[j]]

    # -- the worker's side: these run the forward -------------------------------------------

    def blocks(self, j: int, wiring: Wiring) -> BlockPredictions:
        """Every block of the j-th sample under `wiring`, computed where not kept."""
        key = (j, wiring.slots)
        got = self.cached(j, wiring)
        if got is not None:
            return got
        bp = predict_blocks(self.draft, self.sample(j), wiring)
        with self._lock:
            self._blocks.put(key, bp)
            self._last = (key, bp)
        return bp

    def prepare(self, j: int, wiring: Wiring) -> None:
        """What the view shows of the j-th sample under `wiring`: its blocks and slot norms."""
        self.blocks(j, wiring)
        with self._lock:
            have = j in self._norms
        if not have:
            norms = slot_norms_of(self.sample(j))
            with self._lock:
                self._norms.put(j, norms)

    def totals(self, wiring: Wiring, name: str | None = None) -> BlockWiringReport:
        """The set's figures under `wiring` (accuracy and mean p by block position, the accept
        length as each engine counts it), over every sample, each read, scored and dropped."""
        with self._lock:
            done = self._totals.get(wiring.slots)
        if done is not None:
            return done
        infos = self.slot_info
        layers = tuple(infos[i].hf_index if i < len(infos) else None for i in wiring.slots)
        rep = BlockWiringReport(
            name,
            wiring.label(infos),
            wiring.slots,
            layers,
            self.block.block_size,
            self.engines,
            drafts=self.block.drafts_per_block,
        )
        for j, index in enumerate(self.indices):
            sample = self.sample(j)
            bp = self.cached(j, wiring) or predict_blocks(self.draft, sample, wiring)
            rep.add(index, sample.path, bp, False)
            del sample, bp
        with self._lock:
            self._totals[wiring.slots] = rep
        return rep

    # -- the view's side: cached results only -------------------------------------------------

    def cached(self, j: int, wiring: Wiring) -> BlockPredictions | None:
        key = (j, wiring.slots)
        with self._lock:
            if self._last is not None and self._last[0] == key:
                return self._last[1]
            return self._blocks.get(key)

    def ready(self, j: int, wiring: Wiring) -> bool:
        """The j-th sample's view under `wiring` is computed (`prepare`)."""
        with self._lock:
            have = j in self._norms
        return have and self.cached(j, wiring) is not None

    def has_totals(self, wiring: Wiring) -> bool:
        with self._lock:
            return wiring.slots in self._totals

    def cached_totals(self, wiring: Wiring) -> BlockWiringReport | None:
        with self._lock:
            return self._totals.get(wiring.slots)

    def anchors(self, j: int, wiring: Wiring) -> list[int] | None:
        """The positions n a round may start after, in the j-th sample (None: not computed)."""
        bp = self.cached(j, wiring)
        return None if bp is None else bp.anchors.tolist()

    def rows(self, j: int, wiring: Wiring, a: int) -> list[BlockRow]:
        """The a-th block of the j-th sample, one row per block position (none: not computed)."""
        bp = self.cached(j, wiring)
        if bp is None:
            return []
        n = int(bp.anchors[a])
        out, lead = [], True
        for k in range(bp.pred.shape[1]):
            hit = bool(bp.pred[a, k] == bp.true[a, k] and bp.true[a, k] >= 0)
            lead = lead and hit
            out.append(
                BlockRow(
                    k + 1,
                    n + k + 1,
                    int(bp.pred[a, k]),
                    int(bp.true[a, k]),
                    float(bp.p[a, k]),
                    int(bp.rank[a, k]),
                    hit,
                    bool(bp.scored[a, k]),
                    lead,
                )
            )
        return out

    def sample_accuracy(self, j: int, wiring: Wiring) -> float | None:
        """The j-th sample's block accuracy (scored positions whose draft is the true token);
        None where it has none or is not computed."""
        bp = self.cached(j, wiring)
        if bp is None:
            return None
        n = int(bp.scored.sum())
        return float((bp.hit & bp.scored).sum() / n) if n else None

    def slot_norms(self, j: int) -> list[float] | None:
        """Per slot, the mean L2 norm of the j-th sample's rows (None: not computed)."""
        with self._lock:
            return self._norms.get(j)

    def tokens(self, j: int) -> torch.Tensor:
        return self.sample(j).input_ids
