"""The draft's heads: lm_head over the final norm, and the top-k log-probabilities the serving
trees expand by. Logits come out in float32 whatever the weights' dtype."""

from __future__ import annotations

import torch

from inspector.draft import Draft
from inspector.model.linear import linear
from inspector.model.rope import rms_norm
from inspector.model.tap import Tap, tap_at


def draft_logits(draft: Draft, z: torch.Tensor, tap: Tap | None = None) -> torch.Tensor:
    """Draft-vocab logits lm_head(norm(z)) in float32, [.., D], z a layer output (pre-norm);
    `tap` sees the normed rows as `norm`."""
    normed = rms_norm(z, draft.weights["norm.weight"], draft.config.rms_norm_eps)
    tap_at(tap, "norm", normed)
    return linear(normed, draft.weights["lm_head.weight"]).float()


def stable_topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest entries along the last dim, descending, equal values by ascending index."""
    shape = x.shape
    flat = x.reshape(-1, shape[-1])
    k = min(k, shape[-1])
    vals, idx = flat.topk(k, dim=-1)
    # Rows where the k-th value ties with an entry left out: torch.topk picked one of them
    # arbitrarily, so those rows are sorted in full (rare: exact ties of float logits).
    cut = (flat >= vals[:, -1:]).sum(-1) > k
    if bool(cut.any()):
        rows = cut.nonzero()[:, 0]
        sv, si = flat[rows].sort(dim=-1, descending=True, stable=True)
        vals[rows], idx[rows] = sv[:, :k], si[:, :k]
    # Within the k: by index first, then stably by value, so ties keep ascending indices.
    idx, order = idx.sort(dim=-1)
    vals = vals.gather(-1, order)
    vals, order = vals.sort(dim=-1, descending=True, stable=True)
    idx = idx.gather(-1, order)
    return vals.reshape(*shape[:-1], k), idx.reshape(*shape[:-1], k)


def topk_logprobs(
    draft: Draft, z: torch.Tensor, k: int, rows: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-k draft ids of lm_head(norm(z)) and their log-probabilities, for z [B, R, H]:
    [B, R, k] each, ties to the lower id. In chunks of `rows` rows along R (the [rows, vocab]
    logits of a long sample would not fit at once); None: all rows at once."""
    step = max(1, z.shape[1] if rows is None else rows)
    vals, ids = [], []
    for a in range(0, z.shape[1], step):
        logits = draft_logits(draft, z[:, a : a + step])
        logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
        v, i = stable_topk(logp, k)
        vals.append(v)
        ids.append(i)
    if len(vals) == 1:
        return vals[0], ids[0]
    return torch.cat(vals, dim=1), torch.cat(ids, dim=1)
