"""The layers a block draft (DFlash) was trained on, asked of its weights, never of its config.

A wiring is an ordered choice of the layers the samples hold, one per fc block. It is scored
over a fixed subset of the anchors of the first samples: the mean log p of the true token at
every block position (what training maximises; `Scored.key` says why not accuracy alone) and
the block accuracy, the share of block positions whose draft is the true token. fc is
linear, so fc(cat(s_a, s_b, ...)) = W_0 s_a + W_1 s_b + ...: each (fc block, layer) projection
is computed once per sample and any wiring is a sum of them; only the layers after fc run again.

The search never enumerates the orderings (5 of 61 layers would be 7e8 of them). It starts from
the best of a few seeds (the configured ids, the reference's default spread, the layers spread
evenly over what the samples hold) and moves one fc block at a time to the layer that scores
best there, swapping with the block that held that layer, until a whole sweep changes nothing:
N x S wirings a sweep for N fc blocks and S held layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from inspector.draft import Draft
from inspector.evaluate.block_eval import anchors_of, block_of, chunk_size, drafts_of
from inspector.metrics.rounds import generation_runs
from inspector.model.block import (
    anchored_block_hidden,
    draft_rows,
    head_logits,
    markov_bias,
    markov_path,
    selector_path,
)
from inspector.model.linear import linear
from inspector.sample import Sample

MAX_SWEEPS = 4
ANCHORS_PER_SAMPLE = 64  # spread evenly over each sample's anchors: a fixed subset for every wiring
# Anchors are taken among a sample's first tokens only: the context a block reads is every row
# before it, and the cached projections are [rows, H] per (fc block, layer).
SCORE_TOKENS = 1024
# The cached projections' bytes (N x S of them a sample: 5 of 62 layers at H 5120 over 1024 rows
# is 3 GB a sample in bf16); past it they are recomputed for each wiring.
PROJECTION_BYTES = 1 << 30

Layers = tuple[int, ...]  # HF indices, one per fc block, in fc block order


@dataclass
class _Prepared:
    anchors: torch.Tensor
    block_ids: torch.Tensor
    true: torch.Tensor  # [A, D]: the D drafts of a block (drafts_per_block)
    valid: torch.Tensor  # [A, D] bool
    before: torch.Tensor  # [A, D]: the true token before each draft (DSpark's Markov bias)
    slots: dict[int, torch.Tensor]  # HF index -> [T, Ht]
    proj: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class Scored:
    layers: Layers
    accuracy: float
    logp: float

    @property
    def key(self) -> tuple[float, float]:
        """What the search maximises: the mean log p of the true tokens (the training
        objective), then block accuracy. Accuracy alone moves in steps of one hit: on 760 block
        positions of the demo's trained draft a neighbour of the trained wiring stood 0.3 points
        above it (two hits) while the trained one's log p stood clearly first."""
        return (self.logp, self.accuracy)

    def to_dict(self) -> dict:
        return {"layers": list(self.layers), "accuracy": self.accuracy, "mean_logp": self.logp}


class BlockScorer:
    """Scores wirings of one block draft over a few samples (every wiring on the same blocks)."""

    def __init__(self, draft: Draft, samples: Sequence[Sample]) -> None:
        self.draft = draft
        self.block = block_of(draft)
        self.cache: dict[Layers, Scored] = {}
        self.cached_bytes = 0
        self.prepared = [p for p in map(self._prepare, samples) if p is not None]
        held = [
            s.hf_index for s in samples[0].slot_info if s.hf_index is not None and not s.post_norm
        ]
        self.held: Layers = tuple(sorted(set(held)))

    def _prepare(self, sample: Sample) -> _Prepared | None:
        dev = self.draft.device
        b = self.block.block_size
        anchors = anchors_of(generation_runs(sample.loss_mask.cpu().numpy()))
        anchors = [n for n in anchors if n < SCORE_TOKENS]
        if not anchors:
            return None
        if len(anchors) > ANCHORS_PER_SAMPLE:
            pick = torch.linspace(0, len(anchors) - 1, ANCHORS_PER_SAMPLE).round().long()
            anchors = [anchors[i] for i in pick.tolist()]
        ids = sample.input_ids.to(dev)
        t = ids.shape[0]
        at = torch.tensor(anchors, device=dev)
        block_ids = torch.full((len(at), b), self.block.mask_token_id, device=dev)
        block_ids[:, 0] = ids[at]
        n = drafts_of(self.block, b)
        where = at[:, None] + torch.arange(1, n + 1, device=dev)[None, :]
        mask = sample.loss_mask.to(dev).bool()
        valid = (where < t) & mask[where.clamp(max=t - 1)]
        true = ids[where.clamp(max=t - 1)]
        rows = anchors[-1]  # the context rows any chosen block reads
        slots: dict[int, torch.Tensor] = {}
        for info, s in zip(sample.slot_info, sample.slots, strict=True):
            if info.hf_index is not None and not info.post_norm:
                slots.setdefault(info.hf_index, s[:rows].to(device=dev, dtype=self.draft.dtype))
        before = ids[(where - 1).clamp(max=t - 1)]
        return _Prepared(at, block_ids, true, valid, before, slots)

    def _projection(self, p: _Prepared, block: int, layer: int) -> torch.Tensor:
        key = (block, layer)
        if key in p.proj:
            return p.proj[key]
        out = linear(p.slots[layer], self.draft.fc_block(block))
        if self.cached_bytes + out.nbytes <= PROJECTION_BYTES:
            p.proj[key] = out
            self.cached_bytes += out.nbytes
        return out

    @torch.no_grad()
    def score(self, layers: Layers) -> Scored:
        layers = tuple(layers)
        if layers in self.cache:
            return self.cache[layers]
        hits = total = 0
        logp_sum = 0.0
        for p in self.prepared:
            fc_out = sum(self._projection(p, j, k) for j, k in enumerate(layers))
            assert isinstance(fc_out, torch.Tensor)
            step = chunk_size(self.draft, fc_out.shape[0])
            normed = torch.cat(
                [
                    anchored_block_hidden(
                        self.draft,
                        None,
                        p.anchors[i : i + step],
                        p.block_ids[i : i + step],
                        fc_out=fc_out,
                    )
                    for i in range(0, len(p.anchors), step)
                ]
            )
            normed = draft_rows(self.draft, normed)
            logits = head_logits(self.draft, normed)
            if self.block.markov_rank:  # DSpark: as eval scores it (predict_blocks)
                pred = markov_path(self.draft, normed, logits, p.block_ids[:, 0])
                logits = logits + markov_bias(self.draft, p.before, normed)
            elif self.block.family == "dflash2":
                pred = selector_path(self.draft, normed, logits, p.block_ids[:, 0])
            else:
                pred = logits.argmax(-1)
            logp = torch.log_softmax(logits, -1).gather(-1, p.true[..., None])[..., 0]
            hits += int(((pred == p.true) & p.valid).sum())
            total += int(p.valid.sum())
            logp_sum += float(logp[p.valid].sum())
        out = Scored(layers, hits / total if total else 0.0, logp_sum / total if total else 0.0)
        self.cache[layers] = out
        return out


