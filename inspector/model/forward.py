"""The teacher-forced TTT forward: one `draft_step` (the next step's input, the token embeddings,
RoPE, the layer loop) that the training-time steps here, the serving trees and the live loop all
run; `forward_steps` / `iter_steps` drive it over a sample's rows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F

from inspector.draft import Draft
from inspector.model.attention import DEFAULT_CHUNKING, AttendSpec, Chunking, LayerCache
from inspector.model.decoder import layer
from inspector.model.fc import mask_feature
from inspector.model.heads import draft_logits
from inspector.model.rope import rms_norm, rope_cos_sin
from inspector.model.tap import Tap, tap_at
from inspector.model.weights import LayerWeights, resolve_layers


def next_input(draft: Draft, z: torch.Tensor) -> torch.Tensor:
    """What a step feeds the next from its layer output z: z itself, or norm(z) for drafts that
    normalise their output before reuse (norm_output)."""
    cfg = draft.config
    return rms_norm(z, draft.weights["norm.weight"], cfg.rms_norm_eps) if cfg.norm_output else z


def draft_step(
    draft: Draft,
    layers: Sequence[LayerWeights],
    hidden: torch.Tensor,
    tokens: torch.Tensor,
    positions: torch.Tensor,
    caches: Sequence[LayerCache],
    spec: AttendSpec | None = None,
    chunking: Chunking = DEFAULT_CHUNKING,
    tap: Tap | None = None,
) -> torch.Tensor:
    """One draft forward over [B, R, H] rows: `hidden` (the fc output at step 0, else
    `next_input` of the previous step), fed the target ids `tokens` [B, R] at RoPE `positions`
    [R]; every layer appends its keys/values to its cache and attends as `spec` says. Returns
    the last layer's output z (pre-norm) [B, R, H]. `tap` sees its stages (`model.tap`)."""
    cfg = draft.config
    embeds = F.embedding(tokens, draft.weights["embed_tokens.weight"]).to(hidden.dtype)
    tap_at(tap, "embed", embeds)
    cos, sin = rope_cos_sin(cfg, positions, hidden.device)
    x = hidden
    for lw, cache in zip(layers, caches, strict=True):
        e = embeds if lw.index == 0 else None
        x = layer(cfg, lw, x, e, cos, sin, cache, spec, chunking, tap)
    return x


def _steps(
    draft: Draft,
    h: torch.Tensor,
    tokens: torch.Tensor,
    steps: int,
    position_offset: int,
    chunking: Chunking = DEFAULT_CHUNKING,
    tap: Tap | None = None,
) -> Iterator[tuple[int, torch.Tensor]]:
    """(k, x_k [B, R, H]) per step; rows j >= R-k of step k were fed the padding token. `tap`
    sees step 0's stages."""
    cfg = draft.config
    layers = resolve_layers(draft)
    _, r, _ = h.shape
    base_pos = torch.arange(r, device=h.device) + position_offset
    caches = [LayerCache(cfg.sliding_window(i)) for i in range(cfg.num_layers)]
    hidden = h
    par = cfg.parallel
    for k in range(steps):
        if par is not None and k > 0:
            # P-EAGLE depth k: the mask token and fc(mask_hidden) in every row, under the same
            # mask (docs/peagle.md): the trainers' parallel slots, all rows at once.
            tok_k = torch.full_like(tokens, par.mask_token_id)
            hidden = mask_feature(draft).to(h.dtype).expand_as(h)
        else:
            # Step k reads x_{j+1+k}; rows past the end get the padding id 0, as the peers do.
            # Under causal + diagonal attention they cannot reach the kept rows.
            tok_k = torch.zeros_like(tokens)
            tok_k[:, : r - k] = tokens[:, k:]
        x = draft_step(
            draft,
            layers,
            hidden,
            tok_k,
            base_pos + k,
            caches,
            chunking=chunking,
            tap=tap if k == 0 else None,
        )
        yield k, x
        if k + 1 < steps and par is None:
            hidden = next_input(draft, x)


def _batched(h: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[R, H] and [R] inputs as a batch of one; batched inputs as they are."""
    return (h[None], tokens[None]) if h.dim() == 2 else (h, tokens)


def iter_steps(
    draft: Draft,
    h: torch.Tensor,
    tokens: torch.Tensor,
    steps: int = 1,
    position_offset: int = 1,
    chunking: Chunking = DEFAULT_CHUNKING,
    tap: Tap | None = None,
) -> Iterator[tuple[int, torch.Tensor]]:
    """The draft layer output z (pre-norm) of TTT steps 0..steps-1, one step at a time.

    h: fc output, [R, H] or [B, R, H], row j built from the slots at position j.
    tokens: [R] or [B, R], the token x_{j+1} fed at row j.
    position_offset: RoPE position of row 0 (speculators feeds position_ids[1:], i.e. 1;
      SpecForge 0). Only q-k differences matter, so this moves the logits by float rounding only.
    tap: sees step 0's stages (`model.tap`; the train/serve trace).
    Yields (k, z_k) with z_k [.., R-k, H]: row j of step k predicts x_{j+2+k} through
    `draft_logits`. Memory stays linear in R: nothing of size R x vocab is built here.
    """
    squeeze = h.dim() == 2
    r = h.shape[-2]
    for k, x in _steps(draft, *_batched(h, tokens), steps, position_offset, chunking, tap):
        yield k, (x[0, : r - k] if squeeze else x[:, : r - k])


def forward_steps(
    draft: Draft,
    h: torch.Tensor,
    tokens: torch.Tensor,
    steps: int = 1,
    position_offset: int = 1,
) -> list[torch.Tensor]:
    """Draft-vocab logits [.., R-k, D] of TTT steps 0..steps-1 (see `iter_steps` for the inputs).

    Holds every step's logits at once: for training (the demo builder trains through it) and
    short inputs; long samples go through `iter_steps` + `draft_logits` in row chunks.
    """
    r = h.shape[-2]
    steps_out = _steps(draft, *_batched(h, tokens), steps, position_offset)
    out = [draft_logits(draft, x)[:, : r - k] for k, x in steps_out]
    return [x[0] for x in out] if h.dim() == 2 else out
