"""What the app shows of a block draft (DFlash, DFlash2) over samples: per sample and wiring the
blocks (`block_eval.predict_blocks`, cached), per position in one block the draft's token, the
true one, p and rank; per wiring the set's accuracy by block position and accept length (the
same `BlockWiringReport` `eval` prints); the slots' norms. The app only displays these."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

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
from inspector.wiring import Wiring


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


class BlockBrowser:
    """A block draft over a fixed list of samples, computed on demand and kept."""

    def __init__(
        self,
        draft: Draft,
        samples: Sequence[tuple[int, Sample]],
        engines: Sequence[Engine] = COUNTED_BY,
    ) -> None:
        self.draft = draft
        self.block = block_of(draft)
        self.samples = list(samples)
        self.engines = tuple(engines)
        self._blocks: dict[tuple[int, tuple[int, ...]], BlockPredictions] = {}
        self._totals: dict[tuple[int, ...], BlockWiringReport] = {}
        self.fc_norms = draft.fc_block_norms()

    @property
    def slot_info(self):
        return self.samples[0][1].slot_info if self.samples else []

    def blocks(self, j: int, wiring: Wiring) -> BlockPredictions:
        """Every block of the j-th sample (of `samples`) under `wiring`."""
        key = (j, wiring.slots)
        if key not in self._blocks:
            self._blocks[key] = predict_blocks(self.draft, self.samples[j][1], wiring)
        return self._blocks[key]

    def totals(self, wiring: Wiring, name: str | None = None) -> BlockWiringReport:
        """The set's figures under `wiring` (accuracy and mean p by block position, the accept
        length as each engine counts it), over every sample."""
        if wiring.slots not in self._totals:
            infos = self.slot_info
            layers = tuple(infos[i].hf_index if i < len(infos) else None for i in wiring.slots)
            rep = BlockWiringReport(
                name,
                wiring.label(infos),
                wiring.slots,
                layers,
                self.block.block_size,
                self.engines,
            )
            for j, (index, sample) in enumerate(self.samples):
                rep.add(index, sample.path, self.blocks(j, wiring), False)
            self._totals[wiring.slots] = rep
        return self._totals[wiring.slots]

    def has_totals(self, wiring: Wiring) -> bool:
        return wiring.slots in self._totals

    def anchors(self, j: int, wiring: Wiring) -> list[int]:
        """The positions n a round may start after, in the j-th sample."""
        return self.blocks(j, wiring).anchors.tolist()

    def rows(self, j: int, wiring: Wiring, a: int) -> list[BlockRow]:
        """The a-th block of the j-th sample, one row per block position."""
        bp = self.blocks(j, wiring)
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
        """The j-th sample's block accuracy (scored positions whose draft is the true token)."""
        bp = self.blocks(j, wiring)
        n = int(bp.scored.sum())
        return float((bp.hit & bp.scored).sum() / n) if n else None

    def slot_norms(self, j: int) -> list[float]:
        """Per slot, the mean L2 norm of the j-th sample's rows."""
        return [float(s.float().norm(dim=-1).mean()) for s in self.samples[j][1].slots]

    def tokens(self, j: int) -> torch.Tensor:
        return self.samples[j][1].input_ids
