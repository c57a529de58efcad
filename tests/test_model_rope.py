"""rope_inv_freq against the published definitions (mutants of the llama3 smoothing, of the
dynamic type and of YaRN's defaults survived the golden fixtures, which hold YaRN only)."""

from __future__ import annotations

import math

import torch

from inspector.draft import RopeConfig
from inspector.model import rope_inv_freq


def _llama3_reference(theta, head_dim, factor, low, high, old_ctx):
    """Meta's llama3 `apply_scaling`, frequency by frequency, in float64."""
    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / theta ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            out.append(freq)
        elif wavelen > old_ctx / low:
            out.append(freq / factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append((1 - smooth) * freq / factor + smooth * freq)
    return torch.tensor(out, dtype=torch.float64)


def test_llama3_frequencies_follow_metas_scaling():
    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    scaling["original_max_position_embeddings"] = 8192
    rope = RopeConfig(theta=500000.0, rope_type="llama3", scaling=scaling)
    got, attn = rope_inv_freq(rope, 128)
    ref = _llama3_reference(500000.0, 128, 8.0, 1.0, 4.0, 8192)
    assert attn == 1.0
    # float32 frequencies: a few float32 roundings of each
    assert torch.allclose(got.double(), ref, rtol=8 * 2.0**-23, atol=0)
    wavelen = 2 * math.pi / ref
    medium = (wavelen >= 8192 / 4.0) & (wavelen <= 8192 / 1.0)
    assert medium.any()  # the smoothed band is exercised
    # the defaults are Meta's: low 1, high 4, original context 8192
    bare, _ = rope_inv_freq(
        RopeConfig(theta=500000.0, rope_type="llama3", scaling={"factor": 8.0}), 128
    )
    assert torch.equal(bare, got)


def test_dynamic_rope_is_default_below_max_position():
    plain, _ = rope_inv_freq(RopeConfig(theta=10000.0), 64)
    dynamic, attn = rope_inv_freq(
        RopeConfig(theta=10000.0, rope_type="dynamic", scaling={"factor": 2.0}), 64
    )
    assert torch.equal(plain, dynamic) and attn == 1.0


def test_yarn_defaults_are_beta_fast_32_and_beta_slow_1():
    # a context where beta_fast 33 instead of 32 moves the ramp's start by one frequency
    s = {"factor": 4.0, "original_max_position_embeddings": 4908}
    bare = rope_inv_freq(RopeConfig(theta=10000.0, rope_type="yarn", scaling=s), 64)
    full = {**s, "beta_fast": 32.0, "beta_slow": 1.0}
    explicit = rope_inv_freq(RopeConfig(theta=10000.0, rope_type="yarn", scaling=full), 64)
    assert torch.equal(bare[0], explicit[0]) and bare[1] == explicit[1]
    other = {**s, "beta_fast": 33.0, "beta_slow": 1.0}
    moved = rope_inv_freq(RopeConfig(theta=10000.0, rope_type="yarn", scaling=other), 64)
    assert not torch.equal(moved[0], explicit[0])


# --- against transformers' own rope init functions (the engines' reference) -----------------------
def _hf(rope_type: str, theta: float, head_dim: int, params: dict, max_position: int = 2048):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = LlamaConfig(
        hidden_size=4 * head_dim,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=max_position,
        rope_parameters={"rope_type": rope_type, "rope_theta": theta, **params},
    )
    inv, attn = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu")
    return inv.double(), float(attn)


def _ours(rope_type: str, theta: float, head_dim: int, params: dict, max_position: int = 2048):
    rope = RopeConfig(theta=theta, rope_type=rope_type, scaling=dict(params))
    inv, attn = rope_inv_freq(rope, head_dim, max_position)
    return inv.double(), attn


F32 = 8 * 2.0**-23  # a few float32 roundings of each frequency


import pytest  # noqa: E402


@pytest.mark.parametrize(
    ("rope_type", "theta", "head_dim", "params"),
    [
        ("linear", 5000.0, 64, {"factor": 3.0}),
        (
            "llama3",
            500000.0,
            128,
            {
                "factor": 16.0,
                "low_freq_factor": 2.0,
                "high_freq_factor": 8.0,
                "original_max_position_embeddings": 4096,
            },
        ),
        (
            "llama3",
            10000.0,
            64,
            {
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        ),
        (
            "yarn",
            10000.0,
            64,
            {
                "factor": 4.0,
                "original_max_position_embeddings": 1024,
                "beta_fast": 16.0,
                "beta_slow": 2.0,
            },
        ),
        ("yarn", 50000.0, 128, {"factor": 40.0, "original_max_position_embeddings": 4096}),
        (
            "yarn",
            10000.0,
            64,
            {
                "factor": 8.0,
                "original_max_position_embeddings": 2048,
                "attention_factor": 0.7,
            },
        ),
        (
            "yarn",
            10000.0,
            64,
            {
                "factor": 8.0,
                "original_max_position_embeddings": 2048,
                "mscale": 0.707,
                "mscale_all_dim": 1.3,
            },
        ),
        # beta_fast and beta_slow on the same dimension: low == high, nudged apart
        (
            "yarn",
            10000.0,
            64,
            {
                "factor": 4.0,
                "original_max_position_embeddings": 2048,
                "beta_fast": 2.0,
                "beta_slow": 2.0,
            },
        ),
    ],
)
def test_inv_freq_and_attention_factor_equal_transformers(rope_type, theta, head_dim, params):
    ref, ref_attn = _hf(rope_type, theta, head_dim, params)
    got, attn = _ours(rope_type, theta, head_dim, params)
    assert torch.allclose(got, ref, rtol=F32, atol=0), (got - ref).abs().max()
    assert attn == pytest.approx(ref_attn, rel=1e-12)


def test_yarn_original_context_defaults_to_max_position():
    params = {"factor": 4.0}
    ref, _ = _hf("yarn", 10000.0, 64, params, max_position=3000)
    got, _ = _ours("yarn", 10000.0, 64, params, max_position=3000)
    assert torch.allclose(got, ref, rtol=F32, atol=0)
    other, _ = _ours("yarn", 10000.0, 64, params, max_position=2048)
    assert not torch.allclose(other, ref, rtol=F32, atol=0)


def test_unknown_rope_type_is_named():
    with pytest.raises(ValueError, match="unsupported rope_type 'ntk-by-parts'"):
        rope_inv_freq(RopeConfig(theta=1e4, rope_type="ntk-by-parts"), 64)


def test_yarn_mscale_edges():
    from inspector.model.rope import _yarn_get_mscale

    assert _yarn_get_mscale(0.5) == 1.0 and _yarn_get_mscale(1.0) == 1.0
    assert _yarn_get_mscale(1.5) == pytest.approx(0.1 * math.log(1.5) + 1.0)
    assert _yarn_get_mscale(4.0, 0.5) == pytest.approx(0.05 * math.log(4.0) + 1.0)


def test_cos_sin_carry_the_attention_factor():
    from dataclasses import replace

    from inspector.draft import DraftConfig
    from inspector.model import rope_cos_sin

    rope = RopeConfig(
        theta=10000.0,
        rope_type="yarn",
        scaling={"factor": 8.0, "original_max_position_embeddings": 2048, "attention_factor": 0.7},
    )
    cfg = DraftConfig(
        hidden_size=64,
        target_hidden_size=64,
        num_heads=2,
        num_kv_heads=1,
        head_dim=32,
        intermediate_size=96,
        rms_norm_eps=1e-5,
        rope=rope,
        vocab_size=50,
        draft_vocab_size=50,
    )
    pos = torch.tensor([0, 3, 100])
    cos, sin = rope_cos_sin(cfg, pos, torch.device("cpu"))
    inv, attn = rope_inv_freq(rope, 32)
    freqs = pos.double()[:, None] * inv.double()
    emb = torch.cat([freqs, freqs], dim=-1)
    assert cos.shape == sin.shape == (3, 32) and attn == 0.7
    assert torch.allclose(cos.double(), emb.cos() * 0.7, atol=1e-5)
    assert torch.allclose(sin.double(), emb.sin() * 0.7, atol=1e-5)
    plain = rope_cos_sin(replace(cfg, rope=RopeConfig(theta=10000.0)), pos, torch.device("cpu"))
    assert torch.allclose(plain[0][0], torch.ones(32))  # position 0: cos 1, no factor
