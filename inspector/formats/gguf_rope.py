"""A GGUF draft's RoPE: the keys `TextModel.set_gguf_parameters` writes (linear, yarn scaling), or
llama3 scaling, which reaches the GGUF only as the per-pair factors of `rope_freqs.weight`
(`LlamaModel.generate_extra_tensors` in llama.cpp's conversion/llama.py) and is recovered here as
the `rope_scaling` that gives them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from inspector.draft import RopeConfig
from inspector.errors import InputError
from inspector.formats.config import DEFAULT_ROPE_THETA, ConfigReader
from inspector.formats.gguf_file import ARCH, f32_decimal

ROPE_FREQS = "rope_freqs.weight"
LLAMA3_DEFAULT_CONTEXT = 8192  # the converter's default original_max_position_embeddings


def gguf_rope(top: ConfigReader, freqs: Any, hd: int, file: Path) -> RopeConfig:
    """The draft's RoPE from the keys `TextModel.set_gguf_parameters` writes (linear, yarn) or
    llama3's `rope_freqs.weight` (`LlamaModel.generate_extra_tensors`)."""
    k = ARCH + ".rope."
    # absent: 10000, llama.cpp's default too (llama-model.cpp)
    theta = top.positive_number(k + "freq_base", DEFAULT_ROPE_THETA, above=1.0)
    kind = top.text(k + "scaling.type", "none")
    if freqs is not None:
        if kind != "none":
            raise InputError(
                file, ROPE_FREQS, f"present with {k}scaling.type {kind!r}: two scalings at once"
            )
        factors = np.asarray(freqs.data, dtype=np.float64).reshape(-1)
        if factors.shape != (hd // 2,) or freqs.tensor_type.name != "F32":
            raise InputError(
                file,
                ROPE_FREQS,
                f"{freqs.tensor_type.name} {tuple(int(n) for n in freqs.shape)}: expected F32 ({hd // 2},)",
            )
        scaling = llama3_from_factors(factors, theta, hd)
        if scaling is None:
            raise InputError(
                file,
                ROPE_FREQS,
                "per-frequency factors that no llama3 rope_scaling (factor, low/high_freq_factor, "
                "original_max_position_embeddings) gives: not supported",
            )
        if not scaling:
            return RopeConfig(theta=theta)
        return RopeConfig(theta=theta, rope_type="llama3", scaling=scaling)
    for unread in ("scaling.yarn_ext_factor", "scaling.attn_factor", "scaling.yarn_log_multiplier"):
        if top.has(k + unread):
            raise top.error(k + unread, "not modelled by the draft forward: not supported")
    if kind == "none":
        return RopeConfig(theta=theta)
    if kind == "linear":
        return RopeConfig(
            theta=theta,
            rope_type="linear",
            scaling={"factor": top.positive_number(k + "scaling.factor")},
        )
    if kind == "yarn":
        scaling: dict[str, float | int] = {
            "factor": top.positive_number(k + "scaling.factor"),
            "original_max_position_embeddings": top.positive_int(
                k + "scaling.original_context_length"
            ),
        }
        for key, name in (
            ("scaling.yarn_beta_fast", "beta_fast"),
            ("scaling.yarn_beta_slow", "beta_slow"),
            ("scaling.yarn_attn_factor", "attention_factor"),
        ):
            if top.has(k + key):
                scaling[name] = top.positive_number(k + key)
        return RopeConfig(theta=theta, rope_type="yarn", scaling=scaling)
    raise top.error(k + "scaling.type", f"{kind!r}: not supported (none, linear, yarn)")


def converter_llama3_factors(
    theta: float, dim: int, factor: float, low: float, high: float, context: int
) -> torch.Tensor:
    """`rope_freqs.weight` as `LlamaModel.generate_extra_tensors` computes it for llama3 RoPE
    (float32 frequencies, the factor per rotary pair)."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    low_wavelen = context / low
    high_wavelen = context / high
    out: list = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (context / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32)


def llama3_from_factors(factors: np.ndarray, theta: float, dim: int) -> dict | None:
    """The llama3 rope_scaling that gives these `rope_freqs.weight` factors ({} for all ones:
    no scaling), or None when none is found.

    The factors depend on low/high_freq_factor and original_max_position_embeddings only through
    two wavelengths, context/low (longer: scaled by `factor`) and context/high (shorter: kept),
    so the context is taken as the converter's default 8192 and the two band edges are found:
    Llama 3.x's own (low 1, high 4) first, then fitted to the pairs between the bands (6
    significant digits, then unrounded), or, with at most one pair between them, placed in the
    gaps around it. A candidate counts when the converter's computation with it gives the stored
    factors to 1e-5 relative (the RoPE angles then differ by at most 1e-5 of themselves)."""
    if not np.all(np.isfinite(factors)) or np.any(factors <= 0):
        return None
    if np.all(factors == 1.0):
        return {}
    factor = f32_decimal(float(factors.max()))
    wavelen = 2 * math.pi * theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    ctx = LLAMA3_DEFAULT_CONTEXT
    tol = 1e-6
    ones, top = factors <= 1 + tol, factors >= factor * (1 - tol)
    band = ~ones & ~top
    edges: list[tuple[float, float]] = [(ctx / 1.0, ctx / 4.0)]  # (low_wl, high_wl)
    if band.sum() >= 2:
        s = (1 / factors[band] - 1 / factor) / (1 - 1 / factor)
        slope, intercept = np.polyfit(1 / wavelen[band], s, 1)
        if slope > 0 and intercept < 0:
            edges.append((slope / -intercept, slope / (1 - intercept)))
    elif ones.any():
        last_one = float(wavelen[ones].max())
        nxt = float(wavelen[wavelen > last_one].min())
        if band.sum() == 1:
            # One pair between the bands, its smooth value s1 = (1/wl - 1/low)/(1/high - 1/low):
            # place one edge in the gap beside it and solve the other.
            wl, f1 = float(wavelen[band][0]), float(factors[band][0])
            s1 = (1 / f1 - 1 / factor) / (1 - 1 / factor)
            above = wavelen[wavelen > wl]
            nxt_up = float(above.min()) if above.size else wl * 4
            high_wl = math.sqrt(last_one * wl)
            edges.append(((1 - s1) / (1 / wl - s1 / high_wl), high_wl))
            low_wl = math.sqrt(wl * nxt_up)
            edges.append((low_wl, s1 / (1 / wl - (1 - s1) / low_wl)))
        else:  # no pair between the bands: any edges inside the gap give the same factors
            gap = nxt / last_one
            edges.append((last_one * gap ** (2 / 3), last_one * gap ** (1 / 3)))
    stored = torch.from_numpy(factors.astype(np.float32))
    for low_wl, high_wl in edges:
        if not 0 < high_wl < low_wl:
            continue
        for digits in ("6g", "17g"):
            low, high = float(f"{ctx / low_wl:.{digits}}"), float(f"{ctx / high_wl:.{digits}}")
            got = converter_llama3_factors(theta, dim, factor, low, high, ctx)
            if torch.allclose(got, stored, rtol=1e-5, atol=0.0):
                return {
                    "factor": factor,
                    "low_freq_factor": low,
                    "high_freq_factor": high,
                    "original_max_position_embeddings": ctx,
                }
    return None
