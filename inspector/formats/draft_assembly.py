"""The last step of loading every draft layout: settled config and canonical weights -> `Draft`.

`assemble_draft` attaches the embedding (saved, or from --embed / --target), builds and validates
the vocab map, ties the head where the config says so, checks every tensor the forward reads (its
shape, floating, finite) and casts the weights to the compute dtype. The folder layouts
(`inspector.formats.checkpoint`) and llama.cpp's GGUF (`inspector.formats.gguf_draft`) both end
here.
"""

from __future__ import annotations

from pathlib import Path

import torch

from inspector.draft import Draft, DraftConfig, Quantization, StoredVocab
from inspector.engines import Engine
from inspector.errors import InputError
from inspector.formats.compute_dtype import compute_dtype
from inspector.formats.target_tensors import read_embedding
from inspector.formats.vocab import vocab_map
from inspector.memory import available_host_bytes

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG = Engine.SGLANG.display


def assemble_draft(
    cfg: DraftConfig,
    weights: dict[str, torch.Tensor],
    weight_file: Path,
    *,
    embed: str | Path | None,
    target: str | Path | None,
    dtype: str | torch.dtype | None,
    device: str | torch.device,
    strict: bool,
    notes: list[str],
    name: str,
    path: str,
    layout: str,
    quantization: Quantization | None = None,
) -> Draft:
    """The Draft from settled config and canonical weights (d2t as offsets, t2d as a mask, when
    stored): the embedding attached, the vocab map validated, every tensor checked, and the
    weights cast to the compute dtype on `device`. Every layout's loader ends here."""
    _attach_embedding(weights, cfg, weight_file, embed, target, notes)
    stored = StoredVocab(weights.pop("d2t", None), weights.pop("t2d", None))
    vocab = vocab_map(
        stored.d2t,
        stored.t2d,
        cfg.draft_vocab_size,
        cfg.vocab_size,
        weight_file,
        strict=strict,
        notes=notes,
    )
    _tie_lm_head(weights, cfg, vocab.draft_to_target, notes)
    _settle_mask_hidden(cfg, weights, weight_file, notes)
    _validate(cfg, weights, weight_file)
    stored_dtype = weights["fc.weight"].dtype
    if quantization is not None and quantization.unquantized_dtype is not None:
        # an FP8 draft's dequantized weights are float32; it is stored (and served) in the dtype
        # of its unquantized tensors
        stored_dtype = quantization.unquantized_dtype
    chosen = compute_dtype(
        dtype,
        stored_dtype,
        device=device,
        float_bytes=sum(v.nbytes for v in weights.values() if v.is_floating_point()),
        available=available_host_bytes(),
    )
    target_dtype = chosen.dtype
    draft = Draft(
        config=cfg,
        # Row-major weights: the forward multiplies `x @ W.T`, fast on CPU in every dtype only
        # for a contiguous W.
        weights={
            k: (v.to(target_dtype).contiguous() if v.is_floating_point() else v)
            for k, v in weights.items()
        },
        vocab=vocab,
        name=name,
        path=path,
        layout=layout,
        notes=notes,
        stored_vocab=stored,
        stored_dtype=chosen.stored,
        dtype_note=chosen.note,
        quantization=quantization,
    )
    return draft.to(device) if str(device) != "cpu" else draft


def _check_shape(
    path: Path, name: str, t: torch.Tensor, shape: tuple[int, ...], why: str = ""
) -> None:
    if tuple(t.shape) != shape:
        extra = f" ({why})" if why else ""
        raise InputError(path, name, f"shape {tuple(t.shape)}, expected {shape}{extra}")
    if not t.is_floating_point():
        raise InputError(path, name, f"dtype {t.dtype}, expected a floating type")


