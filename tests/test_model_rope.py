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
