"""A block draft's config.json (z-lab's DFlash and DFlash2) -> a `DraftConfig` with its
`BlockConfig` (docs/guides/block-drafts.md): the family, the layer ids (as written, or the
reference's default spread), the block size, the mask token, each layer's causality and window,
the embedding and logit scales, DFlash2's convolution and selector sizes.

The reference reads a draft key from `dflash_config` first, then the same key at the top of the
config: so does this. Every malformed field is one `InputError` naming the file and the key.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from inspector.draft import BlockConfig, DraftConfig
from inspector.engines.vllm import LABEL as VLLM
from inspector.errors import InputError
from inspector.formats.block_dspark import DSPARK_FORWARD_MISSING, SPECFORGE, read_dspark_head
from inspector.formats.block_fields import (
    DecoderFields,
    block_draft_config,
    read_block_size,
    read_mask_token_id,
)
from inspector.formats.block_speculators import (
    parse_speculators_block_config,
    speculators_block_family,
)
from inspector.formats.config import (
    DEFAULT_RMS_NORM_EPS,
    DFLASH_MISSING,
    LAYER_TYPES,
    ConfigReader,
    check_family,
    is_peagle,
    read_rope,
)
from inspector.formats.tensorfiles import read_json

BLOCK_ARCHS = {"DFlashDraftModel": "dflash", "DFlash2DraftModel": "dflash2"}
DRAFT_KEYS = "dflash_config"  # where the reference reads a draft key first, then the top level
DEFAULT_BLOCK_SIZE = 16  # the reference's `block_size` default
# Qwen3Config's head_dim default: a config.json without head_dim gets it, in the reference
# (its config class) and in vLLM alike, whatever hidden_size / heads is.
QWEN3_DEFAULT_HEAD_DIM = 128
SLIDING = "sliding_attention"


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """The default ids of a DFlash draft whose config names none: one per draft layer, spread
    evenly over 1 .. L-3 and rounded half to even (one draft layer: L // 2), in the reference's
    numbering (the draft reads hidden_states[id + 1]).

    Source: the reference implementation's `build_target_layer_ids` (`dflash` 0.1.0,
    `dflash/model.py`); SGLang keeps a copy to guess the ids of configs without
    `target_layer_ids` (and refuses L - 3 < 1). The guess is only the reference's default, not
    what a draft was trained on: for a 64-layer target and 5 draft layers it is
    [1, 16, 31, 46, 61], where Qwen3.8-27B-DFlash2 was trained on [5, 19, 33, 47, 61].
    Written here from the formula, in exact fractions (the reference's float division rounds
    the same for any size a model has).
    """
    if num_target_layers <= 0 or num_draft_layers <= 0:
        raise ValueError("layer counts must be positive")
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    if end < start:
        raise ValueError(f"a {num_target_layers}-layer target leaves no span 1 .. L-3")
    span = end - start
    return [
        round(start + Fraction(i * span, num_draft_layers - 1)) for i in range(num_draft_layers)
    ]


def block_family(config: dict) -> str | None:
    """'dflash', 'dflash2' or 'dspark' when a parsed config.json is a block draft's, else None
    (EAGLE-3, P-EAGLE, and the other families, which the EAGLE-3 loader reads or refuses).

    A speculators config by its `speculators_model_type` ('dflash': `block_speculators`);
    another by `architectures` (the reference's classes), else by a `dflash_config` that is not
    a Domino projector's (SpecForge writes those there too; its DSpark's is 'dspark') in a
    config that is not P-EAGLE's."""
    if not isinstance(config, dict):
        return None
    if config.get("speculators_model_type") is not None:
        return speculators_block_family(config)
    archs = config.get("architectures")
    if isinstance(archs, list):
        for arch in archs:
            if isinstance(arch, str) and arch in BLOCK_ARCHS:
                return BLOCK_ARCHS[arch]
    sub = config.get(DRAFT_KEYS)
    if not isinstance(sub, dict) or is_peagle(ConfigReader(None, config)):
        return None
    if sub.get("projector_type") == "dspark":
        return "dspark"  # SpecForge's DSpark: DFlash's network and keys, a Markov head
    if sub.get("projector_type") == "domino":
        return None
    return "dflash2" if "conv_kernel_size" in sub else "dflash"


