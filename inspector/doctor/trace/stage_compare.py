"""The trace's comparison: the trained path's stages against each engine path's, stage by stage.

Per stage: the norm ratio (the median over rows of |served row| / |trained row|), the relative
difference |served - trained| / |trained| over all rows, and the mean cosine; the target ids are
compared as the share of rows that propose the same token.

Error model: where two paths compute the same thing, a stage's relative difference is rounding
alone. Each stored value rounds with relative error at most u (the unit roundoff of the coarser
of the two compute dtypes: 2^-24 in float32, 2^-11 in float16, 2^-8 in bfloat16), and every
decoder layer re-rounds what it reads, so a stage of layer i parts only beyond
`TOL_FACTOR * u * (i + 2)` (embedding and fc: i = -1; the final norm and the logits: one layer
past the last). Two float32 paths that compute the same thing on one device are bit-equal here.
The bound does not count softmax's amplification of a score's rounding (about the score's size
in peaked attention), so a parting whose only cause is the dtype is worded as a lead to check in
float32, not as a fault (`finding`); a real dtype fault (an overflow, a lost scale) departs far
beyond it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from inspector.doctor.trace.paths import ANY_STAGE, Difference, TracePath
from inspector.doctor.trace.run import block_anchors, eagle3_rows, run_block, run_eagle3
from inspector.sample import Sample

TOL_FACTOR = 8
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
IDS = "target ids"


def unit_roundoff(*dtypes: torch.dtype) -> float:
    return max(UNIT_ROUNDOFF.get(d, 2.0**-8) for d in dtypes)


def stage_depth(stage: str, num_layers: int) -> int:
    """How many decoder layers re-round a stage's value: -1 before the first layer."""
    m = re.match(r"layer(\d+)\.", stage)
    if m:
        return int(m.group(1))
    return num_layers if stage in ("norm", "logits", IDS) else -1


@dataclass(frozen=True)
class StageDiff:
    stage: str
    norm_trained: float  # median row norm
    norm_served: float
    ratio: float  # median over rows of |served| / |trained|
    rel: float  # |served - trained| / |trained|, all rows
    cosine: float  # mean over rows
    tol: float  # the rounding bound (module docstring)

    @property
    def parted(self) -> bool:
        return not self.rel <= self.tol  # NaN parts

    def to_dict(self) -> dict:
        def num(x: float) -> float | None:
            return round(x, 6) if math.isfinite(x) else None

        return {
            "stage": self.stage,
            "norm_trained": num(self.norm_trained),
            "norm_served": num(self.norm_served),
            "norm_ratio": num(self.ratio),
            "relative_difference": num(self.rel),
            "cosine": num(self.cosine),
            "tolerance": self.tol,
            "parted": self.parted,
        }


def stage_diff(stage: str, a: torch.Tensor, b: torch.Tensor, tol: float) -> StageDiff:
    """Served `b` against trained `a`, both [rows, width] float32."""
    if a.shape != b.shape:  # another layer count or width: nothing to compare row by row
        nan = float("nan")
        return StageDiff(stage, nan, nan, nan, nan, nan, tol)
    na, nb = a.norm(dim=-1), b.norm(dim=-1)
    keep = na > 0
    ratio = float((nb[keep] / na[keep]).median()) if bool(keep.any()) else float("nan")
    whole = float(a.norm())
    rel = float((b - a).norm()) / whole if whole > 0 else (0.0 if float(b.norm()) == 0 else 1.0)
    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1)
    return StageDiff(
        stage,
        float(na.median()),
        float(nb.median()),
        ratio,
        rel,
        float(cos.mean()),
        tol,
    )


@dataclass(frozen=True)
class PathTrace:
    """One engine path against the trained one."""

    label: str
    differences: tuple[Difference, ...]
    stages: tuple[StageDiff, ...]
    agreement: float  # share of rows proposing the same target id
    accuracy_trained: float  # share of rows whose proposal is the true next token
    accuracy_served: float
    rows: int
    note: str | None = None  # the path's own (`TracePath.note`)
    known: tuple[str, ...] = ()  # `TracePath.known`

    @property
    def first_parted(self) -> StageDiff | None:
        """The first stage beyond rounding (the proposed ids are `agreement`'s, not a stage
        that parts: one rounding can flip a near tie)."""
        first = next((s for s in self.stages if s.parted and s.stage != IDS), None)
        if first is None and any(d.acts_at == IDS for d in self.differences):
            # a map acts on the ids alone: there the proposals are the stage
            first = next((s for s in self.stages if s.stage == IDS and s.parted), None)
        return first

    @property
    def causes(self) -> tuple[Difference, ...]:
        """The differences that explain the first parting: those acting at that stage; else
        those acting before it (within rounding there, grown since); else one that acts
        everywhere (a dtype). Empty: no known cause."""
        first = self.first_parted
        if first is None:
            return ()
        order = [s.stage for s in self.stages]
        here = tuple(d for d in self.differences if d.acts_at == first.stage)
        if here:
            return here
        at = order.index(first.stage)
        before = tuple(
            d for d in self.differences if d.acts_at in order and order.index(d.acts_at) < at
        )
        return before or tuple(d for d in self.differences if d.acts_at == ANY_STAGE)

    def to_dict(self) -> dict:
        first = self.first_parted
        return {
            "path": self.label,
            "differences": [d.to_dict() for d in self.differences],
            "first_parted": first.stage if first else None,
            "causes": [d.cause for d in self.causes],
            "agreement": round(self.agreement, 6),
            "accuracy_trained": round(self.accuracy_trained, 6),
            "accuracy_served": round(self.accuracy_served, 6),
            "rows": self.rows,
            "note": self.note,
            "known": list(self.known),
            "stages": [s.to_dict() for s in self.stages],
        }


