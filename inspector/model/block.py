"""The block draft forward (z-lab's DFlash and DFlash2), beside EAGLE-3's, on the same layer
pieces (q/k/v heads with Qwen3's per-head norms, RoPE, the attention entry point, the MLP).

Given the context features of a prefix (the target's hidden states at the draft's layers,
concatenated in fc block order, one row per verified position 0..P-1) and a block
[last verified token, mask, ..., mask] at positions P..P+B-1, `block_logits` returns the logits
of block rows 1..B-1 (row i drafts the token at position P+i), as the reference computes them
(`dflash` 0.1.0: `DFlashDraftModel.forward`, `compute_logits`, as `dflash_generate` calls them):

    ctx  = hidden_norm(fc(context))                   once, shared by every layer
    x    = embed(block) * input_embedding_scale       the target's embedding rows
    per layer:  a = input_norm(x)    [DFlash2: a = conv_a(a)]
                q = q_norm(q_proj(a)); k = k_norm(k_proj([ctx; a])); v = v_proj([ctx; a])
                RoPE: k over positions 0..P+B-1, q over P..P+B-1
                o = o_proj(attention)   [DFlash2: conv_a's second half on o]
                x = x + o;  x = x + mlp(post_norm(x))   [DFlash2: conv_m before and after]
    logits = softcap(lm_head(norm(x))[1:] * output_multiplier)

Attention: every block row sees every context row and, per layer, the block rows the layer
allows (all of them unless the layer is causal); a sliding window bounds both sides by
position (|query - key| < window; only backwards for a causal layer). The reference's cache
(`dflash_generate` crops it back to the context after each round) gives the same keys: a
context row's keys depend on its own features and position only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from inspector.draft import BlockConfig, Draft, DraftConfig
from inspector.model.attention import AttendSpec, LayerCache, attend
from inspector.model.decoder import add_bias, kv_heads, mlp, query_heads
from inspector.model.linear import linear
from inspector.model.rope import apply_rope, rms_norm, rope_cos_sin
from inspector.model.tap import Tap, tap_at
from inspector.model.weights import LayerWeights, LlamaAttention, resolve_layers


def _block_config(draft: Draft) -> BlockConfig:
    block = draft.config.block
    if block is None:
        raise ValueError(f"{draft.name}: not a block draft (config.block is None)")
    return block


def context_features(draft: Draft, context: torch.Tensor) -> torch.Tensor:
    """hidden_norm(fc(context)) [.., P, H]: what every layer projects its context keys from."""
    h = linear(context.to(draft.dtype), draft.weights["fc.weight"])
    return rms_norm(h, draft.weights["hidden_norm.weight"], draft.config.rms_norm_eps)


def noise_embedding(draft: Draft, block_ids: torch.Tensor) -> torch.Tensor:
    """The block's input rows [.., B, H]: the target's embedding (the mask token's row replaced
    by `mask_embedding` where the draft has one, as vLLM 0.32 does) times
    input_embedding_scale."""
    block = _block_config(draft)
    w = draft.weights
    x = F.embedding(block_ids, w["embed_tokens.weight"])
    mask_row = w.get("mask_embedding")
    if mask_row is not None:
        is_mask = (block_ids == block.mask_token_id)[..., None]
        x = torch.where(is_mask, mask_row.to(x.dtype), x)
    return x * block.input_embedding_scale


def block_mask(
    num_context: int,
    num_block: int,
    causal: bool,
    window: int | None,
    device: torch.device,
    *,
    from_anchor: bool = False,
) -> torch.Tensor:
    """[B, P+B] booleans (True: may attend) for block rows at positions P.. over keys at 0..P+B-1:
    the reference's mask (every key, or the earlier ones for a causal layer, within the window).
    `from_anchor`: speculators' window (`BlockConfig.window_from_anchor`), context keys at
    P - window .. P - 1 and every block key."""
    return anchored_mask(
        torch.tensor([num_context], device=device),
        num_context,
        num_block,
        causal,
        window,
        from_anchor=from_anchor,
    )[0, 0]


def _conv(
    hidden: torch.Tensor, dynamic: torch.Tensor, base: torch.Tensor, group_size: int
) -> torch.Tensor:
    """DFlash2's grouped dynamic causal convolution along the block's rows: row t sums rows
    t-j (j < kernel taps, zeros before the block) times (base[j] + dynamic[t, j]), the dynamic
    kernel one scalar per group of `group_size` channels. hidden [b, L, H]; dynamic
    [b, L, taps, groups]; base [taps, H]."""
    b, length, h = hidden.shape
    groups = h // group_size
    rows = hidden.view(b, length, groups, group_size)
    dyn = dynamic.reshape(b, length, base.shape[0], groups, 1)
    out = torch.zeros_like(rows)
    for j in range(base.shape[0]):
        shifted = rows if j == 0 else F.pad(rows[:, :-j], (0, 0, 0, 0, j, 0))
        out = out + base[j].view(1, 1, groups, group_size).to(hidden.dtype) * shifted
        out = torch.addcmul(out, dyn[:, :, j], shifted)
    return out.view_as(hidden)


class _Conv:
    """One DFlash2 convolution pair (`attention_conv` or `mlp_conv` of a layer): `prepare` convolves
    its input with the first kernel and keeps the second's dynamic part for `finish`."""

    def __init__(self, draft: Draft, prefix: str) -> None:
        block = _block_config(draft)
        assert block.conv_kernel_size is not None and block.conv_group_size is not None
        self.taps = block.conv_kernel_size
        self.group = block.conv_group_size
        self.base = draft.weights[prefix + "base_kernel"]
        self.proj = draft.weights[prefix + "kernel_projection.weight"]

    def prepare(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        groups = x.shape[-1] // self.group
        dynamic = linear(x, self.proj).view(*x.shape[:-1], 2, self.taps, groups)
        return _conv(x, dynamic[..., 0, :, :], self.base[0], self.group), dynamic[..., 1, :, :]

    def finish(self, x: torch.Tensor, dynamic: torch.Tensor) -> torch.Tensor:
        return _conv(x, dynamic, self.base[1], self.group)


Rope = tuple[torch.Tensor, torch.Tensor]  # (cos, sin) of some rows' positions


def _attention(
    cfg: DraftConfig,
    attn: LlamaAttention,
    a: torch.Tensor,
    ctx: torch.Tensor,
    rope_ctx: Rope,
    rope_block: Rope,
    mask: torch.Tensor,
) -> torch.Tensor:
    """o_proj of the block rows' attention over [context; block] keys, [b, B, H]. The context
    may be one sample's rows shared by b blocks (ctx [1, P, H]): its keys are projected once."""
    q = query_heads(cfg, attn, add_bias(linear(a, attn.q), attn.q_bias))
    k_ctx, v_ctx = kv_heads(
        cfg,
        attn,
        add_bias(linear(ctx, attn.k), attn.k_bias),
        add_bias(linear(ctx, attn.v), attn.v_bias),
    )
    k_blk, v_blk = kv_heads(
        cfg,
        attn,
        add_bias(linear(a, attn.k), attn.k_bias),
        add_bias(linear(a, attn.v), attn.v_bias),
    )
    q = apply_rope(q, *rope_block)
    k_ctx = apply_rope(k_ctx, *rope_ctx)
    k_blk = apply_rope(k_blk, *rope_block)
    b = a.shape[0]
    cache = LayerCache()  # the window is in `mask`: explicit masks take no cache window
    cache.append(k_ctx, v_ctx)  # batch 1 under b blocks: attend shares it, copies nothing
    cache.append(k_blk, v_blk)
    o = attend(cfg, q, cache, AttendSpec(mask=mask))
    b, nh, t, dv = o.shape
    return add_bias(linear(o.transpose(1, 2).reshape(b, t, nh * dv), attn.o), attn.o_bias)


def _layer(
    draft: Draft,
    lw: LayerWeights,
    x: torch.Tensor,
    ctx: torch.Tensor,
    rope_ctx: Rope,
    rope_block: Rope,
    mask: torch.Tensor,
    tap: Tap | None = None,
) -> torch.Tensor:
    cfg = draft.config
    block = _block_config(draft)
    assert isinstance(lw.attn, LlamaAttention)
    dflash2 = block.family == "dflash2"
    p = f"layers.{lw.index}."
    name = f"layer{lw.index}."
    a = rms_norm(x, lw.input_norm, cfg.rms_norm_eps)
    if dflash2:
        conv_a = _Conv(draft, p + "attention_conv.")
        a, dyn_a = conv_a.prepare(a)
    tap_at(tap, name + "attn_input", a)
    tap_at(tap, name + "residual", x)
    o = _attention(cfg, lw.attn, a, ctx, rope_ctx, rope_block, mask)
    if dflash2:
        o = conv_a.finish(o, dyn_a)
    tap_at(tap, name + "attn_out", o)
    x = x + o
    m = rms_norm(x, lw.post_norm, cfg.rms_norm_eps)
    if dflash2:
        conv_m = _Conv(draft, p + "mlp_conv.")
        m, dyn_m = conv_m.prepare(m)
        m = conv_m.finish(mlp(m, lw), dyn_m)
    else:
        m = mlp(m, lw)
    tap_at(tap, name + "mlp_out", m)
    out = x + m
    tap_at(tap, name + "out", out)
    return out


def block_hidden(draft: Draft, context: torch.Tensor, block_ids: torch.Tensor) -> torch.Tensor:
    """The final-normed rows of the whole block [.., B, H] (row 0: the anchor's).

    context: [P, N*Ht] or [b, P, N*Ht], the target's hidden states at the draft's layers
      (`config.block.hf_layer_ids`) for positions 0..P-1, concatenated in fc block order;
    block_ids: [B] or [b, B], the block [last verified token, mask, ...] at positions P..P+B-1.
    """
    cfg = draft.config
    block = _block_config(draft)
    squeeze = block_ids.dim() == 1
    if squeeze:
        context, block_ids = context[None], block_ids[None]
    p, b = context.shape[-2], block_ids.shape[-1]
    ctx = context_features(draft, context)
    x = noise_embedding(draft, block_ids).to(ctx.dtype)
    cos, sin = rope_cos_sin(cfg, torch.arange(p + b), ctx.device)
    rope_ctx, rope_block = (cos[:p], sin[:p]), (cos[p:], sin[p:])
    for lw in resolve_layers(draft):
        window = cfg.sliding_window(lw.index)
        causal = block.causal[lw.index]
        mask = block_mask(p, b, causal, window, ctx.device, from_anchor=block.window_from_anchor)
        x = _layer(draft, lw, x, ctx, rope_ctx, rope_block, mask)
    out = rms_norm(x, draft.weights["norm.weight"], cfg.rms_norm_eps)
    return out[0] if squeeze else out


def anchored_mask(
    anchors: torch.Tensor,
    num_context: int,
    num_block: int,
    causal: bool,
    window: int | None,
    *,
    from_anchor: bool = False,
) -> torch.Tensor:
    """[A, 1, B, P+B] booleans for A blocks of one sample at once: block a's rows sit at
    positions anchors[a].. and see the context rows before anchors[a] (the rows the target had
    verified when it drafted there) and their own block's rows (all of them, or the earlier ones
    for a causal layer). A window bounds both by each row's position (the reference), or, with
    `from_anchor` (speculators' trainer), only the context, by the anchor: keys n - window ..
    n - 1."""
    device = anchors.device
    n = anchors[:, None, None]  # [A, 1, 1]
    q = n + torch.arange(num_block, device=device)[None, :, None]  # [A, B, 1]
    kc = torch.arange(num_context, device=device)[None, None, :]  # context keys
    kb = n + torch.arange(num_block, device=device)[None, None, :]  # own block keys
    ctx_ok = (kc < n).expand(-1, num_block, -1)
    blk_ok = torch.ones_like(q - kb, dtype=torch.bool)
    if causal:
        blk_ok = blk_ok & (kb <= q)
    if window is not None and from_anchor:
        ctx_ok = ctx_ok & (n - kc <= window)
    elif window is not None:
        ctx_ok = ctx_ok & (q - kc < window)
        blk_ok = blk_ok & (q - kb < window)
        if not causal:
            blk_ok = blk_ok & (kb - q < window)
    return torch.cat([ctx_ok, blk_ok], dim=-1)[:, None]


def anchored_block_hidden(
    draft: Draft,
    context: torch.Tensor | None,
    anchors: torch.Tensor,
    block_ids: torch.Tensor,
    *,
    fc_out: torch.Tensor | None = None,
    tap: Tap | None = None,
) -> torch.Tensor:
    """The final-normed rows [A, B, H] of A blocks drafted over one sample: block a is
    [x_n, mask, ...] at positions n.. (n = anchors[a]) over the context rows 0..n-1, what a
    round after committed x_0..x_n drafts. The context's fc, norm and keys are computed once for
    every block; each block gives what `block_hidden` gives for it alone.

    context: [T, N*Ht] the sample's features at the draft's layers, fc block order; anchors:
    [A] positions 1..T; block_ids: [A, B]. `fc_out` [T, H] instead of `context`: fc's output
    already summed (the doctor's search adds cached per-block projections: fc is linear).
    `tap` sees its stages (`model.tap`)."""
    cfg = draft.config
    block = _block_config(draft)
    if fc_out is None:
        assert context is not None
        fc_out = linear(context.to(draft.dtype), draft.weights["fc.weight"])
    ctx = rms_norm(fc_out, draft.weights["hidden_norm.weight"], cfg.rms_norm_eps)[None]
    tap_at(tap, "context", ctx[0])
    t, b = ctx.shape[-2], block_ids.shape[-1]
    x = noise_embedding(draft, block_ids).to(ctx.dtype)
    tap_at(tap, "embed", x)
    rope_ctx = rope_cos_sin(cfg, torch.arange(t), ctx.device)
    positions = anchors[:, None].cpu() + torch.arange(b)[None, :]
    cos, sin = rope_cos_sin(cfg, positions, ctx.device)
    rope_block = (cos[:, None], sin[:, None])  # [A, 1, B, d]: broadcast over the heads
    for lw in resolve_layers(draft):
        window = cfg.sliding_window(lw.index)
        causal = block.causal[lw.index]
        mask = anchored_mask(anchors, t, b, causal, window, from_anchor=block.window_from_anchor)
        x = _layer(draft, lw, x, ctx, rope_ctx, rope_block, mask, tap)
    out = rms_norm(x, draft.weights["norm.weight"], cfg.rms_norm_eps)
    tap_at(tap, "norm", out)
    return out


def head_logits(draft: Draft, normed: torch.Tensor) -> torch.Tensor:
    """The target's head over final-normed rows, float32 [.., V]: lm_head, output_multiplier,
    then the soft cap (tanh(l / cap) * cap) when the draft has one."""
    block = _block_config(draft)
    logits = linear(normed, draft.weights["lm_head.weight"]).float() * block.output_multiplier
    cap = block.final_logit_softcapping
    return torch.tanh(logits / cap) * cap if cap is not None else logits


def block_logits(draft: Draft, context: torch.Tensor, block_ids: torch.Tensor) -> torch.Tensor:
    """Logits [.., B-1, V] (float32) of block rows 1..B-1: row i drafts position P+i (see
    `block_hidden` for the inputs)."""
    return head_logits(draft, block_hidden(draft, context, block_ids)[..., 1:, :])


def selector_path(
    draft: Draft, normed: torch.Tensor, logits: torch.Tensor, anchor: torch.Tensor
) -> torch.Tensor:
    """DFlash2's greedy proposal [b, B-1]: its candidate selector's path (the reference's
    `CandidateSelector.select` at temperature 0). Each row keeps its top-k logits as
    candidates; row i picks the candidate c maximising logit(c) + <pred[previous] * W h_i,
    succ[c]>, the previous token being the anchor, then each pick in turn.

    normed: the block rows 1.. after the final norm [b, B-1, H]; logits: `head_logits` of them;
    anchor: the block's first token [b]."""
    block = _block_config(draft)
    if block.family != "dflash2":
        raise ValueError(f"{draft.name}: only a DFlash2 draft has a candidate selector")
    assert block.selector_top_k is not None
    w = draft.weights
    unary, candidates = torch.topk(logits, block.selector_top_k, dim=-1)
    hidden = linear(normed, w["candidate_selector.hidden_projection.weight"]).float()
    pred_book = w["candidate_selector.predecessor_codebook.weight"].float()
    succ_book = w["candidate_selector.successor_codebook.weight"].float()
    previous = anchor
    path = []
    for i in range(hidden.shape[1]):
        pair = F.embedding(previous, pred_book) * hidden[:, i]  # [b, r]
        scores = unary[:, i] + torch.einsum(
            "br,bkr->bk", pair, F.embedding(candidates[:, i], succ_book)
        )
        previous = candidates[:, i].gather(-1, scores.argmax(-1, keepdim=True))[:, 0]
        path.append(previous)
    return torch.stack(path, dim=1)


def draft_rows(draft: Draft, normed: torch.Tensor) -> torch.Tensor:
    """The rows of a block that draft [.., drafts_per_block, H]: rows 1.., or every row where
    the anchor's row drafts too (DSpark's `anchor_drafts`); draft j follows x_{n+j}."""
    block = _block_config(draft)
    return normed if block.anchor_drafts else normed[..., 1:, :]


def markov_bias(draft: Draft, prev_ids: torch.Tensor, normed: torch.Tensor) -> torch.Tensor:
    """DSpark's Markov bias [.., n, V] (float32) on n drafts that follow the tokens `prev_ids`
    [.., n], their final-normed rows `normed` [.., n, H]: W2(W1[prev]) ("vanilla"), or
    W2(sigmoid(gate([h, W1[prev]])) * W1[prev]) ("gated"); zeros without a Markov head."""
    block = _block_config(draft)
    w = draft.weights
    if not block.markov_rank:
        return torch.zeros(*prev_ids.shape, draft.config.vocab_size, device=normed.device)
    emb = F.embedding(prev_ids, w["markov_head.markov_w1.weight"])
    if block.markov_head_type == "gated":
        both = torch.cat([normed.to(emb.dtype), emb], dim=-1)
        gate = linear(both, w["markov_head.gate_proj.weight"]) + w["markov_head.gate_proj.bias"]
        emb = torch.sigmoid(gate) * emb
    return linear(emb, w["markov_head.markov_w2.weight"]).float()


def markov_path(
    draft: Draft, normed: torch.Tensor, logits: torch.Tensor, anchor: torch.Tensor
) -> torch.Tensor:
    """DSpark's greedy proposal [b, n]: each draft the argmax of its logits plus the Markov bias
    of the token before it (the anchor, then each pick in turn), as the engines sample it at
    temperature 0. normed: the drafting rows [b, n, H] (`draft_rows`); logits: `head_logits` of
    them; anchor: the block's first token [b]. Where every earlier draft matched, draft j's
    pick is the teacher-forced one (`markov_bias` over the true tokens)."""
    previous = anchor
    path = []
    for j in range(logits.shape[1]):
        step = logits[:, j] + markov_bias(draft, previous[:, None], normed[:, j : j + 1])[:, 0]
        previous = step.argmax(-1)
        path.append(previous)
    return torch.stack(path, dim=1)
