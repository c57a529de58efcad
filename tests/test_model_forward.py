"""inspector/model paths a mutation sample found unchecked: forward_steps against the head over
each step, the row-chunked MLP, batched TTT steps, fc's bias (one projection for the forward and
the evaluator), the one layer under each attention spec."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from support import accumulation_tolerance

import inspector.model.decoder as layer_mod
import inspector.model.fc as fc
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft
from inspector.model import (
    Chunking,
    draft_logits,
    fc_block_project,
    fc_combine,
    fc_input,
    fc_project,
    forward_steps,
    iter_steps,
)


@pytest.fixture
def tiny(tiny_synthetic):
    draft = load_draft(tiny_synthetic[0])
    samples = SampleSet(tiny_synthetic[1])
    return draft, samples


def _inputs(draft, sample):
    h = fc_project(draft, fc_input(draft, [sample.slots[i] for i in range(3)]))[:-1]
    return h, sample.input_ids[1:]


def test_forward_steps_is_the_head_over_each_steps_prenorm_output(tiny):
    draft, samples = tiny
    h, tokens = _inputs(draft, samples[0])
    logits = forward_steps(draft, h, tokens, steps=3)
    zs = [z for _, z in iter_steps(draft, h, tokens, steps=3)]
    assert len(zs) == len(logits) == 3
    r = h.shape[0]
    for k in range(3):
        assert zs[k].shape == (r - k, draft.config.hidden_size)
        assert logits[k].shape == (r - k, draft.config.draft_vocab_size)
        assert torch.equal(draft_logits(draft, zs[k]), logits[k])  # the head reads pre-norm z


def test_mlp_rows_chunks_the_mlp_and_changes_no_value(tiny, monkeypatch):
    draft, samples = tiny
    h, tokens = _inputs(draft, samples[0])
    r = h.shape[0]  # 39 rows
    whole = [z for _, z in iter_steps(draft, h, tokens, steps=2)]
    calls: list[int] = []
    real = layer_mod.mlp

    def counting(x, lw):
        calls.append(x.shape[-2])
        return real(x, lw)

    monkeypatch.setattr(layer_mod, "mlp", counting)
    chunked = [z for _, z in iter_steps(draft, h, tokens, steps=2, chunking=Chunking(mlp_rows=16))]
    # every step's MLP ran on row chunks of at most 16: 16 + 16 + 7 rows per step
    assert calls == [16, 16, r - 32] * 2
    for a, b in zip(whole, chunked, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_smaller_chunking_keeps_its_floors():
    c = Chunking(mlp_rows=64, attn_block_bytes=2**22, logits_bytes=2**22).smaller(8)
    assert c == Chunking(16, 2**20, 2**20)
    assert Chunking().smaller(2).mlp_rows == Chunking().mlp_rows // 2


def test_batched_steps_equal_one_sample_at_a_time(tiny):
    """[B, R, H] with several TTT steps: each batch row as if it ran alone."""
    draft, samples = tiny
    pairs = [_inputs(draft, samples[i]) for i in range(3)]
    r = min(h.shape[0] for h, _ in pairs)
    h = torch.stack([p[0][:r] for p in pairs])
    tokens = torch.stack([p[1][:r] for p in pairs])
    batched = [z for _, z in iter_steps(draft, h, tokens, steps=3)]
    assert [z.shape for z in batched] == [(3, r - k, draft.config.hidden_size) for k in range(3)]
    for b in range(3):
        alone = [z for _, z in iter_steps(draft, h[b], tokens[b], steps=3)]
        for k in range(3):
            assert torch.allclose(batched[k][b], alone[k], atol=1e-5), (b, k)
    logits = forward_steps(draft, h, tokens, steps=3)
    assert logits[2].shape == (3, r - 2, draft.config.draft_vocab_size)


def test_fc_bias_is_added_once_by_the_forward_and_the_evaluator(tiny, tiny_synthetic):
    draft, samples = tiny
    g = torch.Generator().manual_seed(4)
    bias = torch.randn(draft.config.hidden_size, generator=g)
    biased = replace(draft, weights={**draft.weights, "fc.bias": bias})
    s = samples[0]
    g_in = fc_input(biased, [s.slots[i] for i in range(3)])
    assert torch.allclose(fc_project(biased, g_in), fc_project(draft, g_in) + bias, atol=1e-6)
    parts = [fc_block_project(biased, s.slots[i], i) for i in range(3)]
    assert torch.allclose(fc_combine(biased, parts), fc_project(biased, g_in), atol=1e-4)
    ev = Evaluator(biased, SampleSet(tiny_synthetic[1]))
    h = ev.fc_output(0, ev.wiring("0,1,2"))
    assert torch.allclose(h, fc_project(biased, g_in), atol=1e-4)
    assert (h - fc_project(draft, g_in)).abs().max() > 0.1  # the bias is there, once
    assert torch.allclose(h - bias, fc_project(draft, g_in), atol=1e-4)


def test_fc_block_projection_applies_the_blocks_norm(tiny):
    draft, samples = tiny
    g = torch.Generator().manual_seed(6)
    norms = {f"fc_norm.{i}.weight": 0.5 + torch.rand(64, generator=g) for i in range(3)}
    normed = replace(draft, config=replace(draft.config, fc_norm=True))
    normed = replace(normed, weights={**draft.weights, **norms})
    s = samples[0]
    whole = fc_project(normed, fc_input(normed, [s.slots[i] for i in range(3)]))
    parts = fc_combine(normed, [fc_block_project(normed, s.slots[i], i) for i in range(3)])
    assert torch.allclose(whole, parts, atol=1e-4)
    plain = fc_combine(draft, [fc_block_project(draft, s.slots[i], i) for i in range(3)])
    assert (parts - plain).abs().max() > 1e-2
    with pytest.raises(ValueError, match="^norm_before_fc normalises the whole fc input"):
        fc_block_project(
            replace(draft, config=replace(draft.config, norm_before_fc=True)), s.slots[0], 0
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_linear_is_x_times_w_transposed_in_every_dtype(dtype, monkeypatch):
    import inspector.model.linear as lin

    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 24, generator=g).to(dtype)
    w = torch.randn(40, 24, generator=g).to(dtype)
    exact = (x.double() @ w.double().T).to(dtype)
    got = lin.linear(x, w)
    assert got.dtype == dtype and got.shape == (5, 40)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(got.double(), exact.double(), atol=tol, rtol=tol)
    # float16 on CPU runs in float32 over bounded slices of the weight: the slices tile it
    monkeypatch.setattr(lin, "UPCAST_BYTES", 4 * 24 * 7)  # 7 weight rows per slice
    sliced = lin.linear(x, w)
    assert sliced.shape == (5, 40)
    # the same values up to float16's last bit (BLAS may sum a slice in another order)
    assert torch.allclose(sliced.double(), got.double(), atol=1e-2, rtol=1e-3)
    assert torch.allclose(sliced.double(), exact.double(), atol=tol, rtol=tol)


def test_fc_wired_is_fc_of_the_wired_slots_for_every_fc_variant(tiny):
    """The live loop's fc (model.fc_wired): per-block sums when fc is linear in each slot, the
    whole normed input under norm_before_fc; either way fc_project(fc_input(..)) to rounding."""
    from inspector.model import fc_wired

    draft, samples = tiny
    s = samples[0]
    g = torch.Generator().manual_seed(8)
    width = draft.config.num_fc_blocks * draft.config.target_hidden_size
    variants = {
        "plain": draft,
        "fc_norm": replace(
            draft,
            config=replace(draft.config, fc_norm=True),
            weights={
                **draft.weights,
                **{f"fc_norm.{i}.weight": 0.5 + torch.rand(64, generator=g) for i in range(3)},
            },
        ),
        "norm_before_fc": replace(
            draft,
            config=replace(draft.config, norm_before_fc=True),
            weights={**draft.weights, "input_norm.weight": 0.5 + torch.rand(width, generator=g)},
        ),
    }
    slots = [s.slots[i] for i in (2, 0, 1)]
    outs = {}
    for name, d in variants.items():
        ref = fc_project(d, fc_input(d, slots))
        outs[name] = fc_wired(d, slots)
        assert outs[name].shape == ref.shape
        tol = accumulation_tolerance(ref, width)
        assert (outs[name] - ref).abs().max() <= tol, name
    # the variants' norms are honoured: each output differs from the plain one
    for name in ("fc_norm", "norm_before_fc"):
        assert (outs[name] - outs["plain"]).abs().max() > 1e-2, name


def test_the_layer_is_the_step0_layer_with_or_without_an_explicit_mask(tiny):
    """layer() (the serving replay's and live loop's layer too) on step 0 rows: the first step
    of iter_steps; an explicit causal mask gives the same rows, chosen rows those rows."""
    from inspector.model import AttendSpec, LayerCache, layer, resolve_layers, rope_cos_sin

    draft, samples = tiny
    h, tokens = _inputs(draft, samples[0])
    r = h.shape[0]
    cfg = draft.config
    ref = next(iter(iter_steps(draft, h, tokens, steps=1, position_offset=5)))[1]
    embeds = torch.nn.functional.embedding(tokens, draft.weights["embed_tokens.weight"])[None]
    cos, sin = rope_cos_sin(cfg, torch.arange(r) + 5, h.device)  # row 0 at 5
    (lw,) = resolve_layers(draft)
    cache = LayerCache()
    z = layer(cfg, lw, h[None], embeds, cos, sin, cache)
    assert z.shape == (1, r, cfg.hidden_size)
    assert torch.equal(z[0], ref)
    assert len(cache.keys) == len(cache.values) == 1
    assert cache.keys[0].shape == (1, cfg.num_kv_heads, r, cfg.head_dim)
    causal = torch.ones(r, r, dtype=torch.bool).tril()
    masked = layer(cfg, lw, h[None], embeds, cos, sin, LayerCache(), AttendSpec(mask=causal))
    tol = accumulation_tolerance(ref, cfg.intermediate_size)
    assert (masked[0] - ref).abs().max() <= tol
    # a mask that hides everything but each row itself is another attention: other values
    own = torch.eye(r, dtype=torch.bool)
    alone = layer(cfg, lw, h[None], embeds, cos, sin, LayerCache(), AttendSpec(mask=own))
    assert (alone[0] - ref).abs().max() > 100 * tol
    # queries at chosen rows (every row's keys still written): those rows of the full step
    rows = torch.tensor([0, 4, 5, r - 1])
    chosen = LayerCache()
    chosen.append(*cache.last)
    lw_q = layer_mod.attention_input(cfg, lw, h[None], embeds)[0][:, rows]
    q, _, _ = layer_mod.project_llama(cfg, lw.attn, lw_q, cos[rows], sin[rows])
    o = layer_mod.attend(cfg, q, chosen, AttendSpec(rows=rows))
    residual = h[None][:, rows]
    picked = layer_mod.layer_output(cfg, lw, residual, o, 4096)
    assert (picked[0] - ref[rows]).abs().max() <= tol
    with pytest.raises(ValueError, match="not both"):
        AttendSpec(rows=rows, mask=causal)


def test_fc_block_project_multiplies_by_the_weight_it_is_given(tiny):
    """The evaluator passes its cached contiguous copy of a block: that copy is what multiplies
    (a stale or wrong cache would show), and without one the block is sliced from fc."""
    draft, samples = tiny
    slot = samples[0].slots[1]
    own = fc_block_project(draft, slot, 1)
    assert torch.equal(own, slot @ draft.weights["fc.weight"][:, 64:128].T)
    given = 2 * draft.fc_block(1).contiguous()
    assert torch.allclose(fc_block_project(draft, slot, 1, given), 2 * own, rtol=1e-6, atol=0)


def test_step_defaults_are_one_step_at_position_one(tiny):
    """iter_steps and forward_steps default to one TTT step, row 0 at RoPE position 1
    (speculators' position_ids[1:])."""
    draft, samples = tiny
    h, tokens = _inputs(draft, samples[0])
    by_default = list(iter_steps(draft, h, tokens))
    assert [k for k, _ in by_default] == [0]
    explicit = next(iter(iter_steps(draft, h, tokens, steps=1, position_offset=1)))[1]
    assert torch.equal(by_default[0][1], explicit)
    logits = forward_steps(draft, h, tokens)
    assert len(logits) == 1
    assert torch.equal(logits[0], forward_steps(draft, h, tokens, steps=1, position_offset=1)[0])
    # the offset moves the logits by float rounding only, but it does move them
    shifted = forward_steps(draft, h, tokens, position_offset=0)[0]
    assert not torch.equal(shifted, logits[0])
    n = draft.config.intermediate_size  # the longest reduction of the forward
    assert (shifted - logits[0]).abs().max() <= accumulation_tolerance(logits[0], n)


def test_mla_without_q_lora_projects_q_straight(golden):
    """An MLA draft with q_lora_rank None (q_proj instead of q_a -> norm -> q_b): q is q_proj's
    output split per head, its rope dims rotated; keys and values do not involve q at all."""
    from inspector.model import rope_cos_sin
    from inspector.model.rope import apply_rope, deinterleave

    lora = load_draft(golden / "specforge-mla" / "checkpoint")
    cfg = lora.config
    m = cfg.mla
    assert m is not None and m.q_lora_rank is not None and m.rope_interleave
    g = torch.Generator().manual_seed(9)
    w_q = torch.randn(cfg.num_heads * m.qk_head_dim, 2 * cfg.hidden_size, generator=g) / 8
    weights = {k: v for k, v in lora.weights.items() if not k.startswith("layers.0.self_attn.q_")}
    weights["layers.0.self_attn.q_proj.weight"] = w_q
    plain = replace(lora, config=replace(cfg, mla=replace(m, q_lora_rank=None)), weights=weights)
    b, t = 2, 7
    a = torch.randn(b, t, 2 * cfg.hidden_size, generator=g)
    cos, sin = rope_cos_sin(cfg, torch.arange(t), a.device)
    from inspector.model.weights import resolve_layer

    plain_attn, lora_attn = resolve_layer(plain, 0).attn, resolve_layer(lora, 0).attn
    q, k, v = layer_mod.project_mla(plain.config, plain_attn, a, cos, sin)
    _, k_lora, v_lora = layer_mod.project_mla(cfg, lora_attn, a, cos, sin)
    assert torch.equal(k, k_lora) and torch.equal(v, v_lora)
    raw = (a @ w_q.T).view(b, t, cfg.num_heads, m.qk_head_dim).transpose(1, 2)
    nope, rope = raw.split([m.qk_nope_head_dim, m.qk_rope_head_dim], dim=-1)
    assert q.shape == (b, cfg.num_heads, t, m.qk_head_dim)
    assert torch.equal(q[..., : m.qk_nope_head_dim], nope)  # the same x @ W.T
    rotated = apply_rope(deinterleave(rope), cos, sin)
    assert torch.equal(q[..., m.qk_nope_head_dim :], rotated)


def test_fc_input_concatenates_the_slots_of_batched_samples(tiny):
    """[B, T, Ht] slots (the model is batch-agnostic): the slots join along the features."""
    draft, samples = tiny
    t = min(samples[i].slots[0].shape[0] for i in range(2))
    slots = [torch.stack([samples[b].slots[i][:t] for b in range(2)]) for i in range(3)]
    g = fc_input(draft, slots)
    assert g.shape == (2, t, 3 * draft.config.target_hidden_size)
    for b in range(2):
        assert torch.equal(g[b], fc_input(draft, [s[b] for s in slots]))


def test_mlp_runs_whole_under_autograd(tiny, monkeypatch):
    """Training (the demo builder) runs the MLP on all rows at once whatever mlp_rows says:
    chunks would sum the weights' gradients in another order (other float bits)."""
    draft, samples = tiny
    h, tokens = _inputs(draft, samples[0])
    r = h.shape[0]
    calls: list[int] = []
    real = layer_mod.mlp

    def counting(x, lw):
        calls.append(x.shape[-2])
        return real(x, lw)

    monkeypatch.setattr(layer_mod, "mlp", counting)
    small = Chunking(mlp_rows=16)
    trained = h.clone().requires_grad_(True)
    list(iter_steps(draft, trained, tokens, steps=2, chunking=small))
    assert calls == [r, r]
    calls.clear()
    with torch.no_grad():
        list(iter_steps(draft, trained, tokens, steps=2, chunking=small))
    assert calls == [16, 16, r - 32] * 2
    calls.clear()
    list(iter_steps(draft, h[:16], tokens[:16], steps=1, chunking=small))  # rows == mlp_rows
    assert calls == [16]


def test_windowed_steps_attend_in_the_callers_blocks(tiny, monkeypatch):
    """A sliding-window layer's later TTT steps run the blocked attention: with the chunking
    the caller passes (the evaluator's out-of-memory retry shrinks it), same values."""
    import inspector.model.attention as attention

    draft, samples = tiny
    windowed = replace(draft, config=replace(draft.config, sliding_windows=(8,)))
    h, tokens = _inputs(draft, samples[0])
    whole = [z for _, z in iter_steps(windowed, h, tokens, steps=2)]
    seen: list[int] = []
    real = attention.attention_blocked

    def spy(q, k0, v0, diag_k, diag_v, scale, block_bytes, window=None, query_rows=None):
        assert query_rows is None  # every row queries in the TTT steps
        seen.append(block_bytes)
        return real(q, k0, v0, diag_k, diag_v, scale, block_bytes, window, query_rows)

    monkeypatch.setattr(attention, "attention_blocked", spy)
    small = Chunking(attn_block_bytes=12 * 4 * 39 * 5)  # 5 query rows per block
    blocked = [z for _, z in iter_steps(windowed, h, tokens, steps=2, chunking=small)]
    assert seen == [small.attn_block_bytes] * 2  # steps 0 and 1 (the window is below 39 rows)
    for a, b in zip(whole, blocked, strict=True):
        assert (a - b).abs().max() <= accumulation_tolerance(a, draft.config.intermediate_size)


def test_fc_wired_hands_each_block_over_contiguous(tiny, monkeypatch):
    """fc_wired multiplies by contiguous copies of fc's column blocks, as the evaluator caches
    them: a column slice of fc is strided, the layout whose bfloat16/float16 CPU kernels run
    30-80x slower (same values on this CPU, so only the layout shows it)."""
    from inspector.model import fc_wired

    draft, samples = tiny
    seen: list[bool] = []
    real = fc.fc_block_project

    def spy(d, slot, block, weight=None):
        seen.append(weight is not None and weight.is_contiguous())
        return real(d, slot, block, weight)

    monkeypatch.setattr(fc, "fc_block_project", spy)
    assert not draft.fc_block(1).is_contiguous()
    fc_wired(draft, [samples[0].slots[i] for i in range(3)])
    assert seen == [True, True, True]


def test_every_optional_layer_tensor_reaches_the_layer(tiny):
    """Qwen2's q/k/v and o_proj biases and Qwen3's per-head q/k norms, resolved by name once
    (model/weights.py): each one present changes the output; a v bias c is exactly an o_proj
    bias W_o c (attention weights sum to one), so the two are added where they belong."""
    draft, samples = tiny
    cfg = draft.config
    h, tokens = _inputs(draft, samples[0])
    base = forward_steps(draft, h, tokens, steps=2)
    g = torch.Generator().manual_seed(4)
    a = "layers.0.self_attn."
    nq, nkv, hd = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim, cfg.head_dim
    extra = {
        "q_proj.bias": torch.randn(nq, generator=g),
        "k_proj.bias": torch.randn(nkv, generator=g),
        "v_proj.bias": torch.randn(nkv, generator=g),
        "o_proj.bias": torch.randn(cfg.hidden_size, generator=g),
        "q_norm.weight": 0.5 + torch.rand(hd, generator=g),
        "k_norm.weight": 0.5 + torch.rand(hd, generator=g),
    }
    tol = accumulation_tolerance(base[0], cfg.intermediate_size)
    for name, t in extra.items():
        d = replace(draft, weights={**draft.weights, a + name: t})
        out = forward_steps(d, h, tokens, steps=2)
        assert (out[0] - base[0]).abs().max() > 100 * tol, name
        assert (out[1] - base[1]).abs().max() > 100 * tol, name
    c = extra["v_proj.bias"]
    with_v = replace(draft, weights={**draft.weights, a + "v_proj.bias": c})
    rep = cfg.num_heads // cfg.num_kv_heads
    c_heads = c.view(cfg.num_kv_heads, hd).repeat_interleave(rep, 0).reshape(-1)
    o_bias = draft.weights[a + "o_proj.weight"] @ c_heads
    with_o = replace(draft, weights={**draft.weights, a + "o_proj.bias": o_bias})
    for x, y in zip(
        forward_steps(with_v, h, tokens, steps=2),
        forward_steps(with_o, h, tokens, steps=2),
        strict=True,
    ):
        assert (x - y).abs().max() <= 10 * tol
