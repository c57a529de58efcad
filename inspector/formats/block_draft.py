"""A block draft's folder (z-lab's DFlash and DFlash2, speculators' DFlash) -> the canonical
`Draft` with its `BlockConfig` (docs/guides/block-drafts.md; the config is read by
`block_config`, speculators' by `block_speculators`: the tensors are the same).

z-lab's layout is what the reference's `save_pretrained` writes: config.json (a Qwen3 config
with `architectures: ["DFlashDraftModel"]` or `["DFlash2DraftModel"]` and the draft's keys in
`dflash_config`) and model.safetensors with `fc`, `hidden_norm`, `layers.{i}.*` (Qwen3 layers:
per-head q/k norms) and `norm`; no embedding and no head: both are the target's. Also read: the
tensor names vLLM 0.32 maps (`model.` prefixes, `midlayer.`, Muse-Glimmer's `encoder.fc.` and
`encoder.output_norm_enc.`), DFlash2's selector codebooks saved without `.weight` (as
released), and vLLM's optional `mask_embedding.pt` (a tensor, or {"embedding",
"mask_token_id"}) that replaces the mask token's embedding row.

Every malformed field is one `InputError` naming the file and the field.
"""

from __future__ import annotations

from pathlib import Path

import torch

from inspector.draft import Draft, DraftConfig, StoredVocab, VocabMap
from inspector.engines.vllm import LABEL as VLLM
from inspector.errors import InputError
from inspector.formats.block_config import (
    QWEN3_DEFAULT_HEAD_DIM,
    block_family,
    build_target_layer_ids,
    parse_block_config,
    refuse_block_draft,
)
from inspector.formats.block_speculators import (
    SPECULATORS_LAYOUT,
    TRAINING_ONLY,
    speculators_block_family,
)
from inspector.formats.compute_dtype import compute_dtype
from inspector.formats.files import check_regular
from inspector.formats.quantized import FP8
from inspector.formats.target_tensors import read_embedding, read_target_lm_head
from inspector.formats.tensorfiles import (
    find_weight_file,
    load_torch_file,
    read_json,
    read_tensors,
)
from inspector.memory import available_host_bytes

__all__ = [
    "block_family",
    "build_target_layer_ids",
    "canonical_block_name",
    "load_block_draft",
    "parse_block_config",
    "refuse_block_draft",
]

MASK_EMBEDDING_FILE = "mask_embedding.pt"  # vLLM 0.32's optional override of the mask row
# Canonical names of the tensors other layouts name otherwise (vLLM 0.32's WeightsMapper).
_RENAMES = (
    ("encoder.output_norm_enc.", "hidden_norm."),
    ("encoder.fc.", "fc."),
    ("midlayer.", "layers.0."),
)
_CODEBOOKS = ("candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook")


# the scales of a quantized checkpoint (formats.quantized): refused, like the FP8 weights
_SCALE_SUFFIXES = ("_scale", "_scale_inv")


def canonical_block_name(name: str) -> str:
    """A stored tensor name as the canonical draft names it."""
    bare = name.removeprefix("model.")
    for old, new in _RENAMES:
        if bare.startswith(old):
            bare = new + bare[len(old) :]
    if bare in _CODEBOOKS:  # the released DFlash2 files name them without ".weight"
        bare += ".weight"
    return bare