def spread(held: Sequence[int], n: int) -> Layers:
    """n of the held layers spread evenly, ascending (the deepest included)."""
    if n == 1:
        return (held[len(held) // 2],)
    return tuple(held[round(i * (len(held) - 1) / (n - 1))] for i in range(n))


@dataclass(frozen=True)
class BlockSearch:
    """The search's answer: the best wiring, and what it scored against the seeds."""

    best: Scored
    seeds: tuple[tuple[str, Scored], ...]
    held: Layers
    evaluated: int
    sweeps: int

    @property
    def trained_ids(self) -> tuple[int, ...]:
        """The best wiring in the config's numbering (an id is a layer's output: HF - 1)."""
        return tuple(k - 1 for k in self.best.layers)

    def to_dict(self) -> dict:
        return {
            "best": self.best.to_dict(),
            "trained_ids": list(self.trained_ids),
            "seeds": {name: s.to_dict() for name, s in self.seeds},
            "held_layers": list(self.held),
            "wirings_scored": self.evaluated,
            "sweeps": self.sweeps,
        }


def search_block_wiring(
    scorer: BlockScorer, seeds: Sequence[tuple[str, Layers | None]]
) -> BlockSearch:
    """Coordinate ascent over ordered choices of the held layers (module docstring)."""
    n = scorer.draft.config.num_fc_blocks
    held = scorer.held
    if len(held) < n:
        raise ValueError(f"the samples hold {len(held)} layers; fc takes {n}")
    named: list[tuple[str, Scored]] = []
    for name, layers in [*seeds, ("even spread", spread(held, n))]:
        if layers is None or len(layers) != n or any(k not in held for k in layers):
            continue
        if len(set(layers)) != n:
            continue
        named.append((name, scorer.score(layers)))
    best = max((s for _, s in named), key=lambda s: s.key)
    sweeps = 0
    while sweeps < MAX_SWEEPS:
        sweeps += 1
        changed = False
        for j in range(n):
            current = list(best.layers)
            for k in held:
                if k == current[j]:
                    continue
                cand = list(current)
                if k in cand:  # swap with the block that holds it: no layer twice
                    cand[cand.index(k)] = current[j]
                cand[j] = k
                s = scorer.score(tuple(cand))
                if s.key > best.key:
                    best, changed = s, True
        if not changed:
            break
    return BlockSearch(best, tuple(named), held, len(scorer.cache), sweeps)


def search_from_config(
    draft: Draft, samples: Sequence[Sample], num_layers: int
) -> tuple[BlockSearch, Scored | None]:
    """The search as the doctor seeds it: from the configured ids, the reference's default
    spread over `num_layers` target layers (what a draft trained without naming ids was fed)
    and the even spread; with the configured ids' own score (None where the samples lack
    them). `doctor` and `accept` on a block draft both start here."""
    from inspector.formats.block_config import build_target_layer_ids

    block = block_of(draft)
    scorer = BlockScorer(draft, samples)
    configured = tuple(block.hf_layer_ids)
    seeds: list[tuple[str, Layers | None]] = [("configured", configured)]
    try:
        ids = build_target_layer_ids(num_layers, draft.config.num_layers)
        seeds.append(("default spread", tuple(k + 1 for k in ids)))
    except ValueError:
        pass
    search = search_block_wiring(scorer, seeds)
    score = scorer.score(configured) if set(scorer.held) >= set(configured) else None
    return search, score
