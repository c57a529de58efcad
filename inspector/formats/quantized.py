"""FP8 drafts: weights stored as float8 with their scales, dequantized into the canonical draft.

Two layouts write the same tensors: every quantized linear's `<name>.weight` in float8_e4m3fn
(e5m2 read too) beside `<name>.weight_scale` in float32, one value (per-tensor) or one per output
row (per-channel, [out] or [out, 1]); static activation scales `<name>.input_scale` (and KV-cache
`k_scale` / `v_scale`) may sit beside them. What declares it:

- ModelOpt (`quantize_drafter.py`, `hf_ptq.py`): `hf_quant_config.json` with
  `quantization.quant_algo: "FP8"`, and in newer exports config.json's `quantization_config`
  (`quant_method: "modelopt"`, `quant_algo: "FP8"`);
- llm-compressor / compressed-tensors: config.json's `quantization_config` with
  `quant_method: "compressed-tensors"` and `config_groups.*.weights` of `type: "float"`,
  `num_bits: 8` (strategy "tensor" or "channel").
- HF's FP8 (transformers' FP8 config, vLLM's `Fp8Config`): config.json's `quantization_config`
  with `quant_method: "fp8"` and no `weight_block_size` (per-tensor); vLLM's serialized
  checkpoints store `<name>.weight_scale`, transformers' `<name>.weight_scale_inv`, a multiplier
  despite its name (DeepSeek's convention): read as the weight's scale when it is one value or
  one per row.

The loader multiplies each weight by its scale in float32 (the product of an e4m3 value and a
float32 scale rounds once, at float32's 2^-24), records the quantization on the `Draft`
(`Draft.quantization`), and drops the scales. Activation scales are counted, not applied: the
forward runs activations unquantized. Block-wise scales (`weight_block_size`, a
`weight_scale_inv` of blocks or under another declaration), other methods (NVFP4, INT4, ...) and
a declaration the tensors contradict (FP8 declared, no FP8 weight stored) are one-line errors
naming the file and the field.
"""

from __future__ import annotations

from pathlib import Path

import torch

from inspector.draft import Quantization
from inspector.errors import InputError
from inspector.formats.files import read_json

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
HF_QUANT_CONFIG = "hf_quant_config.json"  # ModelOpt's
_ACTIVATION_SCALES = (".input_scale", ".k_scale", ".v_scale")

__all__ = ["FP8", "HF_QUANT_CONFIG", "declared_quantization", "dequantize"]


def _modelopt_algo(path: Path, field: str, algo: object) -> str:
    if not isinstance(algo, str) or algo.upper() != "FP8":
        raise InputError(path, field, f"{algo!r}: not read (FP8 drafts only)")
    return "modelopt"


def _compressed_tensors(path: Path, qc: dict) -> str:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise InputError(path, "quantization_config.config_groups", "missing or empty")
    for name, g in groups.items():
        w = g.get("weights") if isinstance(g, dict) else None
        field = f"quantization_config.config_groups.{name}.weights"
        if not isinstance(w, dict):
            raise InputError(path, field, "missing or not an object")
        if w.get("type") != "float" or w.get("num_bits") != 8:
            raise InputError(
                path,
                field,
                f"type {w.get('type')!r}, {w.get('num_bits')!r} bits: not read (FP8 only)",
            )
        if w.get("strategy") not in ("tensor", "channel"):
            raise InputError(
                path, field + ".strategy", f"{w.get('strategy')!r}: not read (tensor or channel)"
            )
    return "compressed-tensors"


def declared_quantization(folder: Path, config: dict) -> str | None:
    """Which layout declares the draft quantized (None: nothing does); InputError for a method
    this reader does not dequantize."""
    found = _declaration(folder, config)
    return found[0] if found is not None else None


def _declaration(folder: Path, config: dict) -> tuple[str, Path, str] | None:
    """The declaring layout, the file that declares it and its field (None: nothing does)."""
    cfg_path = folder / "config.json"
    qc = config.get("quantization_config")
    if qc is not None:
        if not isinstance(qc, dict):
            raise InputError(cfg_path, "quantization_config", "expected an object")
        if "weight_block_size" in qc:
            raise InputError(
                cfg_path, "quantization_config.weight_block_size", "block-wise FP8: not read"
            )
        method = qc.get("quant_method")
        if method == "compressed-tensors":
            return _compressed_tensors(cfg_path, qc), cfg_path, "quantization_config"
        if method == "fp8" and "quant_algo" not in qc:
            # HF's FP8 (transformers' FP8 config, vLLM's Fp8Config): per-tensor without
            # weight_block_size, each weight's scale as `weight_scale` or `weight_scale_inv`
            return "fp8", cfg_path, "quantization_config"
        if method in ("modelopt", "fp8") or "quant_algo" in qc:
            algo = qc.get("quant_algo")
            _modelopt_algo(cfg_path, "quantization_config.quant_algo", algo)
            return ("fp8" if method == "fp8" else "modelopt"), cfg_path, "quantization_config"
        raise InputError(cfg_path, "quantization_config.quant_method", f"{method!r}: not read")
    hf = folder / HF_QUANT_CONFIG
    if hf.is_file():
        q = read_json(hf).get("quantization")
        if not isinstance(q, dict):
            raise InputError(hf, "quantization", "missing or not an object")
        return (
            _modelopt_algo(hf, "quantization.quant_algo", q.get("quant_algo")),
            hf,
            "quantization",
        )
    return None