def _tie_lm_head(
    w: dict[str, torch.Tensor], cfg: DraftConfig, draft_to_target: torch.Tensor, notes: list[str]
) -> None:
    """tie_word_embeddings: a draft that saved no lm_head predicts with the embedding's rows
    of its vocabulary (a head saved anyway, e.g. a draft-vocab one trained on its own, wins)."""
    if "lm_head.weight" in w or not cfg.tie_word_embeddings or "embed_tokens.weight" not in w:
        return
    w["lm_head.weight"] = w["embed_tokens.weight"][draft_to_target]
    notes.append("lm_head.weight absent: tie_word_embeddings, the embedding rows stand in")


def _attach_embedding(
    w: dict[str, torch.Tensor],
    cfg: DraftConfig,
    wf: Path,
    embed: str | Path | None,
    target: str | Path | None,
    notes: list[str],
) -> None:
    """The embedding: saved (speculators), or read from --embed / --target and checked there."""
    shape = (cfg.vocab_size, cfg.hidden_size)
    if embed is not None:
        w["embed_tokens.weight"] = read_embedding(Path(embed), shape)
        notes.append(f"embedding from {embed}")
    elif "embed_tokens.weight" not in w:
        if target is None:
            raise InputError(
                wf,
                "embed_tokens.weight",
                f"absent (SpecForge/{_SGLANG} exports drop it): pass --target DIR or --embed FILE",
            )
        w["embed_tokens.weight"] = read_embedding(Path(target), shape)
        notes.append(f"embedding from target {target}")


def _attention_shapes(cfg: DraftConfig, in_dim: int) -> dict[str, tuple[int, ...]]:
    """The attention tensors of one layer (names as SpecForge and TorchSpec save them for MLA)."""
    h, hd, nh, nkv = cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
    m = cfg.mla
    if m is None:
        return {
            "self_attn.q_proj.weight": (nh * hd, in_dim),
            "self_attn.k_proj.weight": (nkv * hd, in_dim),
            "self_attn.v_proj.weight": (nkv * hd, in_dim),
            "self_attn.o_proj.weight": (h, nh * hd),
        }
    out: dict[str, tuple[int, ...]] = {}
    if m.q_lora_rank is None:
        out["self_attn.q_proj.weight"] = (nh * m.qk_head_dim, in_dim)
    else:
        out["self_attn.q_a_proj.weight"] = (m.q_lora_rank, in_dim)
        out["self_attn.q_a_layernorm.weight"] = (m.q_lora_rank,)
        out["self_attn.q_b_proj.weight"] = (nh * m.qk_head_dim, m.q_lora_rank)
    out["self_attn.kv_a_proj_with_mqa.weight"] = (m.kv_lora_rank + m.qk_rope_head_dim, in_dim)
    out["self_attn.kv_a_layernorm.weight"] = (m.kv_lora_rank,)
    out["self_attn.kv_b_proj.weight"] = (nh * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank)
    out["self_attn.o_proj.weight"] = (h, nh * m.v_head_dim)
    return out


def _layout_note(cfg: DraftConfig, layer: int, name: str, t: torch.Tensor) -> str:
    """The two MLA layouts, for a layer-0 attention tensor whose in-dim is neither H nor 2H
    (an in-dim of H with input_proj present, or absent, is told apart before, by the checkpoint loader;
    empty for any other shape fault)."""
    reads_input = ("self_attn.q_proj.", "self_attn.q_a_proj.", "self_attn.kv_a_proj_with_mqa.")
    if cfg.mla is None or cfg.mla.input_proj or layer != 0 or not name.startswith(reads_input):
        return ""
    if t.dim() != 2 or t.shape[1] in (cfg.hidden_size, 2 * cfg.hidden_size):
        return ""
    return (
        "MLA draft without input_proj: layer 0's attention reads the 2*hidden_size concat; "
        "SpecForge PR 186's reads hidden_size after its input_proj"
    )


