"""fc: the draft's projection of the concatenated wired slots into its hidden size, with the
optional per-slot norms (fc_norm) or the whole-input norm (norm_before_fc)."""

from __future__ import annotations

import torch

from inspector.draft import Draft
from inspector.model.linear import linear
from inspector.model.rope import rms_norm


def fc_input(draft: Draft, slots: list[torch.Tensor]) -> torch.Tensor:
    """The fc input g for the given wired slots (in fc block order), with the optional norms."""
    cfg = draft.config
    w = draft.weights
    if cfg.fc_norm:
        slots = [
            rms_norm(s, w[f"fc_norm.{i}.weight"], cfg.rms_norm_eps) for i, s in enumerate(slots)
        ]
    g = torch.cat(slots, dim=-1)
    if cfg.norm_before_fc:
        g = rms_norm(g, w["input_norm.weight"], cfg.rms_norm_eps)
    return g


def fc_project(draft: Draft, g: torch.Tensor) -> torch.Tensor:
    """h = fc(g), [.., H]."""
    return fc_combine(draft, [linear(g, draft.weights["fc.weight"])])


def fc_block_project(
    draft: Draft, slot: torch.Tensor, block: int, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """W_block @ slot, [.., H]: one column block of fc applied to the slot it multiplies (with
    the block's fc_norm first when the draft has one). fc is linear, so fc(cat(s_0, s_1, ..)) =
    fc_combine([W_0 s_0, W_1 s_1, ..]): the evaluator caches these per (block, slot).

    weight: the block as a contiguous [H, Ht] copy (the caller's cache), else sliced from fc.
    Every product here is `x @ W.T` with W row-major [out, in]: the layout whose CPU kernels are
    fast in bfloat16 and float16 too (a pre-transposed contiguous copy, `x @ W.T.contiguous()`,
    runs 30-80x slower in those dtypes on CPU)."""
    cfg = draft.config
    if cfg.norm_before_fc:
        raise ValueError("norm_before_fc normalises the whole fc input: no per-block projection")
    if cfg.fc_norm:
        slot = rms_norm(slot, draft.weights[f"fc_norm.{block}.weight"], cfg.rms_norm_eps)
    w = weight if weight is not None else draft.fc_block(block)
    return linear(slot, w)


def fc_combine(draft: Draft, parts: list[torch.Tensor]) -> torch.Tensor:
    """fc's output from its column blocks' projections: their sum, plus fc's bias if any (the
    one place the bias is added, for the whole-input and the per-block paths alike)."""
    h = parts[0]
    for part in parts[1:]:
        h = h + part
    bias = draft.weights.get("fc.bias")
    return h + bias if bias is not None else h


def fc_wired(draft: Draft, slots: list[torch.Tensor]) -> torch.Tensor:
    """h = fc of the wired slots (in fc block order), computed as the evaluator does: the sum of
    per-block projections when fc is linear in each slot, else over the whole normed input."""
    if draft.config.norm_before_fc:
        return fc_project(draft, fc_input(draft, slots))
    # contiguous blocks, as the evaluator keeps them: the same kernels, the same bits
    blocks = [draft.fc_block(b).contiguous() for b in range(len(slots))]
    return fc_combine(
        draft, [fc_block_project(draft, s, b, blocks[b]) for b, s in enumerate(slots)]
    )


def mask_feature(draft: Draft) -> torch.Tensor:
    """P-EAGLE's fc output for its depth >= 1 slots, [H]: the trainers put `mask_hidden` through
    the optional input/fc norms and fc like any target feature (docs/peagle.md section 2)."""
    cfg = draft.config
    ht = cfg.target_hidden_size
    m = draft.weights["mask_hidden"]
    return fc_project(
        draft, fc_input(draft, [m[b * ht : (b + 1) * ht] for b in range(cfg.num_fc_blocks)])
    )
