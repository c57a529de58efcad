"""`step0_logits_at_rows` (the doctor's scorer forward) equals `forward_steps` at the same rows."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from inspector.draft import RopeConfig
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft
from inspector.model import Step0Shared, forward_steps, step0_logits_at_rows
from inspector.synthetic import SyntheticSpec, write_synthetic
from inspector.wiring import Wiring


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    return write_synthetic(
        tmp_path_factory.mktemp("syn"), SyntheticSpec(size="tiny", n_samples=1, seq_len=48)
    )


def _bias_draft(draft):
    w = dict(draft.weights)
    g = torch.Generator().manual_seed(3)
    for n in ("q", "k", "v", "o"):
        rows = w[f"layers.0.self_attn.{n}_proj.weight"].shape[0]
        w[f"layers.0.self_attn.{n}_proj.bias"] = torch.randn(rows, generator=g) * 0.1
    return replace(draft, weights=w)


def _qk_norm_draft(draft):
    w = dict(draft.weights)
    g = torch.Generator().manual_seed(4)
    hd = draft.config.head_dim
    for n in ("q", "k"):
        w[f"layers.0.self_attn.{n}_norm.weight"] = 0.5 + torch.rand(hd, generator=g)
    return replace(draft, weights=w)


def _variant(draft, variant: str):
    cfg = draft.config
    if variant == "nbr":
        return replace(draft, config=replace(cfg, norm_before_residual=True))
    if variant == "rope_dim":
        return replace(draft, config=replace(cfg, rope=replace(cfg.rope, dim=2 * cfg.head_dim)))
    if variant == "bias":
        return _bias_draft(draft)
    if variant == "qk_norm":
        return _qk_norm_draft(draft)
    if variant == "yarn":
        rope = RopeConfig(
            theta=50000.0,
            rope_type="yarn",
            scaling={"factor": 4.0, "original_max_position_embeddings": 32},
        )
        return replace(draft, config=replace(cfg, rope=rope))
    return draft


@pytest.mark.parametrize("variant", ["plain", "nbr", "rope_dim", "bias", "qk_norm", "yarn"])
def test_step0_logits_at_rows_equal_forward(syn, variant):
    draft = _variant(load_draft(syn[0]), variant)
    ev = Evaluator(draft, SampleSet(syn[1]))
    h = torch.stack([ev.fc_output(0, Wiring(w)) for w in ((0, 1, 2), (3, 1, 0))])[:, :-1]
    ids = ev.samples[0].input_ids
    ref = forward_steps(draft, h, ids[1:].expand(2, -1), steps=1, position_offset=5)[0]
    rows = torch.tensor([0, 3, 4, 10, 20, 46])
    got = step0_logits_at_rows(draft, Step0Shared(draft, ids[1:], 5), h, rows)
    assert got.shape == (2, rows.numel(), draft.config.draft_vocab_size)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, ref[:, rows], rtol=1e-4, atol=1e-4)


def test_step0_shared_needs_one_layer(syn):
    draft = load_draft(syn[0])
    two = replace(draft, config=replace(draft.config, num_layers=2))
    with pytest.raises(ValueError, match="single-layer"):
        Step0Shared(two, torch.tensor([1, 2, 3]), 0)


@pytest.mark.parametrize("variant", ["plain", "nbr", "qk_norm"])
def test_step0_at_rows_in_blocks_and_chunks(syn, variant):
    # The serving replay's bounds: attention scores in blocks of query rows, the MLP in row
    # chunks. Per row the same computation, so the same values as one block up to rounding.
    from inspector.model import Chunking, step0_at_rows

    draft = _variant(load_draft(syn[0]), variant)
    ev = Evaluator(draft, SampleSet(syn[1]))
    h = ev.fc_output(0, Wiring((0, 1, 2)))[None, :-1]
    ids = ev.samples[0].input_ids
    shared = Step0Shared(draft, ids[1:], 1)
    rows = torch.tensor([0, 3, 4, 10, 20, 30, 46])
    z, k, v = step0_at_rows(draft, shared, h, rows)
    heads, r = draft.config.num_heads, h.shape[1]
    one_row = 8 * heads * r  # bytes of one query row's scores
    small = Chunking(mlp_rows=3, attn_block_bytes=2 * one_row)
    zb, kb, vb = step0_at_rows(draft, shared, h, rows, small)
    # BLAS blocks a matmul by its row count: a few float32 roundings at the values' scale.
    tol = 16 * torch.finfo(torch.float32).eps * float(z.abs().max())
    torch.testing.assert_close(zb, z, rtol=0, atol=tol)
    assert kb.equal(k) and vb.equal(v)
    assert z.shape == (1, rows.numel(), draft.config.hidden_size)
    assert k.shape == (1, draft.config.num_kv_heads, r, draft.config.head_dim)
    # The layer output at the rows is the full forward's (pre-norm) output there.
    from inspector.model import iter_steps

    _, full = next(iter_steps(draft, h, ids[1:][None], steps=1, position_offset=1))
    torch.testing.assert_close(z, full[:, rows], rtol=1e-4, atol=1e-4)
