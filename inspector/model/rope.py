"""RMSNorm and rotary position embeddings, with the explicit head_dim every engine uses."""

from __future__ import annotations

import math

import torch

from inspector.draft import DraftConfig, RopeConfig


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF LlamaRMSNorm: normalise in float32, cast back, then scale."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def _yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_inv_freq(
    rope: RopeConfig, head_dim: int, max_position: int = 2048
) -> tuple[torch.Tensor, float]:
    """inv_freq [head_dim/2] and the attention scaling factor, from the explicit head_dim.

    Mirrors transformers' rope init functions for the types a draft config can carry. With
    `rope.dim` set, the head_dim/2 frequencies are spread over that dimension instead
    (theta^(-2i/dim)), which models a trainer that built its rotary table for another size.
    """
    base = rope.theta
    dim = rope.dim or head_dim
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / dim))
    s = rope.scaling or {}
    kind = rope.rope_type or "default"
    attn_factor = 1.0
    if kind == "linear":
        inv_freq = inv_freq / float(s.get("factor", 1.0))
    elif kind == "llama3":
        factor = float(s["factor"])
        low = float(s.get("low_freq_factor", 1.0))
        high = float(s.get("high_freq_factor", 4.0))
        old_ctx = float(s.get("original_max_position_embeddings", 8192))
        low_wavelen = old_ctx / low
        high_wavelen = old_ctx / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv_freq = torch.where(medium, smoothed, scaled)
    elif kind == "yarn":
        factor = float(s["factor"])
        old_ctx = float(s.get("original_max_position_embeddings", max_position))
        beta_fast = float(s.get("beta_fast", 32.0))
        beta_slow = float(s.get("beta_slow", 1.0))
        mscale = s.get("mscale")
        mscale_all_dim = s.get("mscale_all_dim")
        if s.get("attention_factor") is not None:
            attn_factor = float(s["attention_factor"])
        elif mscale and mscale_all_dim:
            attn_factor = _yarn_get_mscale(factor, float(mscale)) / _yarn_get_mscale(
                factor, float(mscale_all_dim)
            )
        else:
            attn_factor = _yarn_get_mscale(factor)

        def correction_dim(num_rot: float) -> float:
            return (dim * math.log(old_ctx / (num_rot * 2 * math.pi))) / (2 * math.log(base))

        low = max(math.floor(correction_dim(beta_fast)), 0)
        high = min(math.ceil(correction_dim(beta_slow)), head_dim - 1)
        if low == high:
            high += 0.001
        ramp = (torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)
        extrapolation = 1 - ramp.clamp(0, 1)
        pos_freqs = base ** (torch.arange(0, head_dim, 2).float() / dim)
        inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (
            1.0 / pos_freqs
        ) * extrapolation
    elif kind == "dynamic":
        # Dynamic NTK only changes frequencies past max_position; below it equals default.
        pass
    elif kind != "default":
        raise ValueError(f"unsupported rope_type {kind!r}")
    return inv_freq, attn_factor


def rotary_rope(cfg: DraftConfig) -> RopeConfig:
    """The settings the rotary table is built from: the config's, except in SpecForge PR 186's
    MLA draft, whose table is plain theta over the rope dims whatever rope_scaling says (the
    scaling reaches its softmax scale only, `mla_softmax_scale`)."""
    if cfg.mla is not None and cfg.mla.input_proj:
        return RopeConfig(theta=cfg.rope.theta)
    return cfg.rope


def rope_cos_sin(
    cfg: DraftConfig, positions: torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [.., rope dims] of `positions`: over head_dim, or MLA's rope dims only."""
    inv_freq, attn_factor = rope_inv_freq(rotary_rope(cfg), cfg.rope_head_dim)
    freqs = positions.to(device=device, dtype=torch.float32)[..., None] * inv_freq.to(device)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos() * attn_factor, emb.sin() * attn_factor


def deinterleave(x: torch.Tensor) -> torch.Tensor:
    """DeepSeek's MLA rotates adjacent pairs (0,1), (2,3), ...; moving the even dims first and
    the odd ones after turns that into the half-split rotation `apply_rope` does. q and k get
    the same permutation, so every q.k product is unchanged."""
    return torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)


def mla_softmax_scale(cfg: DraftConfig) -> float:
    """1/sqrt(qk_head_dim), times mscale(factor, mscale_all_dim)^2 under YaRN, as DeepSeek's
    attention (and SpecForge's, TorchSpec's MLA drafts) scales its scores; SpecForge PR 186's
    draft applies it under any rope_scaling (its TTT attention; ttt_length 1 would use SDPA's
    plain 1/sqrt)."""
    scale = 1.0 / math.sqrt(cfg.head_dim)
    pr186 = cfg.mla is not None and cfg.mla.input_proj and bool(cfg.rope.scaling)
    if pr186 or cfg.rope.rope_type == "yarn":  # PR 186: any rope_scaling with mscale_all_dim
        s = cfg.rope.scaling
        m = _yarn_get_mscale(float(s.get("factor", 1.0)), float(s.get("mscale_all_dim") or 0.0))
        scale *= m * m
    return scale


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [B, h, T, hd]; cos/sin [T, hd] (float32) -> computed in float32, cast back.
    return (x.float() * cos + _rotate_half(x.float()) * sin).to(x.dtype)
