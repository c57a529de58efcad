"""The TTT attention in linear memory equals the dense [T, T] computation, on every path."""

from __future__ import annotations

import math

import pytest
import torch

from inspector import model
from inspector.draft import DraftConfig, RopeConfig
from inspector.model import Chunking
from inspector.model import attention as M


def _cfg(heads: int, kv_heads: int, head_dim: int) -> DraftConfig:
    return DraftConfig(
        hidden_size=64,
        target_hidden_size=64,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=16,
        rms_norm_eps=1e-5,
        rope=RopeConfig(),
        vocab_size=8,
        draft_vocab_size=8,
    )


def _cache(steps: int, kv_heads: int, t: int, hd: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    cache = M.LayerCache()
    cache.keys = [torch.randn(2, kv_heads, t, hd, generator=g) for _ in range(steps)]
    cache.values = [torch.randn(2, kv_heads, t, hd, generator=g) for _ in range(steps)]
    return cache


def _dense(cfg: DraftConfig, q: torch.Tensor, cache) -> torch.Tensor:
    rep = cfg.num_heads // cfg.num_kv_heads
    k0 = cache.keys[0].repeat_interleave(rep, 1)
    v0 = cache.values[0].repeat_interleave(rep, 1)
    dk = [k.repeat_interleave(rep, 1) for k in cache.keys[1:]]
    dv = [v.repeat_interleave(rep, 1) for v in cache.values[1:]]
    return M.attention_dense(q, k0, v0, dk, dv, 1 / math.sqrt(cfg.head_dim))


@pytest.mark.parametrize("steps", [2, 3, 4])
@pytest.mark.parametrize("heads,kv_heads,hd", [(4, 4, 16), (8, 2, 24)])
def test_fused_merge_equals_dense(steps, heads, kv_heads, hd):
    cfg = _cfg(heads, kv_heads, hd)
    t = 53
    q = torch.randn(2, heads, t, hd, generator=torch.Generator().manual_seed(9))
    cache = _cache(steps, kv_heads, t, hd)
    ref = _dense(cfg, q, cache)
    with torch.inference_mode():
        out = M.attend(cfg, q, cache)
    assert M.FUSED_OK.get(("cpu", torch.float32)) is True  # the CPU kernel passed its check
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("block_bytes", [1, 12 * 2 * 8 * 61 * 7, 2**30])
def test_blocked_equals_dense_for_any_block(monkeypatch, block_bytes):
    """Query blocks of 1 row, 7 rows and all rows give the dense result."""
    cfg = _cfg(8, 2, 16)
    t = 61
    q = torch.randn(2, 8, t, 16, generator=torch.Generator().manual_seed(3))
    cache = _cache(3, 2, t, 16)
    ref = _dense(cfg, q, cache)
    monkeypatch.setitem(M.FUSED_OK, ("cpu", torch.float32), False)  # no fused kernel here
    with torch.inference_mode():
        out = M.attend(cfg, q, cache, chunking=Chunking(attn_block_bytes=block_bytes))
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)


def test_inference_never_builds_the_dense_scores(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("the [T, T] path ran outside training")

    monkeypatch.setattr(M, "attention_dense", forbidden)
    cfg = _cfg(4, 2, 16)
    q = torch.randn(2, 4, 40, 16)
    with torch.inference_mode():
        M.attend(cfg, q, _cache(3, 2, 40, 16))


def test_training_keeps_the_dense_path(monkeypatch):
    """With autograd the peers' float32 [T, T] computation runs (the demo build reproduces it)."""
    calls = []
    real = M.attention_dense
    monkeypatch.setattr(M, "attention_dense", lambda *a: calls.append(1) or real(*a))
    cfg = _cfg(4, 2, 16)
    q = torch.randn(2, 4, 20, 16, requires_grad=True)
    out = M.attend(cfg, q, _cache(2, 2, 20, 16))
    out.sum().backward()
    assert calls == [1] and q.grad is not None


def test_a_failing_fused_kernel_falls_back(monkeypatch):
    """A kernel that is missing or wrong on a device is detected once and the explicit path runs."""
    monkeypatch.setattr(M, "FUSED_OK", {})

    def wrong(q, k, v, scale):
        out = torch.zeros_like(q)
        return out, torch.zeros(q.shape[:-1])

    monkeypatch.setattr(M, "fused_causal_lse", wrong)
    cfg = _cfg(4, 2, 16)
    q = torch.randn(2, 4, 30, 16)
    cache = _cache(2, 2, 30, 16)
    ref = _dense(cfg, q, cache)
    with torch.inference_mode():
        out = M.attend(cfg, q, cache)
    assert M.FUSED_OK[("cpu", torch.float32)] is False
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)