def block_draft_family(checkpoint: str | Path | None) -> str | None:
    """'dflash' / 'dflash2' when `checkpoint` is a DFlash folder (its config.json says so), else
    None: what the commands branch on before they load a draft. An unreadable folder is None
    (loading it then names the problem)."""
    if checkpoint is None:
        return None
    folder = Path(checkpoint)
    folder = folder.parent if folder.is_file() else folder
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        return None
    try:
        return block_family(read_json(cfg_path))
    except InputError:
        return None


def refuse_block_draft(checkpoint: str | Path) -> None:
    """The commands' one-line refusal (an InputError naming config.json and the field) when
    `checkpoint` is a DFlash folder: what `load_draft` says, for a caller that reads the folder
    before loading it (the doctor's preflight). Nothing for anything else, an unreadable folder
    included (loading it then names the problem)."""
    folder = Path(checkpoint)
    folder = folder.parent if folder.is_file() else folder
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        return
    try:
        raw = read_json(cfg_path)
    except InputError:
        return
    if block_family(raw) is None:
        return
    check_family(ConfigReader(cfg_path, raw))  # raises for every config block_family names
    raise InputError(cfg_path, "architectures", f"a DFlash draft: {DFLASH_MISSING}")


def refuse_block_forward(checkpoint: str | Path) -> None:
    """One line (an InputError naming config.json and the field that marks it) where
    `checkpoint` is a block draft whose blocks the commands do not run yet (DSpark): what
    `evaluate.block_eval.load_block` says, for the app before it starts. Nothing otherwise."""
    folder = Path(checkpoint)
    folder = folder.parent if folder.is_file() else folder
    cfg_path = folder / "config.json"
    try:
        raw = read_json(cfg_path) if cfg_path.is_file() else None
    except InputError:
        return
    if block_family(raw) != "dspark":  # type: ignore[arg-type]
        return
    assert isinstance(raw, dict)
    marker = (
        "speculators_model_type"
        if speculators_block_family(raw) is not None
        else "dflash_config.projector_type"
    )
    raise InputError(cfg_path, marker, DSPARK_FORWARD_MISSING)


class _DraftValues:
    """The reference's `_draft_value`: a key of `dflash_config`, else the same key at the top;
    errors name where the value was read."""

    def __init__(self, top: ConfigReader) -> None:
        self.top = top
        self.sub = top.sub(DRAFT_KEYS)

    def reader(self, key: str) -> ConfigReader:
        return self.sub if self.sub is not None and self.sub.has(key) else self.top

    def where(self, key: str) -> str:
        return self.reader(key).prefix + key


def _flag_or_none(r: ConfigReader, key: str) -> bool | None:
    return r.flag(key) if r.has(key) else None


