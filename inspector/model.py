"""The EAGLE-3 draft forward pass in plain torch (research/formats.md §2.1-2.3).

Row j of a sample combines the wired slots at position j with the embedding of x_{j+1} and
predicts x_{j+2}. Teacher-forced TTT step k feeds the previous step's pre-norm output at the same
row, the token x_{j+1+k}, and positions shifted by k; it attends causally to the step-0 keys and to
its own row's keys of steps 1..k (the "diagonal").

Everything here is differentiable and batch-agnostic ([T, ...] or [B, T, ...]), so the demo builder
trains the draft with this very code. Norms and softmax run in float32 whatever the weights' dtype.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from inspector.draft import Draft, DraftConfig, RopeConfig, VocabMap

__all__ = [
    "Draft",
    "DraftConfig",
    "RopeConfig",
    "VocabMap",
    "apply_rope",
    "Chunking",
    "causal_attention_lse",
    "draft_logits",
    "fc_input",
    "fc_project",
    "forward_steps",
    "iter_steps",
    "mlp",
    "rms_norm",
    "rope_cos_sin",
    "rope_inv_freq",
]


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


def rope_cos_sin(
    cfg: DraftConfig, positions: torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq, attn_factor = rope_inv_freq(cfg.rope, cfg.head_dim)
    freqs = positions.to(device=device, dtype=torch.float32)[..., None] * inv_freq.to(device)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos() * attn_factor, emb.sin() * attn_factor


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [B, h, T, hd]; cos/sin [T, hd] (float32) -> computed in float32, cast back.
    return (x.float() * cos + _rotate_half(x.float()) * sin).to(x.dtype)


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
    h = g @ draft.weights["fc.weight"].T
    if "fc.bias" in draft.weights:
        h = h + draft.weights["fc.bias"]
    return h


def mlp(x: torch.Tensor, w: dict[str, torch.Tensor], p: str) -> torch.Tensor:
    gate = x @ w[p + "mlp.gate_proj.weight"].T
    up = x @ w[p + "mlp.up_proj.weight"].T
    return (F.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T


def _project_qkv(
    cfg: DraftConfig, w: dict[str, torch.Tensor], p: str, a: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, t, _ = a.shape
    q = (a @ w[p + "self_attn.q_proj.weight"].T).view(b, t, cfg.num_heads, cfg.head_dim)
    k = (a @ w[p + "self_attn.k_proj.weight"].T).view(b, t, cfg.num_kv_heads, cfg.head_dim)
    v = (a @ w[p + "self_attn.v_proj.weight"].T).view(b, t, cfg.num_kv_heads, cfg.head_dim)
    if p + "self_attn.q_proj.bias" in w:
        q = q + w[p + "self_attn.q_proj.bias"].view(cfg.num_heads, cfg.head_dim)
        k = k + w[p + "self_attn.k_proj.bias"].view(cfg.num_kv_heads, cfg.head_dim)
        v = v + w[p + "self_attn.v_proj.bias"].view(cfg.num_kv_heads, cfg.head_dim)
    if p + "self_attn.q_norm.weight" in w:  # Qwen3-style per-head norms
        q = rms_norm(q, w[p + "self_attn.q_norm.weight"], cfg.rms_norm_eps)
        k = rms_norm(k, w[p + "self_attn.k_norm.weight"], cfg.rms_norm_eps)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


class _LayerCache:
    """Keys/values of one layer for steps 0..k: step 0 is read causally, later steps diagonally.

    The step-0 keys/values repeated to the query heads (GQA) are kept once for the later steps.
    """

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.k0: torch.Tensor | None = None
        self.v0: torch.Tensor | None = None


@dataclass(frozen=True)
class Chunking:
    """Working-memory bounds of one forward on a long sample (the evaluator halves them and
    retries when a device runs out of memory).

    mlp_rows: rows per MLP matmul (bounds the [rows, intermediate] buffers);
    attn_block_bytes: scores of one block of query rows in the explicit (unfused) attention; the
      fused path needs none, it never materialises scores;
    logits_bytes: the float32 logits of one row chunk and the buffers reduced from them.
    """

    mlp_rows: int = 4096
    attn_block_bytes: int = 256 * 2**20
    logits_bytes: int = 128 * 2**20

    def smaller(self, factor: int) -> Chunking:
        return Chunking(
            max(16, self.mlp_rows // factor),
            max(2**20, self.attn_block_bytes // factor),
            max(2**20, self.logits_bytes // factor),
        )

    def logit_rows(self, vocab: int) -> int:
        """Rows per chunk of [rows, vocab] float32 logits (with ~3 buffers derived from them)."""
        return max(16, self.logits_bytes // (16 * max(1, vocab)))


DEFAULT_CHUNKING = Chunking()


def _attention(
    cfg: DraftConfig, q: torch.Tensor, cache: _LayerCache, chunking: Chunking = DEFAULT_CHUNKING
) -> torch.Tensor:
    """q [B, h, T, hd]; cache holds [B, kvh, T, hd] per step. Returns [B, h, T, hd].

    Step 0 is causal attention (the fused kernel). Step k >= 1 attends causally to the step-0 keys
    and to its own row's keys of steps 1..k. With autograd on (the demo trains through this code)
    the whole [T, T] score matrix is built in float32, exactly as the peers compute it; otherwise
    the memory stays linear in T: the fused causal kernel's output and log-sum-exp are merged with
    the diagonal terms by log-sum-exp (or, where no fused kernel with log-sum-exp runs, query rows
    are processed in blocks of at most `chunking.attn_block_bytes` of scores).
    """
    rep = cfg.num_heads // cfg.num_kv_heads
    training = torch.is_grad_enabled() and q.requires_grad
    # GQA: query head h reads kv head h // rep. In training the repeat is redone per step, as
    # before: one shared node would sum the gradients in another order (other float bits).
    if cache.k0 is None or training:
        cache.k0 = cache.keys[0].repeat_interleave(rep, dim=1)
        cache.v0 = cache.values[0].repeat_interleave(rep, dim=1)
    k0, v0 = cache.k0, cache.v0
    if len(cache.keys) == 1:
        # Step 0 is plain causal attention: the fused kernel, softmax accumulated in float32.
        return F.scaled_dot_product_attention(q, k0, v0, is_causal=True)
    scale = 1.0 / math.sqrt(cfg.head_dim)
    diag_k = [k.repeat_interleave(rep, dim=1) for k in cache.keys[1:]]
    diag_v = [v.repeat_interleave(rep, dim=1) for v in cache.values[1:]]
    if training:
        return _attention_dense(q, k0, v0, diag_k, diag_v, scale)
    fused = causal_attention_lse(q, k0, v0, scale)
    if fused is None:
        return _attention_blocked(q, k0, v0, diag_k, diag_v, scale, chunking.attn_block_bytes)
    out_c, lse = fused
    # Merge the normalised causal part (weight exp(lse)) with one diagonal key per earlier step.
    qf = q.float()
    d = [(qf * k.float()).sum(-1) * scale for k in diag_k]  # [B, h, T] each
    m = torch.stack([lse, *d]).amax(0)
    w_c = (lse - m).exp()
    w_d = [(x - m).exp() for x in d]
    z = w_c + sum(w_d)
    out = out_c.float() * (w_c / z)[..., None]
    for wm, v in zip(w_d, diag_v, strict=True):
        out = out + (wm / z)[..., None] * v.float()
    return out.to(q.dtype)


def _attention_dense(
    q: torch.Tensor,
    k0: torch.Tensor,
    v0: torch.Tensor,
    diag_k: list[torch.Tensor],
    diag_v: list[torch.Tensor],
    scale: float,
) -> torch.Tensor:
    """Causal + diagonal attention over the full [T, T] score matrix in float32 (autograd)."""
    qf = q.float()
    t = q.shape[2]
    s0 = (qf @ k0.float().transpose(-1, -2)) * scale  # [B,h,T,T]
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    s0 = s0.masked_fill(~causal, float("-inf"))
    diag = [((qf * k.float()).sum(-1, keepdim=True)) * scale for k in diag_k]  # [B,h,T,1]
    probs = torch.softmax(torch.cat([s0, *diag], dim=-1), dim=-1)
    out = probs[..., :t] @ v0.float()
    for m, v in enumerate(diag_v):
        out = out + probs[..., t + m : t + m + 1] * v.float()
    return out.to(q.dtype)


def _attention_blocked(
    q: torch.Tensor,
    k0: torch.Tensor,
    v0: torch.Tensor,
    diag_k: list[torch.Tensor],
    diag_v: list[torch.Tensor],
    scale: float,
    block_bytes: int,
) -> torch.Tensor:
    """The same as `_attention_dense`, query rows in blocks: at most block x T scores at once."""
    b, h, t, _ = q.shape
    # scores, their exp and the mask: ~3 float32 buffers of [B, h, block, T]
    block = max(1, min(t, block_bytes // max(1, 12 * b * h * t)))
    out = torch.empty_like(q)
    rows = torch.arange(t, device=q.device)
    for a in range(0, t, block):
        e = min(t, a + block)
        qf = q[:, :, a:e].float()
        s0 = (qf @ k0[:, :, :e].float().transpose(-1, -2)) * scale  # [B, h, blk, e]
        s0 = s0.masked_fill(rows[None, :e] > rows[a:e, None], float("-inf"))
        diag = [(qf * k[:, :, a:e].float()).sum(-1, keepdim=True) * scale for k in diag_k]
        probs = torch.softmax(torch.cat([s0, *diag], dim=-1), dim=-1)
        o = probs[..., :e] @ v0[:, :, :e].float()
        for m, v in enumerate(diag_v):
            o = o + probs[..., e + m : e + m + 1] * v[:, :, a:e].float()
        out[:, :, a:e] = o.to(q.dtype)
    return out


# Fused causal attention kernels that also return the log-sum-exp of each query row, by device
# type; None once a kernel is missing or fails its check on this device and dtype.
_FUSED_OK: dict[tuple[str, torch.dtype], bool] = {}


def _fused_causal_lse(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    aten = torch.ops.aten
    if q.device.type == "cpu":
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, True, attn_mask=None, scale=scale
        )
        return out, lse
    if q.device.type == "cuda":
        # The memory-efficient kernel takes float32 as well as bf16/fp16 and any head_dim the
        # drafts use; its log-sum-exp may be padded along the rows.
        res = aten._scaled_dot_product_efficient_attention(
            q, k, v, None, True, 0.0, True, scale=scale
        )
        return res[0], res[1][..., : q.shape[2]]
    raise NotImplementedError(q.device.type)


def causal_attention_lse(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(softmax(q k^T * scale, causal) v, log-sum-exp per row [B, h, T] float32) from a fused
    kernel, or None where none is usable. q, k, v [B, h, T, hd] with as many kv heads as q heads.

    These kernels are torch internals; each (device type, dtype) is checked once against the
    explicit computation on a small problem before it is trusted.
    """
    key = (q.device.type, q.dtype)
    ok = _FUSED_OK.get(key)
    if ok is None:
        ok = _check_fused(q.device, q.dtype, q.shape[-1])
        _FUSED_OK[key] = ok
    if not ok:
        return None
    out, lse = _fused_causal_lse(q, k, v, scale)
    return out, lse.float()