@dataclass
class Trace:
    """The trained path and every engine path over one sample."""

    trained: str
    sample: int
    rows: int
    paths: list[PathTrace] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "trained": self.trained,
            "sample": self.sample,
            "rows": self.rows,
            "paths": [p.to_dict() for p in self.paths],
        }


def _truth_eagle3(sample: Sample, r: int, shift: int) -> torch.Tensor:
    """The token each step-0 row predicts (x_{j+1+shift}); -1 past the sample's end."""
    ids = sample.input_ids
    out = torch.full((r,), -1, dtype=torch.long)
    n = max(0, min(r, ids.shape[0] - 1 - shift))
    out[:n] = ids[1 + shift : 1 + shift + n]
    return out


def _truth_block(sample: Sample, anchors: list[int], width: int) -> torch.Tensor:
    ids = sample.input_ids
    t = ids.shape[0]
    where = torch.tensor(anchors)[:, None] + torch.arange(1, width + 1)[None, :]
    return torch.where(where < t, ids[where.clamp(max=t - 1)], -1)


def _accuracy(pred: torch.Tensor, truth: torch.Tensor) -> float:
    scored = truth >= 0
    n = int(scored.sum())
    return float((pred[scored] == truth[scored]).sum()) / n if n else float("nan")


def trace(
    trained: TracePath,
    paths: Sequence[TracePath],
    sample: Sample,
    *,
    sample_index: int = 0,
    rows: int = 64,
    position_offset: int = 1,
) -> Trace:
    """Run `trained` and each of `paths` over `sample` and compare them stage by stage. Memory:
    the trained path's stages (rows x width each), one path at a time beside them."""
    block = trained.draft.config.block is not None
    num_layers = trained.draft.config.num_layers
    kept: dict[str, torch.Tensor] = {}
    if block:
        cfg = trained.draft.config
        assert cfg.block is not None
        anchors = block_anchors(sample, rows, cfg.block.block_size, cfg.vocab_size)

        def run(path: TracePath, sink) -> torch.Tensor:
            return run_block(path, sample, anchors, sink)

        assert trained.draft.config.block is not None
        truth = _truth_block(sample, anchors, trained.draft.config.block.drafts_per_block)
        n_rows = len(anchors)
    else:

        def run(path: TracePath, sink) -> torch.Tensor:
            return run_eagle3(path, sample, rows, position_offset, sink)

        n_rows = eagle3_rows(sample, rows, trained.shift, trained.draft.config.draft_vocab_size)
        truth = _truth_eagle3(sample, n_rows, trained.shift)
    ours = run(trained, kept.__setitem__)
    out = Trace(trained.label, sample_index, n_rows)
    for path in paths:
        u = unit_roundoff(trained.draft.dtype, path.draft.dtype)
        diffs: list[StageDiff] = []

        def compare(stage: str, b: torch.Tensor, u: float = u, diffs: list = diffs) -> None:
            a = kept.get(stage)
            if a is None:
                return
            if stage == IDS:  # ids have no norm: the share of rows that differ, nothing else
                same = float((a == b).float().mean()) if a.shape == b.shape else 0.0
                nan = float("nan")
                diffs.append(StageDiff(stage, nan, nan, nan, 1.0 - same, nan, 0.0))
                return
            tol = TOL_FACTOR * u * (stage_depth(stage, num_layers) + 2)
            diffs.append(stage_diff(stage, a, b, tol))

        theirs = run(path, compare)
        same = ours.shape == theirs.shape
        out.paths.append(
            PathTrace(
                path.label,
                path.differences,
                tuple(diffs),
                float((ours == theirs).float().mean()) if same else 0.0,
                _accuracy(ours, truth),
                _accuracy(theirs, truth) if same else float("nan"),
                n_rows,
                path.note,
                path.known,
            )
        )
    return out
