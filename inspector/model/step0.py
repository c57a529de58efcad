"""Step 0 at selected rows for many fc outputs of one sample: the doctor's wiring scorer."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from inspector.draft import Draft
from inspector.model.forward import rowwise_mlp
from inspector.model.linear import linear
from inspector.model.rope import apply_rope, rms_norm, rope_cos_sin


class Step0Shared:
    """What every fc output of one sample shares in a single-layer draft's step 0.

    The first layer's attention input is cat(input_layernorm(embed(x)), hidden_norm(h)), embedding
    first, so q = W_q[:, :H] @ norm(e) + W_q[:, H:] @ hidden_norm(h) (likewise k and v). The
    embedding half, its bias and the RoPE tables depend on the tokens only: computed once here and
    reused for every wiring of the sample.

    tokens: [R], the token x_{j+1} fed at row j; position_offset: RoPE position of row 0.
    """

    @staticmethod
    def supports(draft: Draft) -> bool:
        """Whether the split holds: one layer of Llama attention (MLA's q and kv pass through
        norms after their first projection, so its embedding half cannot be factored out)."""
        return draft.config.num_layers == 1 and draft.config.mla is None

    def __init__(self, draft: Draft, tokens: torch.Tensor, position_offset: int) -> None:
        cfg, w, p = draft.config, draft.weights, "layers.0."
        if not self.supports(draft):
            raise ValueError(
                f"Step0Shared needs a single-layer, non-MLA draft, got {cfg.num_layers} layers"
            )
        hs = cfg.hidden_size
        e = F.embedding(tokens, w["embed_tokens.weight"]).to(w["fc.weight"].dtype)
        e = rms_norm(e, w[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        self.rows = int(tokens.numel())
        self.w_hidden = {n: w[p + f"self_attn.{n}_proj.weight"][:, hs:] for n in "qkv"}
        self.embed_part = {n: linear(e, w[p + f"self_attn.{n}_proj.weight"][:, :hs]) for n in "qkv"}
        for n in "qkv":
            bias = w.get(p + f"self_attn.{n}_proj.bias")
            if bias is not None:
                self.embed_part[n] = self.embed_part[n] + bias
        pos = torch.arange(self.rows, device=tokens.device) + position_offset
        self.cos, self.sin = rope_cos_sin(cfg, pos, tokens.device)


def step0_at_rows(
    draft: Draft,
    shared: Step0Shared,
    h: torch.Tensor,
    rows: torch.Tensor,
    block_bytes: int = 2**62,
    mlp_rows: int = 2**62,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step 0's layer output at `rows` only, for a batch of fc outputs h [B, R, H], with the
    keys and values of every row.

    Equal to `forward_steps(draft, h, tokens, steps=1)[0][:, rows]` (the pre-norm output) for a
    single-layer draft, but keys and values are the only per-row work: queries, o_proj and the
    MLP run on the selected rows; the attention in blocks of at most `block_bytes` of scores, the
    MLP in chunks of `mlp_rows` rows.
    Returns (z [B, R', H], k [B, kvh, R, hd] after RoPE, v [B, kvh, R, hd]).
    """
    cfg, w, p = draft.config, draft.weights, "layers.0."
    eps = cfg.rms_norm_eps
    b, r, _ = h.shape
    nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    hn = rms_norm(h, w[p + "hidden_norm.weight"], eps)
    k = (shared.embed_part["k"] + linear(hn, shared.w_hidden["k"])).view(b, r, nkv, hd)
    v = (shared.embed_part["v"] + linear(hn, shared.w_hidden["v"])).view(b, r, nkv, hd)
    if p + "self_attn.k_norm.weight" in w:
        k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
    k = apply_rope(k.transpose(1, 2), shared.cos, shared.sin)
    v = v.transpose(1, 2)
    rep = nh // nkv
    kr, vr = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    window = cfg.sliding_window(0)
    keys = torch.arange(r, device=h.device)
    hn_rows = hn[:, rows]
    q = (shared.embed_part["q"][rows] + linear(hn_rows, shared.w_hidden["q"])).view(b, -1, nh, hd)
    if p + "self_attn.q_norm.weight" in w:
        q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
    q = apply_rope(q.transpose(1, 2), shared.cos[rows], shared.sin[rows])
    # The attention in blocks of query rows (SDPA with a boolean mask may build float
    # [B, h, block, R] scores and their softmax); the matmuls after it over all rows at once,
    # in MLP row chunks, so each weight is read once per chunk, not once per block.
    block = max(1, min(int(rows.numel()), block_bytes // max(1, 8 * b * nh * r)))
    parts = []
    for a in range(0, int(rows.numel()), block):
        back = rows[a : a + block, None] - keys[None, :]  # rows back, [blk, R]
        allowed = back >= 0  # causal
        if window is not None:
            allowed = allowed & (back < window)
        parts.append(
            F.scaled_dot_product_attention(q[:, :, a : a + block], kr, vr, attn_mask=allowed)
        )
    o = torch.cat(parts, dim=2) if len(parts) > 1 else parts[0]
    o = linear(o.transpose(1, 2).reshape(b, -1, nh * hd), w[p + "self_attn.o_proj.weight"])
    if p + "self_attn.o_proj.bias" in w:
        o = o + w[p + "self_attn.o_proj.bias"]
    residual = hn_rows if cfg.norm_before_residual else h[:, rows]
    u = residual + o
    normed = rms_norm(u, w[p + "post_attention_layernorm.weight"], eps)
    return u + rowwise_mlp(normed, w, p, mlp_rows), k, v


def step0_logits_at_rows(
    draft: Draft, shared: Step0Shared, h: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    """Draft-vocab logits of step 0 at `rows` only, for a batch of fc outputs h [B, R, H]
    (`step0_at_rows`, then the final norm and lm_head on those rows). Float32 [B, len(rows), D].
    """
    w = draft.weights
    z, _, _ = step0_at_rows(draft, shared, h, rows)
    normed = rms_norm(z, w["norm.weight"], draft.config.rms_norm_eps)
    return linear(normed, w["lm_head.weight"]).float()