def _layer_attention(
    top: ConfigReader, values: _DraftValues, num_layers: int, notes: list[str]
) -> tuple[tuple[bool, ...], tuple[int | None, ...]]:
    """Each draft layer's (causal, window).

    The reference: a layer is `layer_types[i]` (default full attention); `is_causal` when the
    config sets it, else causal exactly where the layer slides; a sliding layer's window is
    `sliding_window` (null: none). Two keys only vLLM 0.32 reads are followed too, with a note:
    `dflash_config.causal` (when `is_causal` is absent) and `dflash_config.use_swa` (every layer
    slides, window `dflash_config.swa_window_size` or `sliding_window`) when no layer slides."""
    types = top.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise top.error("layer_types", "expected a list of strings")
        if len(types) != num_layers:
            raise top.error("layer_types", f"{len(types)} entries for {num_layers} layers")
        for i, t in enumerate(types):
            if t not in LAYER_TYPES:
                raise top.error(
                    "layer_types",
                    f"layer {i} is {t!r}: not supported (only {', '.join(LAYER_TYPES)})",
                )
    kinds = list(types) if types else ["full_attention"] * num_layers
    sub = values.sub
    is_causal = _flag_or_none(top, "is_causal")
    if is_causal is None and sub is not None and sub.has("causal"):
        is_causal = sub.flag("causal")
        notes.append(f"dflash_config.causal read as {VLLM} reads it (the reference ignores it)")
    window = top.positive_int("sliding_window", None)
    if sub is not None and sub.flag("use_swa") and SLIDING not in kinds:
        window = sub.positive_int("swa_window_size", window)
        if window is None:
            raise sub.error("use_swa", "true, but no window: swa_window_size or sliding_window")
        kinds = [SLIDING] * num_layers
        notes.append(f"dflash_config.use_swa read as {VLLM} reads it (the reference ignores it)")
        # vLLM keeps a layer's causality from layer_types, not from use_swa
        causal = tuple(
            is_causal if is_causal is not None else (types is not None and t == SLIDING)
            for t in (types or kinds)
        )
        return causal, tuple(window for _ in kinds)
    causal = tuple(is_causal if is_causal is not None else k == SLIDING for k in kinds)
    return causal, tuple(window if k == SLIDING else None for k in kinds)


# SpecForge's DFlash layers: `dflash_config.attention_mode` (one for every layer) or
# `attention_modes` (one per layer); only its GQA / MHA layers are the reference's.
QWEN3_ATTENTION_MODES = ("gqa", "mha")


def _check_attention_modes(values: _DraftValues, num_layers: int) -> None:
    """Refuse SpecForge's MLA and KDA DFlash layers (other tensors, another attention)."""
    sub = values.sub
    if sub is None:
        return
    for key in ("attention_mode", "attention_modes"):
        v = sub.get(key)
        if v is None:
            continue
        modes = v if isinstance(v, list) else [v]
        for mode in modes:
            if not isinstance(mode, str) or mode.lower() not in QWEN3_ATTENTION_MODES:
                raise sub.error(
                    key, f"{mode!r}: not supported (only {', '.join(QWEN3_ATTENTION_MODES)})"
                )
        if isinstance(v, list) and len(v) != num_layers:
            raise sub.error(key, f"{len(v)} entries for {num_layers} layers")


def _layer_ids(
    values: _DraftValues, num_layers: int, notes: list[str]
) -> tuple[tuple[int, ...], str, int | None]:
    """(ids in the reference's numbering, where they came from, the target's layer count)."""
    top = values.top
    n_target = values.reader("num_target_layers").positive_int("num_target_layers", None)
    key = "target_layer_ids"
    reader = values.reader(key)
    if not reader.has(key):
        if n_target is None:
            raise top.error(
                "dflash_config.target_layer_ids",
                "missing, and no num_target_layers to spread the reference's default over",
            )
        try:
            ids = build_target_layer_ids(n_target, num_layers)
        except ValueError as e:
            raise values.reader("num_target_layers").error("num_target_layers", str(e)) from e
        notes.append(
            f"target_layer_ids absent: the reference's default {ids} for {n_target} target "
            f"layers and {num_layers} draft layers (a trained draft may have used others)"
        )
        return tuple(ids), "default", n_target
    ids_list = reader.int_list(key, 0)
    assert ids_list is not None
    if not ids_list:
        raise reader.error(key, "empty: the draft's fc reads one target layer per id")
    if n_target is not None:
        past = [i for i in ids_list if i >= n_target]
        if past:
            raise reader.error(
                key,
                f"{past[0]} reads hidden_states[{past[0] + 1}], past the target's {n_target} layers",
            )
    eagle_ids = top.get("eagle_aux_hidden_state_layer_ids")
    hf = [i + 1 for i in ids_list]
    if isinstance(eagle_ids, list) and eagle_ids != hf:
        # vLLM 0.32 reads this key first, as HF indices (no +1); the reference never reads it
        notes.append(
            f"eagle_aux_hidden_state_layer_ids {eagle_ids} (what {VLLM} feeds) differs from "
            f"{reader.prefix}{key} + 1 = {hf} (what the reference feeds)"
        )
    return tuple(ids_list), "config", n_target


