"""The draft forward: fc, the EAGLE-3 first layer (and any further layers), TTT steps, logits."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from inspector.draft import Draft, DraftConfig
from inspector.model.attention import (
    DEFAULT_CHUNKING,
    Chunking,
    LayerCache,
    attend,
    attend_masked,
)
from inspector.model.linear import linear
from inspector.model.rope import apply_rope, deinterleave, rms_norm, rope_cos_sin


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


def mlp(x: torch.Tensor, w: dict[str, torch.Tensor], p: str) -> torch.Tensor:
    gate = linear(x, w[p + "mlp.gate_proj.weight"])
    up = linear(x, w[p + "mlp.up_proj.weight"])
    return linear(F.silu(gate) * up, w[p + "mlp.down_proj.weight"])


def _project_qkv(
    cfg: DraftConfig, w: dict[str, torch.Tensor], p: str, a: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, t, _ = a.shape
    q = linear(a, w[p + "self_attn.q_proj.weight"]).view(b, t, cfg.num_heads, cfg.head_dim)
    k = linear(a, w[p + "self_attn.k_proj.weight"]).view(b, t, cfg.num_kv_heads, cfg.head_dim)
    v = linear(a, w[p + "self_attn.v_proj.weight"]).view(b, t, cfg.num_kv_heads, cfg.head_dim)
    if p + "self_attn.q_proj.bias" in w:
        q = q + w[p + "self_attn.q_proj.bias"].view(cfg.num_heads, cfg.head_dim)
        k = k + w[p + "self_attn.k_proj.bias"].view(cfg.num_kv_heads, cfg.head_dim)
        v = v + w[p + "self_attn.v_proj.bias"].view(cfg.num_kv_heads, cfg.head_dim)
    if p + "self_attn.q_norm.weight" in w:  # Qwen3-style per-head norms
        q = rms_norm(q, w[p + "self_attn.q_norm.weight"], cfg.rms_norm_eps)
        k = rms_norm(k, w[p + "self_attn.k_norm.weight"], cfg.rms_norm_eps)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def _project_qkv_mla(
    cfg: DraftConfig,
    w: dict[str, torch.Tensor],
    p: str,
    a: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MLA q, k (RoPE applied to the rope dims) and v, [B, heads, T, dims] each.

    As SpecForge's and TorchSpec's MLA drafts (after DeepSeek-V3): q = q_b(norm(q_a(a))) split
    per head into [nope | rope]; kv_a(a) = [compressed kv | one shared rope key]; kv_b(norm(
    compressed)) = per head [k_nope | v]. RoPE rotates adjacent pairs of the rope dims only.
    """
    m = cfg.mla
    assert m is not None
    b, t, _ = a.shape
    eps, nh, att = cfg.rms_norm_eps, cfg.num_heads, p + "self_attn."
    if m.q_lora_rank is None:
        q = linear(a, w[att + "q_proj.weight"])
    else:
        q = rms_norm(linear(a, w[att + "q_a_proj.weight"]), w[att + "q_a_layernorm.weight"], eps)
        q = linear(q, w[att + "q_b_proj.weight"])
    q = q.view(b, t, nh, m.qk_head_dim).transpose(1, 2)
    compressed, k_rope = linear(a, w[att + "kv_a_proj_with_mqa.weight"]).split(
        [m.kv_lora_rank, m.qk_rope_head_dim], dim=-1
    )
    kv = linear(
        rms_norm(compressed, w[att + "kv_a_layernorm.weight"], eps), w[att + "kv_b_proj.weight"]
    )
    k_nope, v = kv.view(b, t, nh, m.qk_nope_head_dim + m.v_head_dim).split(
        [m.qk_nope_head_dim, m.v_head_dim], dim=-1
    )
    q_nope, q_rope = q.split([m.qk_nope_head_dim, m.qk_rope_head_dim], dim=-1)
    k_rope = k_rope[:, None]  # [B, 1, T, rope]: one rope key for every head
    if m.rope_interleave:
        q_rope, k_rope = deinterleave(q_rope), deinterleave(k_rope)
    q_rope = apply_rope(q_rope, cos, sin)
    k_rope = apply_rope(k_rope, cos, sin)
    q = torch.cat([q_nope, q_rope], dim=-1)
    k = torch.cat([k_nope.transpose(1, 2), k_rope.expand(b, nh, t, m.qk_rope_head_dim)], dim=-1)
    return q, k, v.transpose(1, 2)


def rowwise_mlp(x: torch.Tensor, w: dict[str, torch.Tensor], p: str, rows: int) -> torch.Tensor:
    """mlp(x), in row chunks when x is long and no autograd is running (same values per row)."""
    r = x.shape[-2]
    if r <= rows or (torch.is_grad_enabled() and x.requires_grad):
        return mlp(x, w, p)
    return torch.cat([mlp(x[..., a : a + rows, :], w, p) for a in range(0, r, rows)], dim=-2)


