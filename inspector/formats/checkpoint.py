"""Detect and load every public EAGLE-3 draft layout into one canonical `Draft`.

- speculators: `speculators_model_type: eagle3`, nested `transformer_layer_config`, `layers.{i}.*`,
  `embed_tokens` saved.
- SpecForge / EAGLE / SGLang: flat LlamaConfig, `midlayer.*` (SGLang exports may add
  `model.` prefixes), `embed_tokens` usually absent: taken from `--embed` or `--target`.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from inspector.draft import Draft, DraftConfig, RopeConfig, VocabMap
from inspector.errors import InputError
from inspector.formats.target import read_embedding
from inspector.formats.tensorfiles import find_weight_file, read_json, read_tensors

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def _layer_config(config: dict) -> tuple[dict, str]:
    if config.get("speculators_model_type") is not None:
        if config["speculators_model_type"] != "eagle3":
            raise InputError(
                None,
                "speculators_model_type",
                f"{config['speculators_model_type']!r} is not an EAGLE-3 draft",
            )
        inner = config.get("transformer_layer_config")
        if not isinstance(inner, dict):
            raise InputError(None, "transformer_layer_config", "missing or not an object")
        return inner, "speculators"
    return config, "specforge"


def rope_config(layer_cfg: dict, top: dict) -> RopeConfig:
    params = layer_cfg.get("rope_parameters")
    legacy_scaling = layer_cfg.get("rope_scaling") or top.get("rope_scaling")
    theta = layer_cfg.get("rope_theta", top.get("rope_theta"))
    if isinstance(params, dict):
        theta = params.get("rope_theta", theta)
        kind = params.get("rope_type", params.get("type", "default"))
        scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "rope_type", "type")}
        if kind == "default" and isinstance(legacy_scaling, dict):
            kind = legacy_scaling.get("rope_type", legacy_scaling.get("type", "default"))
            scaling = dict(legacy_scaling)
    elif isinstance(legacy_scaling, dict):
        kind = legacy_scaling.get("rope_type", legacy_scaling.get("type", "default"))
        scaling = {k: v for k, v in legacy_scaling.items() if k not in ("rope_type", "type")}
    else:
        kind, scaling = "default", {}
    # EAGLE / SpecForge configs without rope_theta use 10000 (not the target's theta).
    return RopeConfig(
        theta=float(theta if theta is not None else 10000.0), rope_type=kind, scaling=scaling
    )


_PREFIXES = (
    (re.compile(r"^(?:model\.)?midlayer\."), "layers.0."),
    (re.compile(r"^(?:model\.)?additional_layers\.(\d+)\."), None),
    (re.compile(r"^model\.layers\."), "layers."),
    (re.compile(r"^model\.(?=(fc|norm|embed_tokens|lm_head|input_norm|fc_norm|d2t|t2d)\b)"), ""),
)


def canonical_name(name: str) -> str:
    """Map every layout's tensor name onto the canonical `layers.{i}.*` names."""
    for pattern, repl in _PREFIXES:
        m = pattern.match(name)
        if not m:
            continue
        if repl is None:  # SGLang additional_layers.i -> layers.{i+1}
            return f"layers.{int(m.group(1)) + 1}." + name[m.end() :]
        return repl + name[m.end() :]
    return name


def _int(cfg: dict, key: str, path: Path, default: int | None = None) -> int:
    v = cfg.get(key, default)
    if v is None or isinstance(v, bool) or not isinstance(v, int | float) or int(v) != v or v <= 0:
        raise InputError(path, key, f"expected a positive integer, got {v!r}")
    return int(v)


