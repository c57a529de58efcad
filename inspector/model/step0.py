"""Step 0 at selected rows for many fc outputs of one sample: the doctor's wiring scorer and the
serving replay's round starts. The same layer as `layer.layer`, its first projection split in two
halves, so that the half that reads only the tokens is computed once per sample."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from inspector.draft import Draft
from inspector.model.attention import DEFAULT_CHUNKING, AttendSpec, Chunking, LayerCache, attend
from inspector.model.decoder import add_bias, kv_heads, layer_output, query_heads
from inspector.model.heads import draft_logits
from inspector.model.linear import linear
from inspector.model.rope import apply_rope, rms_norm, rope_cos_sin
from inspector.model.weights import LayerWeights, LlamaAttention, resolve_layer


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
        cfg, w = draft.config, draft.weights
        if not self.supports(draft):
            raise ValueError(
                f"Step0Shared needs a single-layer, non-MLA draft, got {cfg.num_layers} layers"
            )
        self.layer: LayerWeights = resolve_layer(draft, 0)
        attn = self.layer.attn
        assert isinstance(attn, LlamaAttention)
        self.attn = attn
        hs = cfg.hidden_size
        e = F.embedding(tokens, w["embed_tokens.weight"]).to(w["fc.weight"].dtype)
        e = rms_norm(e, self.layer.input_norm, cfg.rms_norm_eps)
        self.rows = int(tokens.numel())
        full = {"q": attn.q, "k": attn.k, "v": attn.v}
        bias = {"q": attn.q_bias, "k": attn.k_bias, "v": attn.v_bias}
        self.w_hidden = {n: full[n][:, hs:] for n in "qkv"}
        self.embed_part = {n: add_bias(linear(e, full[n][:, :hs]), bias[n]) for n in "qkv"}
        pos = torch.arange(self.rows, device=tokens.device) + position_offset
        self.cos, self.sin = rope_cos_sin(cfg, pos, tokens.device)


def step0_at_rows(
    draft: Draft,
    shared: Step0Shared,
    h: torch.Tensor,
    rows: torch.Tensor,
    chunking: Chunking = DEFAULT_CHUNKING,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step 0's layer output at `rows` only, for a batch of fc outputs h [B, R, H], with the
    keys and values of every row.

    Equal to `forward_steps(draft, h, tokens, steps=1)[0][:, rows]` (the pre-norm output) for a
    single-layer draft, but keys and values are the only per-row work: queries, o_proj and the
    MLP run on the selected rows; the attention in blocks of bounded scores, the MLP in row
    chunks (`chunking`).
    Returns (z [B, R', H], k [B, kvh, R, hd] after RoPE, v [B, kvh, R, hd]).
    """
    cfg, lw, attn = draft.config, shared.layer, shared.attn
    assert lw.hidden_norm is not None
    hn = rms_norm(h, lw.hidden_norm, cfg.rms_norm_eps)
    k, v = kv_heads(
        cfg,
        attn,
        shared.embed_part["k"] + linear(hn, shared.w_hidden["k"]),
        shared.embed_part["v"] + linear(hn, shared.w_hidden["v"]),
    )
    k = apply_rope(k, shared.cos, shared.sin)
    hn_rows = hn[:, rows]
    q = query_heads(cfg, attn, shared.embed_part["q"][rows] + linear(hn_rows, shared.w_hidden["q"]))
    q = apply_rope(q, shared.cos[rows], shared.sin[rows])
    cache = LayerCache(cfg.sliding_window(0), [k], [v])
    o = attend(cfg, q, cache, AttendSpec(rows=rows), chunking)
    residual = hn_rows if cfg.norm_before_residual else h[:, rows]
    return layer_output(cfg, lw, residual, o, chunking.mlp_rows), k, v


def step0_logits_at_rows(
    draft: Draft, shared: Step0Shared, h: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    """Draft-vocab logits of step 0 at `rows` only, for a batch of fc outputs h [B, R, H]
    (`step0_at_rows`, then the final norm and lm_head on those rows). Float32 [B, len(rows), D].
    """
    z, _, _ = step0_at_rows(draft, shared, h, rows)
    return draft_logits(draft, z)