def _check_fused(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    gen = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(1, 2, 37, head_dim, generator=gen) for _ in range(3))
    scale = 1.0 / math.sqrt(head_dim)
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~torch.ones(37, 37, dtype=torch.bool).tril(), float("-inf"))
    ref_lse = torch.logsumexp(s, -1)
    ref = torch.softmax(s, -1) @ v
    try:
        out, lse = _fused_causal_lse(*(x.to(device, dtype) for x in (q, k, v)), scale)
    except Exception:  # noqa: BLE001 - a missing or unsupported kernel: use the explicit path
        return False
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    return bool(
        lse.shape == ref_lse.shape
        and torch.allclose(lse.float().cpu(), ref_lse, atol=tol, rtol=tol)
        and torch.allclose(out.float().cpu(), ref, atol=tol, rtol=tol)
    )


def _rowwise_mlp(x: torch.Tensor, w: dict[str, torch.Tensor], p: str, rows: int) -> torch.Tensor:
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
    cache: _LayerCache,
    chunking: Chunking,
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
    q, k, v = _project_qkv(cfg, w, p, a)
    del a
    q = apply_rope(q, cos, sin)
    k = apply_rope(k, cos, sin)
    cache.keys.append(k)
    cache.values.append(v)
    o = _attention(cfg, q, cache, chunking)
    b, _, t, _ = o.shape
    o = (
        o.transpose(1, 2).reshape(b, t, cfg.num_heads * cfg.head_dim)
        @ w[p + "self_attn.o_proj.weight"].T
    )
    if p + "self_attn.o_proj.bias" in w:
        o = o + w[p + "self_attn.o_proj.bias"]
    u = residual + o
    normed = rms_norm(u, w[p + "post_attention_layernorm.weight"], eps)
    return u + _rowwise_mlp(normed, w, p, chunking.mlp_rows)


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
    caches = [_LayerCache() for _ in range(cfg.num_layers)]
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
    return (normed @ draft.weights["lm_head.weight"].T).float()


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


