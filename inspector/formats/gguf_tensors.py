"""A GGUF draft's tensors -> canonical weights: every tensor llama.cpp's eagle3 graph reads, of its
shape, dequantized with the `gguf` package; Q and K rows un-permuted (`unpermute`); d2t's
absolute target ids as the canonical offsets; a missing `output.weight` replaced by the target's
head rows, as llama.cpp borrows it. The GGUF -> canonical name table is in `gguf_draft`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from inspector.draft import DraftConfig
from inspector.engines import Engine
from inspector.errors import InputError
from inspector.formats.files import one_line
from inspector.formats.gguf_file import ARCH
from inspector.formats.gguf_rope import ROPE_FREQS
from inspector.formats.target_tensors import read_target_lm_head
from inspector.formats.vocab import integer_ids

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP = Engine.LLAMACPP.display

HIDDEN_NORMS = ("blk.0.attn_norm_2.weight", "blk.0.hidden_norm.weight")
D2T = "d2t"
# GGUF types kept as they are (F16, BF16) or read as float32 without rounding (F32).
UNQUANTIZED = ("F32", "F16", "BF16")

# Tensors of one decoder layer: GGUF name -> canonical name.
_LAYER = {
    "blk.0.attn_norm.weight": "layers.0.input_layernorm.weight",
    "blk.0.attn_q.weight": "layers.0.self_attn.q_proj.weight",
    "blk.0.attn_k.weight": "layers.0.self_attn.k_proj.weight",
    "blk.0.attn_v.weight": "layers.0.self_attn.v_proj.weight",
    "blk.0.attn_output.weight": "layers.0.self_attn.o_proj.weight",
    "blk.0.ffn_norm.weight": "layers.0.post_attention_layernorm.weight",
    "blk.0.ffn_gate.weight": "layers.0.mlp.gate_proj.weight",
    "blk.0.ffn_up.weight": "layers.0.mlp.up_proj.weight",
    "blk.0.ffn_down.weight": "layers.0.mlp.down_proj.weight",
}
_TOP = {
    "fc.weight": "fc.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
    "token_embd.weight": "embed_tokens.weight",
    "enc.output_norm.weight": "input_norm.weight",
}
_REQUIRED = ("fc.weight", "output_norm.weight", *_LAYER)


def expected_shapes(cfg: DraftConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the eagle3 graph may read, GGUF name -> shape as torch reads it ([rows,
    columns]; gguf-dump prints the reverse)."""
    h, hd, i = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    n, ht = cfg.num_fc_blocks, cfg.target_hidden_size
    out: dict[str, tuple[int, ...]] = {
        "fc.weight": (h, n * ht),
        "token_embd.weight": (cfg.vocab_size, h),
        "output.weight": (cfg.draft_vocab_size, h),
        "output_norm.weight": (h,),
        "blk.0.attn_norm.weight": (h,),
        "blk.0.attn_q.weight": (cfg.num_heads * hd, 2 * h),
        "blk.0.attn_k.weight": (cfg.num_kv_heads * hd, 2 * h),
        "blk.0.attn_v.weight": (cfg.num_kv_heads * hd, 2 * h),
        "blk.0.attn_output.weight": (h, cfg.num_heads * hd),
        "blk.0.ffn_norm.weight": (h,),
        "blk.0.ffn_gate.weight": (i, h),
        "blk.0.ffn_up.weight": (i, h),
        "blk.0.ffn_down.weight": (h, i),
    }
    for name in HIDDEN_NORMS:
        out[name] = (h,)
    if cfg.norm_before_fc:
        out["enc.output_norm.weight"] = (n * ht,)
    if cfg.fc_norm:
        for b in range(n):
            out[f"fc_norm.{b}.weight"] = (ht,)
    return out


def gguf_weights(
    gguf: Any, tensors: dict[str, Any], cfg: DraftConfig, file: Path
) -> tuple[dict[str, torch.Tensor], set[str]]:
    """The canonical weights (d2t as offsets) and the GGUF tensor types they were stored in."""
    shapes = expected_shapes(cfg)
    hidden = [n for n in HIDDEN_NORMS if n in tensors]
    if len(hidden) > 1:
        raise InputError(file, hidden[1], f"a second hidden norm beside {hidden[0]}")
    for name in (*_REQUIRED, HIDDEN_NORMS[0] if not hidden else hidden[0]):
        if name not in tensors:
            raise InputError(file, name, "tensor not found")
    for flag, names in (
        ("norm_before_fc", ["enc.output_norm.weight"]),
        ("fc_norm", [f"fc_norm.{b}.weight" for b in range(cfg.num_fc_blocks)]),
    ):
        for name in names:
            if getattr(cfg, flag) and name not in tensors:
                raise InputError(file, name, f"tensor not found ({ARCH}.{flag} is true)")
    weights: dict[str, torch.Tensor] = {}
    kinds: set[str] = set()
    for name, t in tensors.items():
        if name == ROPE_FREQS:
            continue  # read into the RoPE config
        if name == D2T:
            weights["d2t"] = _offsets(file, t, cfg.vocab_size)
            continue
        if name not in shapes:
            raise InputError(file, name, _stray(name))
        shape = tuple(int(n) for n in reversed([int(d) for d in t.shape]))
        if shape != shapes[name]:
            why = ""
            if name == "output.weight" and D2T in tensors:
                why = " (rows: the d2t length)"
            elif name == "fc.weight":
                why = (
                    f" ({cfg.num_fc_blocks} target layers in the ids key, each "
                    f"{ARCH}.target_hidden_size {cfg.target_hidden_size} wide)"
                )
            raise InputError(file, name, f"shape {shape}, expected {shapes[name]}{why}")
        w = _dequantize(gguf, t, shape, file)
        kinds.add(t.tensor_type.name)
        if name == "blk.0.attn_q.weight":
            w = unpermute(w, cfg.num_heads)
        elif name == "blk.0.attn_k.weight":
            w = unpermute(w, cfg.num_kv_heads)
        canon = _TOP.get(name) or _LAYER.get(name)
        if canon is None:
            canon = "layers.0.hidden_norm.weight" if name in HIDDEN_NORMS else name
        weights[canon] = w
    return weights, kinds


