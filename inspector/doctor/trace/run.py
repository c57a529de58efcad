"""One path of the trace over one sample: the forward every consumer runs, with a tap.

The EAGLE-3 trace is TTT step 0 over the sample's first `rows` rows (step 0 is causal, so a
prefix computes exactly what the whole sample does at those rows). The block trace is the blocks
a round drafts at up to `rows` anchors spread over the sample's generations, each
[x_n, mask, ...] over the context rows before it (`evaluate.block_eval`'s blocks). Stages are
kept in float32 on the CPU in computation order; the last two are the logits and the target ids
each row proposes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from inspector.doctor.trace.paths import TracePath
from inspector.metrics.rounds import generation_runs
from inspector.model.block import anchored_block_hidden, draft_rows, head_logits, markov_bias
from inspector.model.fc import fc_wired
from inspector.model.forward import iter_steps
from inspector.model.heads import draft_logits
from inspector.sample import Sample

# The trained path's stages are kept while each engine path runs beside them: the widest, the
# logits (rows x vocabulary), are held to this many bytes by running fewer rows or blocks.
LOGIT_BYTES = 64 << 20

Stages = dict[str, torch.Tensor]  # stage -> [rows, width], float32, CPU, computation order
Sink = Callable[[str, torch.Tensor], None]


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.detach().reshape(-1, x.shape[-1]).float().cpu()


def eagle3_rows(sample: Sample, rows: int, shift: int = 1, vocab: int = 0) -> int:
    """How many step-0 rows a trace of `sample` runs: `rows`, fewer in a short sample or where
    `vocab`-wide float32 logits of that many rows pass LOGIT_BYTES (at least one)."""
    if vocab:
        rows = min(rows, max(1, LOGIT_BYTES // (4 * vocab)))
    return max(0, min(rows, sample.length - shift))


@torch.no_grad()
def run_eagle3(
    path: TracePath, sample: Sample, rows: int, position_offset: int, sink: Sink
) -> torch.Tensor:
    """Step 0 of `path` over the first rows of `sample`, every stage handed to `sink`; returns
    the target id each row proposes [R]."""
    draft = path.draft
    r = eagle3_rows(sample, rows, path.shift, draft.config.draft_vocab_size)
    dev = draft.device
    slots = [sample.slots[i][:r].to(device=dev, dtype=draft.dtype) for i in path.wiring.slots]
    h = fc_wired(draft, slots)
    sink("fc", _flat(h))
    tokens = sample.input_ids[path.shift : path.shift + r].to(dev)

    def tap(name: str, x: torch.Tensor) -> None:
        sink(name, _flat(x))

    (_, z), *_ = iter_steps(draft, h, tokens, 1, position_offset, tap=tap)
    logits = draft_logits(draft, z, tap=tap)
    sink("logits", _flat(logits))
    ids = draft.vocab.draft_to_target[logits.argmax(-1)]
    sink("target ids", _flat(ids[:, None]))
    return ids.cpu()


def block_anchors(sample: Sample, rows: int, block_size: int = 2, vocab: int = 0) -> list[int]:
    """Up to `rows` anchors spread evenly over the sample's generations (every n a round may
    start after), fewer where their blocks' `vocab`-wide float32 logits pass LOGIT_BYTES."""
    if vocab:
        rows = min(rows, max(1, LOGIT_BYTES // (4 * vocab * max(1, block_size - 1))))
    runs = generation_runs(sample.loss_mask.cpu().numpy())
    every = [n for p, e in runs for n in range(p, e)]
    if len(every) <= rows:
        return every
    picks = np.linspace(0, len(every) - 1, rows).round().astype(int)
    return [every[i] for i in sorted(set(picks.tolist()))]


@torch.no_grad()
def run_block(path: TracePath, sample: Sample, anchors: list[int], sink: Sink) -> torch.Tensor:
    """The blocks `path` drafts at `anchors` over `sample`, every stage handed to `sink`;
    returns the target id each drafting row proposes [A, drafts_per_block] (the argmax: the
    trace compares the head, not DFlash2's selector; DSpark's with its Markov bias)."""
    draft = path.draft
    block = draft.config.block
    assert block is not None
    dev = draft.device
    ids = sample.input_ids.to(dev)
    context = torch.cat([sample.slots[i] for i in path.wiring.slots], dim=-1).to(
        device=dev, dtype=draft.dtype
    )
    at = torch.tensor(anchors, device=dev)
    block_ids = torch.full((len(anchors), block.block_size), block.mask_token_id, device=dev)
    block_ids[:, 0] = ids[at]

    def tap(name: str, x: torch.Tensor) -> None:
        if name == "context":  # the whole sample's rows: keep the one before each anchor
            x = x[(at - 1).clamp(min=0)]
        sink(name, _flat(x))

    normed = draft_rows(draft, anchored_block_hidden(draft, context, at, block_ids, tap=tap))
    logits = head_logits(draft, normed)
    if block.markov_rank:  # DSpark: the bias of the true token before each draft, as eval adds
        where = at[:, None] + torch.arange(normed.shape[1], device=dev)[None, :]
        logits = logits + markov_bias(draft, ids[where.clamp(max=ids.shape[0] - 1)], normed)
    sink("logits", _flat(logits))
    pred = logits.argmax(-1)
    sink("target ids", _flat(pred.reshape(-1, 1)))
    return pred.cpu()
