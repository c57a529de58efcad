"""inspector/model/forward.py paths a mutation sample found unchecked: forward_steps' hidden
states, the row-chunked MLP, batched TTT steps, fc's bias (one projection for the forward and
the evaluator)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import inspector.model.forward as forward
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


def test_forward_steps_returns_each_steps_prenorm_hidden(tiny):
    draft, samples = tiny
    h, tokens = _inputs(draft, samples[0])
    logits, hidden = forward_steps(draft, h, tokens, steps=3, return_hidden=True)
    plain = forward_steps(draft, h, tokens, steps=3)
    zs = [z for _, z in iter_steps(draft, h, tokens, steps=3)]
    assert len(hidden) == len(logits) == 3
    r = h.shape[0]
    for k in range(3):
        assert hidden[k].shape == (r - k, draft.config.hidden_size)
        assert torch.equal(hidden[k], zs[k])  # pre-norm z, not its norm
        assert torch.equal(logits[k], plain[k])
        assert torch.equal(draft_logits(draft, hidden[k]), logits[k])


def test_mlp_rows_chunks_the_mlp_and_changes_no_value(tiny, monkeypatch):
    draft, samples = tiny
    h, tokens = _inputs(draft, samples[0])
    r = h.shape[0]  # 39 rows
    whole = [z for _, z in iter_steps(draft, h, tokens, steps=2)]
    calls: list[int] = []
    real = forward.mlp

    def counting(x, w, p):
        calls.append(x.shape[-2])
        return real(x, w, p)

    monkeypatch.setattr(forward, "mlp", counting)
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
    with pytest.raises(ValueError, match="norm_before_fc"):
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
