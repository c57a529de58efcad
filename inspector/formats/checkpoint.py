"""Detect and load every public EAGLE-3 draft layout into one canonical `Draft`.

- speculators: `speculators_model_type: eagle3`, nested `transformer_layer_config`, `layers.{i}.*`,
  `embed_tokens` saved.
- SpecForge / EAGLE / SGLang: flat LlamaConfig, `midlayer.*` (SGLang exports may add
  `model.` prefixes), `embed_tokens` usually absent: taken from `--embed` or `--target`.

Loading runs in four steps: the config is validated on its own (`inspector.formats.config`), the
weights are read and renamed to canonical names, the config is settled against the weights (fc
blocks, head_dim), and every tensor's shape is checked before a `Draft` is built.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import torch

from inspector.draft import Draft, DraftConfig, RopeConfig, StoredVocab
from inspector.errors import InputError
from inspector.formats.compute_dtype import compute_dtype
from inspector.formats.config import ConfigReader, ParsedConfig, parse_draft_config, read_rope
from inspector.formats.target import read_embedding
from inspector.formats.tensorfiles import find_weight_file, read_json, read_tensors
from inspector.formats.vocab import vocab_map
from inspector.memory import available_host_bytes

_PREFIXES = (
    (re.compile(r"^(?:model\.)?midlayer\."), "layers.0."),
    (re.compile(r"^(?:model\.)?additional_layers\.(\d+)\."), None),
    (re.compile(r"^model\.layers\."), "layers."),
    (re.compile(r"^model\.(?=(fc|norm|embed_tokens|lm_head|input_norm|fc_norm|d2t|t2d)\b)"), ""),
)
# SpecForge PR 186's MLA draft: layer 0's RMSNorm over the 2H concat and its 2H -> H linear.
_INPUT_PROJ = ("layers.0.input_proj.proj.weight", "layers.0.input_proj.input_norm.weight")
# SpecForge's use_aux_norm saves one RMSNorm per aux slot under these names (low, mid, high
# layer: fc blocks 0, 1, 2); they are Eagle 3.1's fc_norm.{0,1,2}.
_AUX_NORMS = {
    "aux_norm_low.": "fc_norm.0.",
    "aux_norm_mid.": "fc_norm.1.",
    "aux_norm_high.": "fc_norm.2.",
}


def canonical_name(name: str) -> str:
    """Map every layout's tensor name onto the canonical `layers.{i}.*` names."""
    bare = name.removeprefix("model.")
    for old, new in _AUX_NORMS.items():
        if bare.startswith(old):
            return new + bare[len(old) :]
    for pattern, repl in _PREFIXES:
        m = pattern.match(name)
        if not m:
            continue
        if repl is None:  # SGLang additional_layers.i -> layers.{i+1}
            return f"layers.{int(m.group(1)) + 1}." + name[m.end() :]
        return repl + name[m.end() :]
    return name


def _check_shape(
    path: Path, name: str, t: torch.Tensor, shape: tuple[int, ...], why: str = ""
) -> None:
    if tuple(t.shape) != shape:
        extra = f" ({why})" if why else ""
        raise InputError(path, name, f"shape {tuple(t.shape)}, expected {shape}{extra}")
    if not t.is_floating_point():
        raise InputError(path, name, f"dtype {t.dtype}, expected a floating type")


def rope_config(layer_cfg: dict, top: dict, path: str | Path | None = None) -> RopeConfig:
    """The RoPE settings of a decoder config (`layer_cfg`) inside a file's top-level object
    (`top`; the same object for a flat config), validated; errors name `path`."""
    return read_rope(ConfigReader(path, layer_cfg), ConfigReader(path, top))


def load_draft(
    path: str | Path,
    *,
    embed: str | Path | None = None,
    target: str | Path | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
    strict: bool = True,
) -> Draft:
    """Load a draft checkpoint folder (config.json + weights) into a canonical Draft.

    dtype None / "auto": the stored floating dtype, except float32 for a half-precision draft on
    a CPU (inspector.formats.compute_dtype); `Draft.stored_dtype` keeps what the file holds.
    strict=False (the doctor) loads two faults it then reports instead of failing, each noted in
    `Draft.notes`: a config without head_dim whose q_proj implies another value than
    hidden_size/heads (head_dim is taken from q_proj), and a d2t/t2d pair that is inconsistent
    or holds absolute ids (see `inspector.formats.vocab`).
    """
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise InputError(path, None, "checkpoint folder not found")
    cfg_path = folder / "config.json"
    parsed = parse_draft_config(cfg_path, read_json(cfg_path))
    weight_file = find_weight_file(folder)
    weights = _canonical_weights(weight_file, parsed.config)
    notes: list[str] = []
    cfg = _settle_config(parsed, weights, weight_file, cfg_path, strict, notes)
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
    chosen = compute_dtype(
        dtype,
        weights["fc.weight"].dtype,
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
        name=folder.name,
        path=str(folder),
        layout=parsed.layout,
        notes=notes,
        stored_vocab=stored,
        stored_dtype=chosen.stored,
        dtype_note=chosen.note,
    )
    return draft.to(device) if str(device) != "cpu" else draft