def _stray(name: str) -> str:
    if name == "d2t.weight":
        return (
            "d2t under an earlier converter's name: whether it holds offsets or absolute ids is "
            "not recorded, so it is not read"
        )
    if name == "t2d":
        return f"not a tensor {_LLAMACPP}'s converter writes (it drops t2d): not read"
    if name.startswith("blk.") and not name.startswith("blk.0."):
        return f"a second decoder layer: {_LLAMACPP}'s eagle3 graph runs one"
    if name in ("enc.output_norm.weight",) or name.startswith("fc_norm."):
        flag = "norm_before_fc" if name.startswith("enc.") else "fc_norm"
        return f"present but {ARCH}.{flag} is not true: {_LLAMACPP} would not read it"
    return f"not a tensor of {_LLAMACPP}'s eagle3 draft"


def _dequantize(gguf: Any, t: Any, shape: tuple[int, ...], file: Path) -> torch.Tensor:
    """One weight as a torch tensor: F16 and BF16 keep their dtype, every other type (F32 and
    the quantized ones) becomes float32; values through `gguf.quants.dequantize` only."""
    kind = t.tensor_type.name
    if kind in ("I8", "I16", "I32", "I64"):
        raise InputError(file, t.name, f"type {kind}, expected a floating or quantized type")
    try:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
    except (NotImplementedError, ValueError, TypeError) as e:
        raise InputError(
            file,
            t.name,
            f"type {kind}: the gguf package cannot dequantize it ({one_line(str(e))})",
        ) from None
    arr = np.asarray(values, dtype=np.float32)
    if np.may_share_memory(arr, t.data) or not arr.flags.writeable:
        arr = arr.copy()  # F32 comes back as a view of the mapped file: never hand that out
    w = torch.from_numpy(arr.reshape(shape))
    if not bool(torch.isfinite(w).all()):
        raise InputError(file, t.name, "contains NaN or Inf")
    if kind == "F16":
        return w.to(torch.float16)  # exact: the values came from float16
    if kind == "BF16":
        return w.to(torch.bfloat16)
    return w


def unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """The inverse of the converter's `LlamaModel.permute(w, n_head, n_head_kv)` (pass the kv
    heads for K): llama.cpp's rows of a head, [hd/2, 2] (adjacent rotary pairs), back to HF's
    [2, hd/2] (rotate_half's halves)."""
    rows = w.shape[0]
    return (
        w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
        .contiguous()
    )


def _offsets(file: Path, t: Any, vocab: int) -> torch.Tensor:
    """llama.cpp's d2t (the absolute target id of every draft id, `prepare_tensors`) as the
    canonical offsets target - draft; ids out of range, repeated or out of order are refused
    (the converter refuses the first two; the canonical map keeps target ids ascending)."""
    if t.tensor_type.name not in ("I64", "I32"):
        raise InputError(file, D2T, f"type {t.tensor_type.name}, expected I64 target ids")
    ids = integer_ids(file, D2T, torch.from_numpy(np.array(t.data, copy=True)))
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise InputError(file, D2T, f"holds target ids outside [0, {vocab})")
    if ids.unique().numel() != ids.numel():
        raise InputError(
            file, D2T, f"holds {ids.numel() - ids.unique().numel()} repeated target ids"
        )
    if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
        raise InputError(file, D2T, "target ids not in ascending order: not supported")
    return ids - torch.arange(ids.numel())


def target_lm_head(
    file: Path,
    target: str | Path | None,
    cfg: DraftConfig,
    weights: dict[str, torch.Tensor],
    notes: list[str],
) -> torch.Tensor:
    """No output.weight: llama.cpp (b9606) predicts with the target's lm_head; its rows of the
    draft vocabulary stand in here."""
    if target is None:
        raise InputError(
            file,
            "output.weight",
            f"absent ({_LLAMACPP} then uses the target's lm_head): pass --target DIR",
        )
    head = read_target_lm_head(Path(target))
    want = (cfg.vocab_size, cfg.hidden_size)
    if tuple(head.shape) != want:
        raise InputError(
            target, "lm_head.weight", f"shape {tuple(head.shape)}, expected {want} (the draft's)"
        )
    offsets = weights.get("d2t")
    rows = torch.arange(cfg.draft_vocab_size)
    if offsets is not None:
        rows = rows + offsets
    notes.append(
        f"output.weight absent: the target's lm_head ({target}) stands in, as in {_LLAMACPP}"
    )
    return head[rows]