def _settle_mask_hidden(
    cfg: DraftConfig, w: dict[str, torch.Tensor], wf: Path, notes: list[str]
) -> None:
    """P-EAGLE's `mask_hidden` as one fc-input vector [N*Ht] (both trainers save [1, 1, N*Ht]).
    Required: speculators' own loader would fill a missing one with noise, silently."""
    t = w.get("mask_hidden")
    if cfg.parallel is None:
        if t is not None:
            notes.append("mask_hidden is stored but config.json is not P-EAGLE: it is ignored")
            del w["mask_hidden"]
        return
    width = cfg.num_fc_blocks * cfg.target_hidden_size
    if t is None:
        raise InputError(wf, "mask_hidden", "tensor not found (a P-EAGLE draft needs it)")
    if t.numel() != width or any(d != 1 for d in t.shape[:-1]):
        raise InputError(wf, "mask_hidden", f"shape {tuple(t.shape)}, expected (1, 1, {width})")
    if not t.is_floating_point():
        raise InputError(wf, "mask_hidden", f"dtype {t.dtype}, expected a floating type")
    w["mask_hidden"] = t.reshape(width)


def _validate(cfg: DraftConfig, w: dict[str, torch.Tensor], wf: Path) -> None:
    """Every tensor the forward pass reads: present, of its shape, floating, finite."""
    h, hd = cfg.hidden_size, cfg.head_dim
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        input_proj = i == 0 and cfg.mla is not None and cfg.mla.input_proj
        in_dim = 2 * h if i == 0 and not input_proj else h
        expect = _attention_shapes(cfg, in_dim)
        if input_proj:
            expect["input_proj.input_norm.weight"] = (2 * h,)
            expect["input_proj.proj.weight"] = (h, 2 * h)
        expect.update(
            {
                "mlp.gate_proj.weight": (cfg.intermediate_size, h),
                "mlp.up_proj.weight": (cfg.intermediate_size, h),
                "mlp.down_proj.weight": (h, cfg.intermediate_size),
                "input_layernorm.weight": (h,),
                "post_attention_layernorm.weight": (h,),
            }
        )
        if i == 0:
            expect["hidden_norm.weight"] = (h,)
        for name, shape in expect.items():
            if p + name not in w:
                if i > 0 and name == "input_layernorm.weight" and p + "hidden_norm.weight" in w:
                    # SGLang's extra layers use hidden_norm as their input norm.
                    w[p + name] = w[p + "hidden_norm.weight"]
                    continue
                raise InputError(wf, p + name, "tensor not found")
            _check_shape(wf, p + name, w[p + name], shape, _layout_note(cfg, i, name, w[p + name]))
    for name, shape in {
        "norm.weight": (h,),
        "lm_head.weight": (cfg.draft_vocab_size, h),
        "embed_tokens.weight": (cfg.vocab_size, h),
    }.items():
        if name not in w:
            raise InputError(wf, name, "tensor not found")
        why = "draft_vocab_size" if name == "lm_head.weight" else ""
        _check_shape(wf, name, w[name], shape, why)
    ht, n = cfg.target_hidden_size, cfg.num_fc_blocks
    _check_shape(wf, "fc.weight", w["fc.weight"], (h, n * ht))
    optional = {
        f"layers.{i}.self_attn.{q}_norm.weight": (hd,) for i in range(cfg.num_layers) for q in "qk"
    }
    if cfg.norm_before_fc:
        optional["input_norm.weight"] = (n * ht,)
        if "input_norm.weight" not in w:
            raise InputError(wf, "input_norm.weight", "tensor not found (norm_before_fc is set)")
    if cfg.fc_norm:
        for i in range(n):
            optional[f"fc_norm.{i}.weight"] = (ht,)
            if f"fc_norm.{i}.weight" not in w:
                raise InputError(wf, f"fc_norm.{i}.weight", "tensor not found (fc_norm is set)")
    for name, shape in optional.items():
        if name in w:
            _check_shape(wf, name, w[name], shape)
    for name, t in w.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise InputError(wf, name, "contains NaN or Inf")