def _canonical_weights(weight_file: Path, cfg: DraftConfig) -> dict[str, torch.Tensor]:
    """Every stored tensor under its canonical name; the two an EAGLE-3 draft must have."""
    weights: dict[str, torch.Tensor] = {}
    for name, t in read_tensors(weight_file).items():
        canon = canonical_name(name)
        if canon in weights:
            raise InputError(weight_file, name, f"a second tensor named {canon} once renamed")
        weights[canon] = t
    if "fc.weight" not in weights:
        raise InputError(weight_file, "fc.weight", "tensor not found: not an EAGLE-3 draft")
    p = "layers.0.self_attn."
    if cfg.mla is None and p + "kv_a_proj_with_mqa.weight" in weights:
        raise InputError(
            weight_file,
            "midlayer.self_attn.kv_a_proj_with_mqa.weight",
            "MLA attention weights, but config.json has no kv_lora_rank (and the MLA sizes)",
        )
    if cfg.mla is None and any(n in weights for n in _INPUT_PROJ):
        raise InputError(
            weight_file,
            "midlayer.input_proj.proj.weight",
            "SpecForge PR 186's MLA input_proj, but config.json has no kv_lora_rank (and the MLA sizes)",
        )
    if cfg.mla is None and p + "q_proj.weight" not in weights:
        raise InputError(weight_file, "midlayer.self_attn.q_proj.weight", "tensor not found")
    return weights


def _settle_config(
    parsed: ParsedConfig,
    w: dict[str, torch.Tensor],
    wf: Path,
    cfg_path: Path,
    strict: bool,
    notes: list[str],
) -> DraftConfig:
    """The config with what only the weights tell: how many slots fc takes, and (lenient) a
    head_dim the config does not state; features the weights carry turn their flags on."""
    cfg = parsed.config
    h, ht, nh = cfg.hidden_size, cfg.target_hidden_size, cfg.num_heads
    fc = w["fc.weight"]
    if fc.dim() != 2 or fc.shape[0] != h:
        raise InputError(wf, "fc.weight", f"shape {tuple(fc.shape)}, expected [{h}, N*{ht}]")
    if fc.shape[1] % ht or fc.shape[1] == 0:
        raise InputError(
            wf,
            "fc.weight",
            f"{fc.shape[1]} input columns are not a multiple of target_hidden_size {ht}",
        )
    n = fc.shape[1] // ht
    fixed = {
        "num_fc_blocks": n,
        "norm_before_fc": cfg.norm_before_fc or "input_norm.weight" in w,
        "fc_norm": cfg.fc_norm or "fc_norm.0.weight" in w,
    }
    if cfg.mla is not None:  # MLA: no q_proj to settle head_dim against
        mla = replace(cfg.mla, input_proj=_mla_reads_input_proj(cfg, w, wf))
        return replace(cfg, mla=mla, **fixed)
    q = w["layers.0.self_attn.q_proj.weight"]
    if q.dim() != 2 or q.shape[0] % nh:
        raise InputError(wf, "q_proj.weight", f"{tuple(q.shape)}: rows not divisible by {nh} heads")
    hd, hd_from_q = cfg.head_dim, q.shape[0] // nh
    if hd_from_q != hd and not strict and not cfg.head_dim_explicit:
        notes.append(
            f"head_dim absent from config.json: {hd_from_q} taken from q_proj (hidden_size/heads = {hd})"
        )
        hd = hd_from_q
    if hd_from_q != hd:
        key = parsed.layer_prefix + "head_dim"
        where = key if cfg.head_dim_explicit else f"{key} (absent: hidden_size/heads)"
        raise InputError(
            cfg_path,
            where,
            f"is {hd}, but q_proj.weight has {q.shape[0]} = {nh} x {hd_from_q} rows",
        )
    return replace(cfg, head_dim=hd, **fixed)


def _mla_reads_input_proj(cfg: DraftConfig, w: dict[str, torch.Tensor], wf: Path) -> bool:
    """Which MLA layout layer 0 has, from its tensors: SpecForge PR 186's (`input_proj` 2H -> H,
    then MLA on H) or the later one (q_a / kv_a read the 2H concat). A mix is refused."""
    assert cfg.mla is not None
    h = cfg.hidden_size
    a = "layers.0.self_attn."
    first = a + ("q_proj.weight" if cfg.mla.q_lora_rank is None else "q_a_proj.weight")
    in_dims = {
        n: int(w[n].shape[-1])
        for n in (first, a + "kv_a_proj_with_mqa.weight")
        if n in w and w[n].dim() == 2
    }
    if any(n in w for n in _INPUT_PROJ):
        for n, d in in_dims.items():
            if d != h:
                raise InputError(
                    wf,
                    n,
                    f"in-dim {d}, but input_proj is present: SpecForge PR 186's MLA draft, "
                    f"whose attention reads hidden_size {h} (the later MLA draft has no input_proj)",
                )
        return True
    if in_dims and all(d == h for d in in_dims.values()):  # one stray H is a shape fault
        raise InputError(
            wf,
            _INPUT_PROJ[0],
            f"tensor not found, but {', '.join(in_dims)} read hidden_size {h}: SpecForge PR "
            "186's MLA draft, which needs its input_proj (2H -> H) before the attention",
        )
    return False


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
                "absent (SpecForge/SGLang exports drop it): pass --target DIR or --embed FILE",
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
    (an in-dim of H with input_proj present, or absent, is told apart before: `_mla_reads_input_proj`;
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