def test_iter_steps_matches_forward_steps(tiny_synthetic):
    """The streaming steps + chunked MLP give the logits forward_steps gives."""
    from inspector.formats import load_draft

    draft = load_draft(tiny_synthetic[0])
    g = torch.Generator().manual_seed(1)
    h = torch.randn(70, draft.config.hidden_size, generator=g)
    tok = torch.randint(0, draft.config.vocab_size, (70,), generator=g)
    ref = model.forward_steps(draft, h, tok, steps=3)
    with torch.inference_mode():
        got = [
            model.draft_logits(draft, z)
            for _, z in model.iter_steps(draft, h, tok, steps=3, chunking=Chunking(mlp_rows=16))
        ]
    assert [x.shape for x in got] == [x.shape for x in ref] == [(70 - k, 96) for k in range(3)]
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_merge_returns_the_query_dtype(dtype):
    """The merge of the fused causal part and the diagonal keys runs in float32 and hands back
    the query's dtype (the next matmul, o_proj, takes weights of that dtype)."""
    cfg = _cfg(4, 2, 16)
    t = 29
    q = torch.randn(2, 4, t, 16, generator=torch.Generator().manual_seed(3))
    cache = _cache(2, 2, t, 16)
    ref = _dense(cfg, q, cache)
    low = M.LayerCache()
    low.keys = [k.to(dtype) for k in cache.keys]
    low.values = [v.to(dtype) for v in cache.values]
    with torch.inference_mode():
        out = M.attend(cfg, q.to(dtype), low)
    assert out.dtype == dtype and out.shape == ref.shape
    # inputs and output rounded to the dtype's 8 or 11 significant bits: a few ulps of values ~1
    eps = torch.finfo(dtype).eps
    assert (out.float() - ref).abs().max() <= 8 * eps * ref.abs().max()


def test_a_window_shorter_than_the_sample_but_wider_than_a_head_applies():
    """Whether the window cuts anything is a matter of rows (T), not of head_dim: a window of 20
    rows on 40 rows with head_dim 16 hides keys from the later rows."""
    cfg = _cfg(4, 2, 16)
    t, window = 40, 20
    q = torch.randn(2, 4, t, 16, generator=torch.Generator().manual_seed(5))
    cache = _cache(2, 2, t, 16)
    rep = 2
    k0, v0 = (c[0].repeat_interleave(rep, 1) for c in (cache.keys, cache.values))
    dk, dv = [cache.keys[1].repeat_interleave(rep, 1)], [cache.values[1].repeat_interleave(rep, 1)]
    scale = 1 / math.sqrt(16)
    ref = M.attention_dense(q, k0, v0, dk, dv, scale, window)
    full = M.attention_dense(q, k0, v0, dk, dv, scale)
    windowed = M.LayerCache(window)
    windowed.keys, windowed.values = cache.keys, cache.values
    with torch.inference_mode():
        out = M.attend(cfg, q, windowed)
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)
    assert (out - full).abs().max() > 1e-3


def test_explicit_masks_refuse_a_windowed_layer():
    """The live loop's masked attention cannot model a sliding window: one line says so."""
    from inspector.errors import InputError

    cfg = _cfg(4, 2, 16)
    cache = _cache(1, 2, 5, 16)
    cache.window = 3
    q = torch.randn(2, 4, 5, 16)
    with pytest.raises(InputError) as e:
        M.attend(cfg, q, cache, M.AttendSpec(mask=torch.ones(5, 5, dtype=torch.bool).tril()))
    assert str(e.value) == (
        "sliding_window: a draft layer with a sliding window: explicit masks do not model it"
    )


def test_logit_rows_bounds_the_float32_logits_of_a_chunk():
    """[rows, vocab] float32 logits plus ~3 buffers of their size fit logits_bytes; 16 at least."""
    c = Chunking(logits_bytes=16 * 1000 * 50)
    assert c.logit_rows(1000) == 50
    assert c.logit_rows(10**6) == 16
    assert c.logit_rows(0) == 16 * 1000 * 50 // 16