def _layer(
    cfg: DraftConfig,
    w: dict[str, torch.Tensor],
    idx: int,
    hidden: torch.Tensor,
    embeds: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    cache: LayerCache,
    chunking: Chunking,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    p = f"layers.{idx}."
    eps = cfg.rms_norm_eps
    if idx == 0:
        # EAGLE-3 first layer: embedding first, then the normed fc output.
        normed_hidden = rms_norm(hidden, w[p + "hidden_norm.weight"], eps)
        a = torch.cat([rms_norm(embeds, w[p + "input_layernorm.weight"], eps), normed_hidden], -1)
        residual = normed_hidden if cfg.norm_before_residual else hidden
    else:
        a = rms_norm(hidden, w[p + "input_layernorm.weight"], eps)
        residual = hidden
    if cfg.mla is not None:
        q, k, v = _project_qkv_mla(cfg, w, p, a, cos, sin)
    else:
        q, k, v = _project_qkv(cfg, w, p, a)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
    del a
    cache.keys.append(k)
    cache.values.append(v)
    o = attend(cfg, q, cache, chunking) if mask is None else attend_masked(cfg, q, cache, mask)
    b, nh, t, dv = o.shape
    o = linear(o.transpose(1, 2).reshape(b, t, nh * dv), w[p + "self_attn.o_proj.weight"])
    if p + "self_attn.o_proj.bias" in w:
        o = o + w[p + "self_attn.o_proj.bias"]
    u = residual + o
    normed = rms_norm(u, w[p + "post_attention_layernorm.weight"], eps)
    return u + rowwise_mlp(normed, w, p, chunking.mlp_rows)


def _steps(
    draft: Draft,
    h: torch.Tensor,
    tokens: torch.Tensor,
    steps: int,
    position_offset: int,
    chunking: Chunking = DEFAULT_CHUNKING,
) -> Iterator[tuple[int, torch.Tensor]]:
    """(k, x_k [B, R, H]) per step; rows j >= R-k of step k were fed the padding token."""
    cfg = draft.config
    w = draft.weights
    b, r, _ = h.shape
    embed = w["embed_tokens.weight"]
    base_pos = torch.arange(r, device=h.device) + position_offset
    caches = [LayerCache(cfg.sliding_window(i)) for i in range(cfg.num_layers)]
    hidden = h
    for k in range(steps):
        # Step k reads x_{j+1+k}; rows past the end get the padding id 0, as the peers do.
        # Under causal + diagonal attention they cannot reach the kept rows.
        tok_k = torch.zeros_like(tokens)
        tok_k[:, : r - k] = tokens[:, k:]
        embeds = F.embedding(tok_k, embed).to(hidden.dtype)
        cos, sin = rope_cos_sin(cfg, base_pos + k, h.device)
        x = hidden
        for i in range(cfg.num_layers):
            x = _layer(cfg, w, i, x, embeds if i == 0 else None, cos, sin, caches[i], chunking)
        del embeds
        yield k, x
        if k + 1 < steps:
            hidden = rms_norm(x, w["norm.weight"], cfg.rms_norm_eps) if cfg.norm_output else x


def iter_steps(
    draft: Draft,
    h: torch.Tensor,
    tokens: torch.Tensor,
    steps: int = 1,
    position_offset: int = 1,
    chunking: Chunking = DEFAULT_CHUNKING,
) -> Iterator[tuple[int, torch.Tensor]]:
    """The draft layer output z (pre-norm) of TTT steps 0..steps-1, one step at a time.

    h: fc output, [R, H] or [B, R, H], row j built from the slots at position j.
    tokens: [R] or [B, R], the token x_{j+1} fed at row j.
    position_offset: RoPE position of row 0 (speculators feeds position_ids[1:], i.e. 1;
      SpecForge 0). Only q-k differences matter, so this moves the logits by float rounding only.
    Yields (k, z_k) with z_k [.., R-k, H]: row j of step k predicts x_{j+2+k} through
    `draft_logits`. Memory stays linear in R: nothing of size R x vocab is built here.
    """
    squeeze = h.dim() == 2
    if squeeze:
        h, tokens = h[None], tokens[None]
    r = h.shape[1]
    for k, x in _steps(draft, h, tokens, steps, position_offset, chunking):
        yield k, (x[0, : r - k] if squeeze else x[:, : r - k])


def draft_logits(draft: Draft, z: torch.Tensor) -> torch.Tensor:
    """Draft-vocab logits lm_head(norm(z)) in float32, [.., D]."""
    normed = rms_norm(z, draft.weights["norm.weight"], draft.config.rms_norm_eps)
    return linear(normed, draft.weights["lm_head.weight"]).float()


def forward_steps(
    draft: Draft,
    h: torch.Tensor,
    tokens: torch.Tensor,
    steps: int = 1,
    position_offset: int = 1,
    return_hidden: bool = False,
) -> list[torch.Tensor] | tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Draft-vocab logits [.., R-k, D] of TTT steps 0..steps-1 (see `iter_steps` for the inputs).

    Holds every step's logits at once: for training (the demo builder trains through it) and
    short inputs; long samples go through `iter_steps` + `draft_logits` in row chunks. With
    return_hidden, also the pre-norm z per step.
    """
    squeeze = h.dim() == 2
    if squeeze:
        h, tokens = h[None], tokens[None]
    r = h.shape[1]
    logits_out: list[torch.Tensor] = []
    hidden_out: list[torch.Tensor] = []
    for k, x in _steps(draft, h, tokens, steps, position_offset):
        logits_out.append(draft_logits(draft, x)[:, : r - k])
        hidden_out.append(x[:, : r - k])
    if squeeze:
        logits_out = [x[0] for x in logits_out]
        hidden_out = [x[0] for x in hidden_out]
    if return_hidden:
        return logits_out, hidden_out
    return logits_out


def draft_layer(
    draft: Draft,
    idx: int,
    hidden: torch.Tensor,
    embeds: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    cache: LayerCache,
    chunking: Chunking = DEFAULT_CHUNKING,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """One draft layer on [B, R, H] rows (embeds: the token embeddings, layer 0 only), appending
    its keys/values to `cache` and attending as `attention.attend` does: causally over the
    cache's first keys, and to one key per later cache entry. The serving replay runs tree nodes
    through it, with the step-0 keys and each node's ancestors' keys in the cache.

    With `mask` [R, all keys] (True = may attend), the rows attend instead to exactly the keys it
    allows among every cache entry concatenated (the live loop's committed rows and tree nodes)."""
    return _layer(draft.config, draft.weights, idx, hidden, embeds, cos, sin, cache, chunking, mask)