def _scale(wf: Path, name: str, s: torch.Tensor, rows: int) -> tuple[torch.Tensor, str]:
    """The scale as a float32 column to multiply the weight's rows by, and its granularity."""
    if not s.is_floating_point() or s.dtype in FP8:
        raise InputError(wf, name, f"dtype {s.dtype}, expected a floating scale")
    s = s.float()
    if not bool(torch.isfinite(s).all()) or not bool((s > 0).all()):
        raise InputError(wf, name, "holds a scale that is not finite and positive")
    if s.numel() == 1:
        return s.reshape(1, 1), "per-tensor"
    if s.numel() == rows and (s.dim() == 1 or (s.dim() == 2 and s.shape[1] == 1)):
        return s.reshape(rows, 1), "per-channel"
    raise InputError(
        wf, name, f"shape {tuple(s.shape)}: expected one scale or one per row ({rows})"
    )


def dequantize(
    weights: dict[str, torch.Tensor], folder: Path, config: dict, wf: Path
) -> Quantization | None:
    """Replace every FP8 weight in `weights` (canonical names) by scale * weight in float32 and
    drop the scales; the quantization read (None: none stored)."""
    found = _declaration(folder, config)
    declared = found[0] if found is not None else None
    fp8 = sorted(n for n, t in weights.items() if t.dtype in FP8)
    unquantized = _unquantized_dtype(weights)
    stored_as: dict[str, str] = {}  # weight_scale -> the weight_scale_inv it was stored as
    for n in [n for n in weights if n.endswith(".weight_scale_inv")]:
        # HF's fp8 names a per-tensor (or per-row) multiplier weight_scale_inv too; anything
        # else of that name is DeepSeek's block-wise scale
        s, w = weights[n], weights.get(n.removesuffix("_scale_inv"))
        rows = w.shape[0] if w is not None and w.dim() == 2 else -1
        per_row = s.numel() == rows and (s.dim() == 1 or (s.dim() == 2 and s.shape[1] == 1))
        if declared != "fp8" or not (s.numel() == 1 or per_row):
            raise InputError(wf, n, "a block-wise FP8 scale: not read")
        if n.removesuffix("_inv") in weights:
            raise InputError(wf, n, "a second scale beside weight_scale")
        weights[n.removesuffix("_inv")] = weights.pop(n)
        stored_as[n.removesuffix("_inv")] = n
    if not fp8:
        stray = next((n for n in weights if n.endswith(".weight_scale")), None)
        if stray is not None:
            raise InputError(
                wf, stored_as.get(stray, stray), "a weight scale beside a weight that is not FP8"
            )
        if found is not None:
            raise InputError(found[1], found[2], "declares FP8; no FP8 weight stored")
        return None
    kinds, dtypes = set(), set()
    for n in fp8:
        if not n.endswith(".weight"):
            raise InputError(wf, n, f"dtype {weights[n].dtype}: only a weight may be FP8")
        scale_name = n + "_scale"
        w = weights[n]
        if scale_name not in weights:
            raise InputError(wf, scale_name, "tensor not found: an FP8 weight needs its scale")
        if w.dim() != 2:
            raise InputError(wf, n, f"shape {tuple(w.shape)}: an FP8 weight is a matrix")
        stored = stored_as.get(scale_name, scale_name)
        col, kind = _scale(wf, stored, weights.pop(scale_name), w.shape[0])
        weights[n] = w.float() * col
        kinds.add(kind)
        dtypes.add(str(w.dtype).removeprefix("torch."))
    stray = next((n for n in weights if n.endswith(".weight_scale")), None)
    if stray is not None:
        raise InputError(
            wf, stored_as.get(stray, stray), "a weight scale beside a weight that is not FP8"
        )
    activation = [n for n in weights if n.endswith(_ACTIVATION_SCALES)]
    for n in activation:
        del weights[n]
    return Quantization(
        method="fp8",
        format=declared or "scales only",
        weight_dtype="/".join(sorted(dtypes)),
        granularity=kinds.pop() if len(kinds) == 1 else "mixed",
        tensors=tuple(fp8),
        input_scales=len(activation),
        unquantized_dtype=unquantized,
    )


def _unquantized_dtype(weights: dict[str, torch.Tensor]) -> torch.dtype | None:
    """The dtype holding most elements of the floating tensors stored unquantized (scales
    aside): the checkpoint's own dtype (typically bfloat16); None when there is none."""
    count: dict[torch.dtype, int] = {}
    for n, t in weights.items():
        if t.is_floating_point() and t.dtype not in FP8 and "_scale" not in n.rsplit(".", 1)[-1]:
            count[t.dtype] = count.get(t.dtype, 0) + t.numel()
    return max(count, key=lambda d: count[d]) if count else None