def _check_shape(
    path: Path, name: str, t: torch.Tensor, shape: tuple[int, ...], why: str = ""
) -> None:
    if tuple(t.shape) != shape:
        extra = f" ({why})" if why else ""
        raise InputError(path, name, f"shape {tuple(t.shape)}, expected {shape}{extra}")


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

    dtype None / "auto" keeps the stored floating dtype.
    strict=False (the doctor) loads two faults it then reports instead of failing, each noted in
    `Draft.notes`: a config without head_dim whose q_proj implies another value than
    hidden_size/heads (head_dim is taken from q_proj), and a d2t/t2d pair that is inconsistent
    or holds absolute ids (see `_vocab_map`).
    """
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise InputError(path, None, "checkpoint folder not found")
    cfg_path = folder / "config.json"
    config = read_json(cfg_path)
    try:
        layer_cfg, layout = _layer_config(config)
    except InputError as e:
        raise InputError(cfg_path, e.field, e.message) from None

    weight_file = find_weight_file(folder)
    raw = read_tensors(weight_file)
    weights: dict[str, torch.Tensor] = {}
    for name, t in raw.items():
        weights[canonical_name(name)] = t
    if "fc.weight" not in weights:
        raise InputError(weight_file, "fc.weight", "tensor not found: not an EAGLE-3 draft")
    if "layers.0.self_attn.q_proj.weight" not in weights:
        raise InputError(weight_file, "midlayer.self_attn.q_proj.weight", "tensor not found")

    h = _int(layer_cfg, "hidden_size", cfg_path)
    nh = _int(layer_cfg, "num_attention_heads", cfg_path)
    nkv = _int(layer_cfg, "num_key_value_heads", cfg_path, nh)
    if nh % nkv:
        raise InputError(cfg_path, "num_key_value_heads", f"{nkv} does not divide {nh} heads")
    head_dim_explicit = layer_cfg.get("head_dim") is not None
    hd = _int(layer_cfg, "head_dim", cfg_path) if head_dim_explicit else h // nh
    inter = _int(layer_cfg, "intermediate_size", cfg_path)
    vocab = _int(layer_cfg, "vocab_size", cfg_path)
    draft_vocab = config.get("draft_vocab_size") or layer_cfg.get("draft_vocab_size") or vocab
    ht = config.get("target_hidden_size") or layer_cfg.get("target_hidden_size") or h
    num_layers = _int(layer_cfg, "num_hidden_layers", cfg_path, 1)

    fc = weights["fc.weight"]
    if fc.dim() != 2 or fc.shape[0] != h:
        raise InputError(
            weight_file, "fc.weight", f"shape {tuple(fc.shape)}, expected [{h}, N*{ht}]"
        )
    if fc.shape[1] % ht:
        raise InputError(
            weight_file,
            "fc.weight",
            f"{fc.shape[1]} input columns are not a multiple of target_hidden_size {ht}",
        )
    n_blocks = fc.shape[1] // ht

    q = weights["layers.0.self_attn.q_proj.weight"]
    if q.shape[0] % nh:
        raise InputError(
            weight_file, "q_proj.weight", f"{q.shape[0]} rows not divisible by {nh} heads"
        )
    hd_from_q = q.shape[0] // nh
    notes: list[str] = []
    if hd_from_q != hd and not strict and not head_dim_explicit:
        notes.append(
            f"head_dim absent from config.json: {hd_from_q} taken from q_proj (hidden_size/heads = {hd})"
        )
        hd = hd_from_q
    if hd_from_q != hd:
        where = "head_dim" if head_dim_explicit else "head_dim (absent: hidden_size/heads)"
        raise InputError(
            cfg_path,
            where,
            f"is {hd}, but q_proj.weight has {q.shape[0]} = {nh} x {hd_from_q} rows",
        )

    aux_ids = config.get("eagle_aux_hidden_state_layer_ids")
    aux_conv = "hf" if aux_ids is not None else None
    eagle_cfg = config.get("eagle_config")
    if aux_ids is None and isinstance(eagle_cfg, dict):
        aux_ids = eagle_cfg.get("eagle_aux_hidden_state_layer_ids")
        aux_conv = "sglang" if aux_ids is not None else None

    cfg = DraftConfig(
        hidden_size=h,
        target_hidden_size=int(ht),
        num_heads=nh,
        num_kv_heads=nkv,
        head_dim=hd,
        intermediate_size=inter,
        rms_norm_eps=float(layer_cfg.get("rms_norm_eps", 1e-6)),
        rope=rope_config(layer_cfg, config),
        vocab_size=vocab,
        draft_vocab_size=int(draft_vocab),
        num_layers=num_layers,
        num_fc_blocks=n_blocks,
        norm_before_residual=bool(config.get("norm_before_residual", False)),
        norm_before_fc=bool(config.get("norm_before_fc", False)) or "input_norm.weight" in weights,
        fc_norm=bool(config.get("fc_norm", False)) or "fc_norm.0.weight" in weights,
        norm_output=bool(config.get("norm_output", False)) and layout == "speculators",
        aux_layer_ids=tuple(int(i) for i in aux_ids) if isinstance(aux_ids, list) else None,
        aux_layer_convention=aux_conv,
        source_format=layout,
        head_dim_explicit=head_dim_explicit,
    )

    # The embedding: saved (speculators), or from --embed / --target.
    if embed is not None:
        weights["embed_tokens.weight"] = read_embedding(Path(embed))
        notes.append(f"embedding from {embed}")
    elif "embed_tokens.weight" not in weights:
        if target is None:
            raise InputError(
                weight_file,
                "embed_tokens.weight",
                "absent (SpecForge/SGLang exports drop it): pass --target DIR or --embed FILE",
            )
        weights["embed_tokens.weight"] = read_embedding(Path(target))
        notes.append(f"embedding from target {target}")

    _validate(cfg, weights, weight_file, cfg_path)
    vocab_map = _vocab_map(cfg, weights, weight_file, strict=strict, notes=notes)

    target_dtype = _resolve_dtype(dtype, weights["fc.weight"].dtype)
    weights = {
        k: (v.to(target_dtype) if v.is_floating_point() else v)
        for k, v in weights.items()
        if k not in ("d2t", "t2d")
    }
    draft = Draft(
        config=cfg,
        weights=weights,
        vocab=vocab_map,
        name=folder.name,
        path=str(folder),
        layout=layout,
        notes=notes,
    )
    return draft.to(device) if str(device) != "cpu" else draft


def _resolve_dtype(dtype: str | torch.dtype | None, stored: torch.dtype) -> torch.dtype:
    if dtype is None or dtype == "auto":
        return stored
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise InputError(
            None, "--dtype", f"unknown dtype {dtype!r} (auto, float32, bfloat16, float16)"
        )
    return DTYPES[dtype]


def _validate(cfg: DraftConfig, w: dict[str, torch.Tensor], wf: Path, cfg_path: Path) -> None:
    h, hd, nh, nkv = cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        in_dim = 2 * h if i == 0 else h
        expect = {
            "self_attn.q_proj.weight": (nh * hd, in_dim),
            "self_attn.k_proj.weight": (nkv * hd, in_dim),
            "self_attn.v_proj.weight": (nkv * hd, in_dim),
            "self_attn.o_proj.weight": (h, nh * hd),
            "mlp.gate_proj.weight": (cfg.intermediate_size, h),
            "mlp.up_proj.weight": (cfg.intermediate_size, h),
            "mlp.down_proj.weight": (h, cfg.intermediate_size),
            "input_layernorm.weight": (h,),
            "post_attention_layernorm.weight": (h,),
        }
        if i == 0:
            expect["hidden_norm.weight"] = (h,)
        for name, shape in expect.items():
            if p + name not in w:
                if i > 0 and name == "input_layernorm.weight" and p + "hidden_norm.weight" in w:
                    # SGLang's extra layers use hidden_norm as their input norm.
                    w[p + name] = w[p + "hidden_norm.weight"]
                    continue
                raise InputError(wf, p + name, "tensor not found")
            _check_shape(wf, p + name, w[p + name], shape)
    for name, shape in {
        "norm.weight": (h,),
        "lm_head.weight": (cfg.draft_vocab_size, h),
        "embed_tokens.weight": (cfg.vocab_size, h),
    }.items():
        if name not in w:
            raise InputError(wf, name, "tensor not found")
        why = "draft_vocab_size" if name == "lm_head.weight" else ""
        _check_shape(wf, name, w[name], shape, why)
    if cfg.norm_before_fc:
        _check_shape(
            wf,
            "input_norm.weight",
            w["input_norm.weight"],
            (cfg.num_fc_blocks * cfg.target_hidden_size,),
        )
    if cfg.fc_norm:
        for i in range(cfg.num_fc_blocks):
            if f"fc_norm.{i}.weight" not in w:
                raise InputError(wf, f"fc_norm.{i}.weight", "tensor not found (fc_norm is set)")
    for name, t in w.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise InputError(wf, name, "contains NaN or Inf")


def _vocab_map(
    cfg: DraftConfig,
    w: dict[str, torch.Tensor],
    wf: Path,
    *,
    strict: bool = True,
    notes: list[str] | None = None,
) -> VocabMap:
    """The VocabMap from d2t (offsets) and t2d, validated.

    Lenient (strict=False): d2t equal to nonzero(t2d), or out of range as offsets but valid as ids,
    is read as absolute ids; a t2d that disagrees with a valid d2t is rebuilt from d2t (the
    engines read d2t only). What was done is appended to `notes`.
    """
    d, v = cfg.draft_vocab_size, cfg.vocab_size
    if not strict and w.get("d2t") is not None:
        lenient = _lenient_vocab(w["d2t"], w.get("t2d"), d, v, notes if notes is not None else [])
        if lenient is not None:
            return lenient
    d2t, t2d = w.get("d2t"), w.get("t2d")
    if d2t is None and t2d is None:
        if d != v:
            raise InputError(wf, "d2t", f"absent but draft_vocab_size {d} != vocab_size {v}")
        return VocabMap.identity(v)
    if d2t is None:
        raise InputError(wf, "d2t", "absent while t2d is present")
    d2t = d2t.long().flatten()
    if d2t.numel() != d:
        raise InputError(wf, "d2t", f"has {d2t.numel()} entries, expected draft_vocab_size {d}")
    target_ids = torch.arange(d) + d2t
    if int(target_ids.min()) < 0 or int(target_ids.max()) >= v:
        raise InputError(
            wf,
            "d2t",
            f"maps draft ids to target ids outside [0, {v}) (offsets expected: target = draft + d2t)",
        )
    if t2d is None:
        t2d = torch.zeros(v, dtype=torch.bool)
        t2d[target_ids] = True
    t2d = t2d.flatten().bool()
    if t2d.numel() != v:
        raise InputError(wf, "t2d", f"has {t2d.numel()} entries, expected vocab_size {v}")
    if int(t2d.sum()) != d:
        raise InputError(wf, "t2d", f"marks {int(t2d.sum())} tokens, expected draft_vocab_size {d}")
    if not torch.equal(t2d.nonzero().flatten(), target_ids):
        raise InputError(wf, "d2t", "disagrees with t2d: nonzero(t2d) != arange(D) + d2t")
    return VocabMap(d2t=d2t, t2d=t2d)


def _lenient_vocab(
    d2t: torch.Tensor, t2d: torch.Tensor | None, d: int, v: int, notes: list[str]
) -> VocabMap | None:
    """A usable VocabMap from a faulty d2t/t2d, or None to fall back to the strict checks."""
    d2t = d2t.long().flatten()
    if d2t.numel() != d:
        return None
    mask = t2d.flatten().bool() if t2d is not None and t2d.numel() == v else None
    ids_from_t2d = mask.nonzero().flatten() if mask is not None else None
    as_offsets = torch.arange(d) + d2t
    offsets_ok = (
        bool(((as_offsets >= 0) & (as_offsets < v)).all()) and as_offsets.unique().numel() == d
    )
    absolute_ok = bool(((d2t >= 0) & (d2t < v)).all()) and d2t.unique().numel() == d
    if offsets_ok and (ids_from_t2d is None or torch.equal(ids_from_t2d, as_offsets)):
        return None  # consistent offsets: the strict path accepts them
    if absolute_ok and (
        (ids_from_t2d is not None and torch.equal(ids_from_t2d, d2t)) or not offsets_ok
    ):
        notes.append("d2t holds absolute target ids, not offsets: read as ids")
        target_ids = d2t
    elif offsets_ok:
        notes.append("t2d disagrees with d2t: rebuilt from d2t (engines read d2t only)")
        target_ids = as_offsets
    else:
        return None
    new_t2d = torch.zeros(v, dtype=torch.bool)
    new_t2d[target_ids] = True
    return VocabMap(d2t=target_ids - torch.arange(d), t2d=new_t2d)
