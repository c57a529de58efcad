"""Detect and load every public EAGLE-3 draft layout into one canonical `Draft`.

- speculators: `speculators_model_type: eagle3`, nested `transformer_layer_config`, `layers.{i}.*`,
  `embed_tokens` saved.
- SpecForge / EAGLE / SGLang: flat LlamaConfig, `midlayer.*` (SGLang exports may add
  `model.` prefixes), `embed_tokens` usually absent: taken from `--embed` or `--target`.
- llama.cpp: one `.gguf` file of arch `eagle3` (`convert_hf_to_gguf.py`), read by
  `inspector.formats.gguf_draft` into the same canonical names, then finished here.

Loading runs in four steps: the config is validated on its own (`inspector.formats.config`), the
weights are read and renamed to canonical names, the config is settled against the weights (fc
blocks, head_dim), and `inspector.formats.draft_assembly` checks every tensor's shape and builds the
`Draft`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import torch

from inspector.draft import Draft, DraftConfig, RopeConfig
from inspector.errors import InputError
from inspector.formats.config import ConfigReader, ParsedConfig, parse_draft_config, read_rope
from inspector.formats.draft_assembly import assemble_draft
from inspector.formats.gguf_draft import load_gguf_draft
from inspector.formats.quantized import dequantize
from inspector.formats.tensorfiles import find_weight_file, read_json, read_tensors

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
    """Load a draft checkpoint folder (config.json + weights), or a llama.cpp EAGLE-3 `.gguf`
    file (`inspector.formats.gguf_draft`), into a canonical Draft.

    dtype None / "auto": the stored floating dtype, except float32 for a half-precision draft on
    a CPU (inspector.formats.compute_dtype); `Draft.stored_dtype` keeps what the file holds.
    strict=False (the doctor) loads two faults it then reports instead of failing, each noted in
    `Draft.notes`: a config without head_dim whose q_proj implies another value than
    hidden_size/heads (head_dim is taken from q_proj), and a d2t/t2d pair that is inconsistent
    or holds absolute ids (see `inspector.formats.vocab`).
    """
    if is_gguf(path):
        return load_gguf_draft(
            path, embed=embed, target=target, dtype=dtype, device=device, strict=strict
        )
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise InputError(path, None, "checkpoint folder not found")
    cfg_path = folder / "config.json"
    raw = read_json(cfg_path)
    parsed = parse_draft_config(cfg_path, raw)
    weight_file = find_weight_file(folder)
    weights = _canonical_weights(weight_file, parsed.config)
    quantization = dequantize(weights, folder, raw, weight_file)  # FP8: scale * weight
    notes: list[str] = []
    cfg = _settle_config(parsed, weights, weight_file, cfg_path, strict, notes)
    return assemble_draft(
        cfg,
        weights,
        weight_file,
        embed=embed,
        target=target,
        dtype=dtype,
        device=device,
        strict=strict,
        notes=notes,
        name=folder.name,
        path=str(folder),
        layout=parsed.layout,
        quantization=quantization,
    )


def is_gguf(path: str | Path) -> bool:
    """Whether a draft path names a GGUF file (by its suffix; a folder never is one)."""
    p = Path(path)
    return p.suffix.lower() == ".gguf" and not p.is_dir()


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
