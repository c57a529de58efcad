"""One draft decoder layer: the one `layer()` that every consumer runs (the teacher-forced TTT
steps, the doctor's step 0 at chosen rows, the serving replay's trees, the live loop).

The pieces are public because the doctor's step-0 scorer computes the first layer's projections
in two halves (the embedding half is shared by every wiring of a sample) and then finishes the
layer with the same `heads_*` and `layer_output` as everyone else.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from inspector.draft import DraftConfig
from inspector.model.attention import DEFAULT_CHUNKING, AttendSpec, Chunking, LayerCache, attend
from inspector.model.linear import linear
from inspector.model.rope import apply_rope, deinterleave, rms_norm
from inspector.model.tap import Tap, tap_at
from inspector.model.weights import LayerWeights, LlamaAttention, MlaAttention


def mlp(x: torch.Tensor, lw: LayerWeights) -> torch.Tensor:
    return linear(F.silu(linear(x, lw.gate)) * linear(x, lw.up), lw.down)


def rowwise_mlp(x: torch.Tensor, lw: LayerWeights, rows: int) -> torch.Tensor:
    """mlp(x), in row chunks when x is long and no autograd is running (same values per row)."""
    r = x.shape[-2]
    if r <= rows or (torch.is_grad_enabled() and x.requires_grad):
        return mlp(x, lw)
    return torch.cat([mlp(x[..., a : a + rows, :], lw) for a in range(0, r, rows)], dim=-2)


def attention_input(
    cfg: DraftConfig, lw: LayerWeights, hidden: torch.Tensor, embeds: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(the attention input, the residual) of a layer. Layer 0 of EAGLE-3 concatenates the normed
    token embedding and the normed fc output, embedding first; SpecForge PR 186's MLA draft then
    projects the concat to H (`input_proj`: RMSNorm over the 2H, then the 2H -> H linear), its
    residual still the fc output."""
    eps = cfg.rms_norm_eps
    if lw.hidden_norm is not None:
        assert embeds is not None, "layer 0 reads the token embeddings"
        normed_hidden = rms_norm(hidden, lw.hidden_norm, eps)
        a = torch.cat([rms_norm(embeds, lw.input_norm, eps), normed_hidden], -1)
        if lw.input_proj is not None:
            assert lw.input_proj_norm is not None
            a = linear(rms_norm(a, lw.input_proj_norm, eps), lw.input_proj)
        return a, normed_hidden if cfg.norm_before_residual else hidden
    return rms_norm(hidden, lw.input_norm, eps), hidden


def query_heads(cfg: DraftConfig, attn: LlamaAttention, q: torch.Tensor) -> torch.Tensor:
    """q_proj's output [B, T, heads*hd] (bias already added) as [B, heads, T, hd], q-normed."""
    b, t, _ = q.shape
    q = q.view(b, t, cfg.num_heads, cfg.head_dim)
    if attn.q_norm is not None:  # Qwen3-style per-head norms
        q = rms_norm(q, attn.q_norm, cfg.rms_norm_eps)
    return q.transpose(1, 2)