# --- step 0 at selected rows, for many fc outputs of one sample (the doctor's scorer) -----------
class Step0Shared:
    """What every fc output of one sample shares in a single-layer draft's step 0.

    The first layer's attention input is cat(input_layernorm(embed(x)), hidden_norm(h)), embedding
    first, so q = W_q[:, :H] @ norm(e) + W_q[:, H:] @ hidden_norm(h) (likewise k and v). The
    embedding half, its bias and the RoPE tables depend on the tokens only: computed once here and
    reused for every wiring of the sample.

    tokens: [R], the token x_{j+1} fed at row j; position_offset: RoPE position of row 0.
    """

    def __init__(self, draft: Draft, tokens: torch.Tensor, position_offset: int) -> None:
        cfg, w, p = draft.config, draft.weights, "layers.0."
        if cfg.num_layers != 1:
            raise ValueError(f"Step0Shared needs a single-layer draft, got {cfg.num_layers} layers")
        hs = cfg.hidden_size
        e = F.embedding(tokens, w["embed_tokens.weight"]).to(w["fc.weight"].dtype)
        e = rms_norm(e, w[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        self.rows = int(tokens.numel())
        self.w_hidden = {n: w[p + f"self_attn.{n}_proj.weight"][:, hs:] for n in "qkv"}
        self.embed_part = {n: e @ w[p + f"self_attn.{n}_proj.weight"][:, :hs].T for n in "qkv"}
        for n in "qkv":
            bias = w.get(p + f"self_attn.{n}_proj.bias")
            if bias is not None:
                self.embed_part[n] = self.embed_part[n] + bias
        pos = torch.arange(self.rows, device=tokens.device) + position_offset
        self.cos, self.sin = rope_cos_sin(cfg, pos, tokens.device)


def step0_logits_at_rows(
    draft: Draft, shared: Step0Shared, h: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    """Draft-vocab logits of step 0 at `rows` only, for a batch of fc outputs h [B, R, H].

    Equal to `forward_steps(draft, h, tokens, steps=1)[0][:, rows]` for a single-layer draft, but
    keys and values are the only per-row work: queries, o_proj, the MLP and the lm_head run on the
    selected rows. Returns float32 [B, len(rows), D].
    """
    cfg, w, p = draft.config, draft.weights, "layers.0."
    eps = cfg.rms_norm_eps
    b, r, _ = h.shape
    nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    hn = rms_norm(h, w[p + "hidden_norm.weight"], eps)
    hn_rows = hn[:, rows]
    q = (shared.embed_part["q"][rows] + hn_rows @ shared.w_hidden["q"].T).view(b, -1, nh, hd)
    k = (shared.embed_part["k"] + hn @ shared.w_hidden["k"].T).view(b, r, nkv, hd)
    v = (shared.embed_part["v"] + hn @ shared.w_hidden["v"].T).view(b, r, nkv, hd)
    if p + "self_attn.q_norm.weight" in w:
        q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
        k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
    q = apply_rope(q.transpose(1, 2), shared.cos[rows], shared.sin[rows])
    k = apply_rope(k.transpose(1, 2), shared.cos, shared.sin)
    v = v.transpose(1, 2)
    rep = nh // nkv
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    allowed = torch.arange(r, device=h.device)[None, :] <= rows[:, None]  # causal, [R', R]
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    o = o.transpose(1, 2).reshape(b, -1, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
    if p + "self_attn.o_proj.bias" in w:
        o = o + w[p + "self_attn.o_proj.bias"]
    residual = hn_rows if cfg.norm_before_residual else h[:, rows]
    u = residual + o
    z = u + mlp(rms_norm(u, w[p + "post_attention_layernorm.weight"], eps), w, p)
    normed = rms_norm(z, w["norm.weight"], eps)
    return (normed @ w["lm_head.weight"].T).float()


__all__ += ["Step0Shared", "step0_logits_at_rows"]