def _layer_shapes(cfg: DraftConfig, i: int) -> dict[str, tuple[int, ...]]:
    h, hd, nh, nkv, inter = (
        cfg.hidden_size,
        cfg.head_dim,
        cfg.num_heads,
        cfg.num_kv_heads,
        cfg.intermediate_size,
    )
    p = f"layers.{i}."
    shapes: dict[str, tuple[int, ...]] = {
        p + "self_attn.q_proj.weight": (nh * hd, h),
        p + "self_attn.k_proj.weight": (nkv * hd, h),
        p + "self_attn.v_proj.weight": (nkv * hd, h),
        p + "self_attn.o_proj.weight": (h, nh * hd),
        p + "self_attn.q_norm.weight": (hd,),
        p + "self_attn.k_norm.weight": (hd,),
        p + "mlp.gate_proj.weight": (inter, h),
        p + "mlp.up_proj.weight": (inter, h),
        p + "mlp.down_proj.weight": (h, inter),
        p + "input_layernorm.weight": (h,),
        p + "post_attention_layernorm.weight": (h,),
    }
    block = cfg.block
    assert block is not None
    if block.family == "dflash2":
        k, g = block.conv_kernel_size, block.conv_group_size
        assert k is not None and g is not None
        for conv in ("attention_conv", "mlp_conv"):
            shapes[f"{p}{conv}.base_kernel"] = (2, k, h)
            shapes[f"{p}{conv}.kernel_projection.weight"] = (2 * k * (h // g), h)
    return shapes


def _expected_shapes(cfg: DraftConfig) -> dict[str, tuple[int, ...]]:
    h = cfg.hidden_size
    shapes: dict[str, tuple[int, ...]] = {
        "fc.weight": (h, cfg.num_fc_blocks * cfg.target_hidden_size),
        "hidden_norm.weight": (h,),
        "norm.weight": (h,),
        "embed_tokens.weight": (cfg.vocab_size, h),
        "lm_head.weight": (cfg.vocab_size, h),
    }
    for i in range(cfg.num_layers):
        shapes |= _layer_shapes(cfg, i)
    block = cfg.block
    assert block is not None
    if block.family == "dflash2":
        r = block.selector_rank
        assert r is not None
        shapes |= {
            "candidate_selector.predecessor_codebook.weight": (cfg.vocab_size, r),
            "candidate_selector.successor_codebook.weight": (cfg.vocab_size, r),
            "candidate_selector.hidden_projection.weight": (r, h),
        }
    if block.markov_rank:  # DSpark's Markov head: W1 [V, r] (an embedding), W2 r -> V
        r = block.markov_rank
        shapes |= {
            "markov_head.markov_w1.weight": (cfg.vocab_size, r),
            "markov_head.markov_w2.weight": (cfg.vocab_size, r),
        }
        if block.markov_head_type == "gated":
            shapes |= {
                "markov_head.gate_proj.weight": (r, h + r),
                "markov_head.gate_proj.bias": (r,),
            }
    return shapes


def _optional_dspark(cfg: DraftConfig) -> dict[str, tuple[int, ...]]:
    """DSpark's confidence head: read where saved (the engines drop it where it is not), never
    run (it only predicts each draft's acceptance)."""
    width = cfg.block.confidence_input if cfg.block is not None else None
    if not width:
        return {}
    return {"confidence_head.proj.weight": (1, width), "confidence_head.proj.bias": (1,)}


def _why(name: str, cfg: DraftConfig) -> str:
    if name == "fc.weight":
        assert cfg.block is not None
        return (
            f" ({len(cfg.block.layer_ids)} target_layer_ids x target hidden "
            f"{cfg.target_hidden_size} input columns)"
        )
    if name.endswith("q_proj.weight") and not cfg.head_dim_explicit:
        return f" (head_dim absent: Qwen3Config's default {QWEN3_DEFAULT_HEAD_DIM})"
    return ""


def _validate(cfg: DraftConfig, w: dict[str, torch.Tensor], wf: Path) -> None:
    """Every tensor the block forward reads: present, of its shape, floating, finite."""
    optional = {}
    for i in range(cfg.num_layers):
        a = f"layers.{i}.self_attn."
        hd, nh, nkv = cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
        optional |= {
            a + "q_proj.bias": (nh * hd,),
            a + "k_proj.bias": (nkv * hd,),
            a + "v_proj.bias": (nkv * hd,),
            a + "o_proj.bias": (cfg.hidden_size,),
        }
    optional["mask_embedding"] = (cfg.hidden_size,)
    optional |= _optional_dspark(cfg)
    for name, shape in _expected_shapes(cfg).items():
        if name not in w:
            raise InputError(wf, name, "tensor not found")
        _check(wf, name, w[name], shape, _why(name, cfg))
    for name, shape in optional.items():
        if name in w:
            _check(wf, name, w[name], shape, "")
    known = set(_expected_shapes(cfg)) | set(optional)
    unknown = sorted(set(w) - known)
    if unknown:
        raise InputError(wf, unknown[0], "not a tensor of this block draft's layout")
    for name, t in w.items():
        if not bool(torch.isfinite(t).all()):
            raise InputError(wf, name, "contains NaN or Inf")


def _check(wf: Path, name: str, t: torch.Tensor, shape: tuple[int, ...], why: str) -> None:
    if tuple(t.shape) != shape:
        raise InputError(wf, name, f"shape {tuple(t.shape)}, expected {shape}{why}")
    if not t.is_floating_point():
        raise InputError(wf, name, f"dtype {t.dtype}, expected a floating type")


def _mask_embedding(folder: Path, mask_token_id: int) -> torch.Tensor | None:
    """vLLM 0.32's `mask_embedding.pt` beside the weights: a tensor, or a dict whose
    "embedding" replaces the mask token's embedding row (its "mask_token_id", when given, must
    be the config's); None when the file is absent."""
    path = folder / MASK_EMBEDDING_FILE
    if not path.exists():
        return None
    check_regular(path)
    state = load_torch_file(path)
    if isinstance(state, dict):
        if state.get("mask_token_id", mask_token_id) != mask_token_id:
            raise InputError(
                path,
                "mask_token_id",
                f"{state.get('mask_token_id')!r}, but config.json's is {mask_token_id}",
            )
        state = state.get("embedding")
    if not isinstance(state, torch.Tensor):
        raise InputError(path, "embedding", "expected a tensor (or a dict with one)")
    return state.reshape(-1)


def _layout_name(family: str, speculators: bool) -> str:
    if speculators:
        return SPECULATORS_LAYOUT
    return "SpecForge" if family == "dspark" else "z-lab"


def load_block_draft(
    path: str | Path,
    *,
    embed: str | Path | None = None,
    target: str | Path | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
) -> Draft:
    """Load a DFlash / DFlash2 checkpoint folder into a canonical Draft (`config.block` set).

    The embedding and the head are the target's: `embed` (a file or folder holding
    `model.embed_tokens.weight`) or the `target` folder gives the embedding, the target folder
    the head (its embedding when tied); a draft that ships `embed_tokens` / `lm_head` (vLLM 0.32
    loads them when present) uses its own where no target is given.
    """
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise InputError(path, None, "checkpoint folder not found")
    cfg_path = folder / "config.json"
    raw = read_json(cfg_path)
    family = block_family(raw)
    if family is None:
        raise InputError(
            cfg_path, "architectures", "not a DFlash draft (DFlashDraftModel, DFlash2DraftModel)"
        )
    cfg, notes = parse_block_config(cfg_path, raw, family)
    speculators = speculators_block_family(raw) is not None
    # whose code loads this layout, in the notes: the reference's, or speculators' own
    trainer = SPECULATORS_LAYOUT if speculators else "the reference"
    weight_file = find_weight_file(folder)
    weights: dict[str, torch.Tensor] = {}
    stored = read_tensors(weight_file)
    if speculators:
        stored = {n: t for n, t in stored.items() if n not in TRAINING_ONLY}
    quantized = [n for n, t in stored.items() if t.dtype in FP8]
    quantized += [n for n in stored if n.endswith(_SCALE_SUFFIXES)]
    if quantized:  # the FP8 weight first: it is what would load as raw codes
        name = quantized[0]
        what = (
            f"dtype {stored[name].dtype}" if stored[name].dtype in FP8 else "a quantization scale"
        )
        raise InputError(
            weight_file,
            name,
            f"{what}: an FP8 block draft is not read (block drafts are read unquantized)",
        )
    for name, t in stored.items():
        canon = canonical_block_name(name)
        if canon in weights:
            raise InputError(weight_file, name, f"a second tensor named {canon} once renamed")
        weights[canon] = t
    for name in ("d2t", "t2d"):
        if name in weights:
            raise InputError(
                weight_file,
                name,
                "a draft-vocab map: not supported in a block draft (the "
                "reference predicts over the target's vocab)",
            )
    fc = weights.get("fc.weight")
    if (
        fc is not None
        and fc.dim() == 2
        and fc.shape[1] != cfg.num_fc_blocks * cfg.target_hidden_size
    ):
        raise InputError(
            weight_file,
            "fc.weight",
            f"{fc.shape[1]} input columns, but {cfg.num_fc_blocks} target_layer_ids x "
            f"{cfg.target_hidden_size} = {cfg.num_fc_blocks * cfg.target_hidden_size}",
        )
    shape = (cfg.vocab_size, cfg.hidden_size)
    if embed is not None or target is not None:
        source = embed if embed is not None else target
        assert source is not None
        if "embed_tokens.weight" in weights:
            notes.append(
                f"embed_tokens.weight stored in the draft: the target's is used, as {trainer} does"
            )
        weights["embed_tokens.weight"] = read_embedding(Path(source), shape)
        notes.append(f"embedding from {source}")
    elif "embed_tokens.weight" not in weights:
        raise InputError(
            weight_file,
            "embed_tokens.weight",
            "absent (a DFlash draft embeds with the target's): pass --target DIR or --embed FILE",
        )
    if target is not None:
        if "lm_head.weight" in weights:
            notes.append(
                f"lm_head.weight stored in the draft: the target's is used, as {trainer} does"
            )
        weights["lm_head.weight"] = read_target_lm_head(Path(target))
        notes.append(f"lm_head from target {target}")
    elif "lm_head.weight" not in weights:
        raise InputError(
            weight_file,
            "lm_head.weight",
            "absent (a DFlash draft predicts with the target's head): pass --target DIR",
        )
    assert cfg.block is not None
    mask_row = _mask_embedding(folder, cfg.block.mask_token_id)
    if mask_row is not None:
        weights["mask_embedding"] = mask_row
        notes.append(
            f"{MASK_EMBEDDING_FILE}: the mask token's embedding row replaced, as {VLLM} does"
        )
    _validate(cfg, weights, weight_file)
    chosen = compute_dtype(
        dtype,
        weights["fc.weight"].dtype,
        device=device,
        float_bytes=sum(v.nbytes for v in weights.values() if v.is_floating_point()),
        available=available_host_bytes(),
    )
    draft = Draft(
        config=cfg,
        weights={k: v.to(chosen.dtype).contiguous() for k, v in weights.items()},
        vocab=VocabMap.identity(cfg.vocab_size),
        name=folder.name,
        path=str(folder),
        layout=f"{family} ({_layout_name(family, speculators)})",
        notes=notes,
        stored_vocab=StoredVocab(None, None),
        stored_dtype=chosen.stored,
        dtype_note=chosen.note,
    )
    return draft.to(device) if str(device) != "cpu" else draft
