"""P-EAGLE (parallel drafting, docs/peagle.md): every depth's input, and the one serving forward.

The trainers' mask (a depth-k slot sees the context up to its anchor and its own chain's depths
1..k) is TTT's mask with step k = depth k, so the same `draft_step` and layer caches run it:
only the inputs differ. Step k >= 1 is fed the constant fc(mask_hidden) and the mask token
instead of the previous step's output and the next true token, so no depth reads another's
output and the K depths are one forward in the engines.
"""

from __future__ import annotations

import torch

from inspector.draft import Draft
from inspector.errors import InputError
from inspector.model.attention import DEFAULT_CHUNKING, Chunking, LayerCache
from inspector.model.fc import mask_feature
from inspector.model.forward import draft_step
from inspector.model.heads import draft_logits
from inspector.model.weights import resolve_layers


def parallel_round(
    draft: Draft,
    h: torch.Tensor,
    tokens: torch.Tensor,
    position_offset: int = 0,
    chunking: Chunking = DEFAULT_CHUNKING,
) -> torch.Tensor:
    """The K draft logits of one serving round [K, D], as vLLM computes them (eagle.py
    l.740-812): one causal forward over the R context rows (`h` [R, H] fc outputs, `tokens` [R]
    the token of each row, the last being the bonus token) followed by K-1 mask slots, at
    consecutive positions from `position_offset`. Row R-1 gives depth 0, slot k depth k."""
    cfg = draft.config
    if cfg.parallel is None:
        raise ValueError("parallel_round needs a P-EAGLE draft (config.parallel)")
    extra = cfg.parallel.num_depths - 1
    r = h.shape[0]
    feat = mask_feature(draft).to(h.dtype).expand(extra, -1)
    x_in = torch.cat([h, feat])[None]
    ids = torch.cat([tokens, tokens.new_full((extra,), cfg.parallel.mask_token_id)])[None]
    pos = torch.arange(r + extra, device=h.device) + position_offset
    caches = [LayerCache(cfg.sliding_window(i)) for i in range(cfg.num_layers)]
    layers = resolve_layers(draft)
    x = draft_step(draft, layers, x_in, ids, pos, caches, chunking=chunking)
    return draft_logits(draft, x[0, r - 1 :])


def refuse_parallel(draft: Draft, what: str) -> None:
    """One line where a path that drafts token after token (trees, live chains) meets a
    P-EAGLE draft: feeding it its own drafts would not be how it is served."""
    if draft.config.parallel is not None:
        raise InputError(
            draft.path or draft.name,
            None,
            f"a P-EAGLE (parallel drafting) draft: {what} drafts sequentially, not supported for "
            "it yet (eval per depth and accept's chain replay, --topk 1, are)",
        )