def kv_heads(
    cfg: DraftConfig, attn: LlamaAttention, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """k_proj's and v_proj's outputs (biases added) as [B, kv heads, T, hd], k k-normed."""
    b, t, _ = k.shape
    k = k.view(b, t, cfg.num_kv_heads, cfg.head_dim)
    v = v.view(b, t, cfg.num_kv_heads, cfg.head_dim)
    if attn.k_norm is not None:
        k = rms_norm(k, attn.k_norm, cfg.rms_norm_eps)
    return k.transpose(1, 2), v.transpose(1, 2)


def add_bias(x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x if bias is None else x + bias


def project_llama(
    cfg: DraftConfig, attn: LlamaAttention, a: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k (after RoPE) and v, [B, heads, T, hd] each (k and v with the kv heads)."""
    q = query_heads(cfg, attn, add_bias(linear(a, attn.q), attn.q_bias))
    k, v = kv_heads(
        cfg,
        attn,
        add_bias(linear(a, attn.k), attn.k_bias),
        add_bias(linear(a, attn.v), attn.v_bias),
    )
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def project_mla(
    cfg: DraftConfig, attn: MlaAttention, a: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MLA q, k (RoPE applied to the rope dims) and v, [B, heads, T, dims] each.

    As SpecForge's and TorchSpec's MLA drafts (after DeepSeek-V3): q = q_b(norm(q_a(a))) split
    per head into [nope | rope]; kv_a(a) = [compressed kv | one shared rope key]; kv_b(norm(
    compressed)) = per head [k_nope | v]. RoPE rotates adjacent pairs of the rope dims only.
    """
    m = cfg.mla
    assert m is not None
    b, t, _ = a.shape
    nh = cfg.num_heads
    # SpecForge PR 186's q_a / kv_a norms keep DeepseekV3RMSNorm's default eps, not the config's
    eps = 1e-6 if m.input_proj else cfg.rms_norm_eps
    if attn.q is not None:
        q = linear(a, attn.q)
    else:
        assert attn.q_a is not None and attn.q_a_norm is not None and attn.q_b is not None
        q = linear(rms_norm(linear(a, attn.q_a), attn.q_a_norm, eps), attn.q_b)
    q = q.view(b, t, nh, m.qk_head_dim).transpose(1, 2)
    compressed, k_rope = linear(a, attn.kv_a).split([m.kv_lora_rank, m.qk_rope_head_dim], dim=-1)
    kv = linear(rms_norm(compressed, attn.kv_a_norm, eps), attn.kv_b)
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


def layer_output(
    cfg: DraftConfig,
    lw: LayerWeights,
    residual: torch.Tensor,
    o: torch.Tensor,
    mlp_rows: int,
    tap: Tap | None = None,
) -> torch.Tensor:
    """The layer after attention: o_proj (+ bias) on the heads' outputs o [B, heads, T, dv], the
    residual, the post-attention norm and the MLP (in row chunks of `mlp_rows`)."""
    b, nh, t, dv = o.shape
    o = add_bias(linear(o.transpose(1, 2).reshape(b, t, nh * dv), lw.attn.o), lw.attn.o_bias)
    tap_at(tap, f"layer{lw.index}.attn_out", o)
    u = residual + o
    normed = rms_norm(u, lw.post_norm, cfg.rms_norm_eps)
    m = rowwise_mlp(normed, lw, mlp_rows)
    tap_at(tap, f"layer{lw.index}.mlp_out", m)
    out = u + m
    tap_at(tap, f"layer{lw.index}.out", out)
    return out


def layer(
    cfg: DraftConfig,
    lw: LayerWeights,
    hidden: torch.Tensor,
    embeds: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    cache: LayerCache,
    spec: AttendSpec | None = None,
    chunking: Chunking = DEFAULT_CHUNKING,
    tap: Tap | None = None,
) -> torch.Tensor:
    """One draft layer on [B, R, H] rows (embeds: the token embeddings, read by layer 0 only),
    appending its keys/values to `cache` and attending as `spec` says (see `attention.attend`).
    `tap` sees its stages (`model.tap`)."""
    a, residual = attention_input(cfg, lw, hidden, embeds)
    tap_at(tap, f"layer{lw.index}.attn_input", a)
    tap_at(tap, f"layer{lw.index}.residual", residual)
    if isinstance(lw.attn, MlaAttention):
        q, k, v = project_mla(cfg, lw.attn, a, cos, sin)
    else:
        q, k, v = project_llama(cfg, lw.attn, a, cos, sin)
    del a
    cache.append(k, v)
    o = attend(cfg, q, cache, spec, chunking)
    return layer_output(cfg, lw, residual, o, chunking.mlp_rows, tap)