def parse_block_config(
    path: str | Path, config: dict, family: str
) -> tuple[DraftConfig, list[str]]:
    """Validate a DFlash / DFlash2 config.json (already parsed) into a DraftConfig with its
    BlockConfig, and the notes loading it leaves (keys read as vLLM reads them, a default).
    speculators' layout is read by its own adapter (`block_speculators`)."""
    if speculators_block_family(config) is not None:
        return parse_speculators_block_config(path, config, family)
    notes: list[str] = []
    top = ConfigReader(path, config)
    values = _DraftValues(top)
    h = top.positive_int("hidden_size")
    nh = top.positive_int("num_attention_heads")
    nkv = top.positive_int("num_key_value_heads", nh)
    if nh % nkv:
        raise top.error("num_key_value_heads", f"{nkv} does not divide {nh} heads")
    hd = top.positive_int("head_dim", QWEN3_DEFAULT_HEAD_DIM)
    num_layers = top.positive_int("num_hidden_layers")
    vocab = top.positive_int("vocab_size")
    ids, source, n_target = _layer_ids(values, num_layers, notes)
    mask = read_mask_token_id(
        values.reader("mask_token_id"), vocab, top, "dflash_config.mask_token_id"
    )
    block_size = read_block_size(values.reader("block_size"), DEFAULT_BLOCK_SIZE)
    cap_at = values.reader("final_logit_softcapping")
    cap_at.number("final_logit_softcapping")
    cap = cap_at.get("final_logit_softcapping")
    _check_attention_modes(values, num_layers)
    causal, windows = _layer_attention(top, values, num_layers, notes)
    conv: dict[str, int | None] = dict.fromkeys(
        ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
    )
    if family == "dflash2":
        for key in conv:
            conv[key] = values.reader(key).positive_int(key)
        group = conv["conv_group_size"]
        assert group is not None
        if h % group:
            raise values.reader("conv_group_size").error(
                "conv_group_size", f"{group} does not divide hidden_size {h}"
            )
        if (conv["selector_top_k"] or 0) > vocab:
            raise values.reader("selector_top_k").error(
                "selector_top_k", f"{conv['selector_top_k']} exceeds vocab_size {vocab}"
            )
    dspark: dict[str, object] = {}
    if family == "dspark":
        dspark = read_dspark_head(values.reader, SPECFORGE, h)
        dspark["marker"] = "dflash_config.projector_type"
    block = BlockConfig(
        family=family,
        layer_ids=ids,
        layer_ids_source=source,
        num_target_layers=n_target,
        block_size=block_size,
        mask_token_id=mask,
        causal=causal,
        input_embedding_scale=values.reader("input_embedding_scale").positive_number(
            "input_embedding_scale", 1.0
        ),
        output_multiplier=values.reader("output_multiplier").positive_number(
            "output_multiplier", 1.0
        ),
        # the reference caps only with a positive value
        final_logit_softcapping=float(cap) if cap is not None and float(cap) > 0 else None,  # type: ignore[arg-type]
        **conv,  # type: ignore[arg-type]
        **dspark,  # type: ignore[arg-type]
    )
    decoder = DecoderFields(
        hidden_size=h,
        # vLLM 0.32 sizes fc by target_hidden_size when set; the reference by hidden_size
        target_hidden_size=top.positive_int("target_hidden_size", h),
        num_heads=nh,
        num_kv_heads=nkv,
        head_dim=hd,
        head_dim_explicit=top.has("head_dim"),
        intermediate_size=top.positive_int("intermediate_size"),
        rms_norm_eps=top.positive_number("rms_norm_eps", DEFAULT_RMS_NORM_EPS),
        rope=read_rope(top, top),
        vocab_size=vocab,
        num_layers=num_layers,
    )
    cfg = block_draft_config(decoder, block, windows)
    if top.flag("attention_bias"):
        notes.append("attention_bias: the q/k/v/o biases are read from the weights")
    return cfg, notes
