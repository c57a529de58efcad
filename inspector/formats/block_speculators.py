"""speculators' own block-draft layout (`speculators_model_type: "dflash"`, and `"dspark"`: the
same with DSpark's keys, `block_dspark`) -> the canonical `DraftConfig` with its `BlockConfig`
(docs/guides/block-drafts.md, *speculators' DFlash*).

speculators (0.9.0: `speculators.models.dflash`, `DFlashSpeculatorConfig` and
`DFlashDraftModel`) trains the reference's network under other keys, so only the config differs:

- the decoder's keys (a Qwen3 config, serialized by transformers' `to_diff_dict`: a key equal to
  Qwen3Config's default may be absent) sit under `transformer_layer_config`;
- `aux_hidden_state_layer_ids` are HF hidden_states indices (the reference's ids + 1: its
  converter writes `i + 1` for each z-lab id), `block_size` defaults to 8, `mask_token_id` is
  required, `draft_vocab_size` defaults to 32000;
- attention: a full layer is bidirectional; a sliding layer is causal unless
  `sliding_window_non_causal`, and its window (`sliding_window`, kept only with
  `use_sliding_window`, as Qwen3Config does) is measured from the block's anchor over the
  context keys only (`create_anchor_block_mask_mod`): `BlockConfig.window_from_anchor`;
- `sample_from_anchor: true` (row 0 drafts too, `BlockConfig.anchor_drafts`) is another slot
  convention than the reference's.

The tensors are the reference's (`fc`, `hidden_norm`, `layers.{i}.*`, `norm`); the embedding is
the target's, and so is the head of a full-vocabulary draft (speculators reloads both from the
verifier). Every malformed field is one `InputError` naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path

from inspector.draft import BlockConfig, DraftConfig
from inspector.formats.block_dspark import SPECULATORS, read_dspark_head
from inspector.formats.block_fields import (
    DecoderFields,
    block_draft_config,
    read_block_size,
    read_mask_token_id,
)
from inspector.formats.config import LAYER_TYPES, ConfigReader, read_rope

# speculators_model_type -> the block family the forward runs
SPECULATORS_BLOCK_KINDS = {"dflash": "dflash", "dspark": "dspark"}
LAYER_KEY = "transformer_layer_config"
SPECULATORS_LAYOUT = "speculators"
# DFlashSpeculatorConfig's defaults (speculators 0.9.0, models/dflash/config.py)
DEFAULT_BLOCK_SIZE = 8
DEFAULT_DRAFT_VOCAB = 32000
# Qwen3Config's defaults (transformers 5.15.0, configuration_qwen3.py): `to_diff_dict` leaves out
# a key equal to them, and speculators rebuilds the config with them.
QWEN3_DEFAULTS: dict[str, object] = {
    "vocab_size": 151936,
    "hidden_size": 4096,
    "intermediate_size": 22016,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "head_dim": 128,
    "rms_norm_eps": 1e-6,
    "use_sliding_window": False,
    "sliding_window": 4096,
    "max_window_layers": 28,
}
SLIDING = "sliding_attention"
# training-only tensors speculators never saves (0.9.0), dropped if an older save holds them
TRAINING_ONLY = ("verifier_norm.weight", "verifier_lm_head.weight")


def speculators_block_family(config: object) -> str | None:
    """The block family of a speculators config.json ('dflash'), else None."""
    if not isinstance(config, dict):
        return None
    kind = config.get("speculators_model_type")
    return SPECULATORS_BLOCK_KINDS.get(kind) if isinstance(kind, str) else None


class _Layer:
    """The decoder's keys under `transformer_layer_config`, with Qwen3Config's defaults where a
    key is absent (only for a `qwen3` config: another model type's defaults are its own, so its
    keys are required)."""

    def __init__(self, top: ConfigReader) -> None:
        inner = top.sub(LAYER_KEY, required=True)
        assert inner is not None
        self.r = inner
        model_type = inner.get("model_type", "qwen3")
        self.defaults: dict[str, object] = QWEN3_DEFAULTS if model_type == "qwen3" else {}


def _int(layer: _Layer, key: str) -> int:
    if key in layer.defaults:
        return layer.r.positive_int(key, layer.defaults[key])
    return layer.r.positive_int(key)


def _attention(
    top: ConfigReader, layer: _Layer, num_layers: int
) -> tuple[tuple[bool, ...], tuple[int | None, ...]]:
    """Each layer's (causal, window) as speculators' `DFlashDraftModel` builds its masks."""
    r = layer.r
    use_swa = r.flag("use_sliding_window", bool(layer.defaults.get("use_sliding_window")))
    window = None
    if use_swa:
        window = r.positive_int("sliding_window", layer.defaults.get("sliding_window"))
    types = r.get("layer_types")
    if types is None:
        first = r.get("max_window_layers", layer.defaults.get("max_window_layers", 0))
        if isinstance(first, bool) or not isinstance(first, int):
            raise r.error("max_window_layers", f"expected an integer, got {first!r}")
        types = [
            SLIDING if window is not None and i >= first else "full_attention"
            for i in range(num_layers)
        ]
    elif not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise r.error("layer_types", "expected a list of strings")
    elif len(types) != num_layers:
        raise r.error("layer_types", f"{len(types)} entries for {num_layers} layers")
    for i, t in enumerate(types):
        if t not in LAYER_TYPES:
            raise r.error(
                "layer_types", f"layer {i} is {t!r}: not supported ({', '.join(LAYER_TYPES)})"
            )
    non_causal = top.flag("sliding_window_non_causal")
    # a sliding layer without a window (use_sliding_window false) gets speculators' full mask
    sliding = [t == SLIDING and window is not None for t in types]
    causal = tuple(s and not non_causal for s in sliding)
    return causal, tuple(window if s else None for s in sliding)


def parse_speculators_block_config(
    path: str | Path, config: dict, family: str
) -> tuple[DraftConfig, list[str]]:
    """Validate speculators' DFlash config.json (already parsed) into a DraftConfig with its
    BlockConfig, and the notes loading it leaves."""
    notes: list[str] = []
    top = ConfigReader(path, config)
    layer = _Layer(top)
    r = layer.r
    h = _int(layer, "hidden_size")
    nh = _int(layer, "num_attention_heads")
    nkv = r.positive_int("num_key_value_heads", nh)
    if nh % nkv:
        raise r.error("num_key_value_heads", f"{nkv} does not divide {nh} heads")
    hd = _int(layer, "head_dim")
    num_layers = _int(layer, "num_hidden_layers")
    vocab = _int(layer, "vocab_size")
    if r.flag("attention_bias"):
        notes.append("attention_bias: the q/k/v/o biases are read from the weights")
    rope = r.sub("rope_parameters")
    if rope is not None and any(isinstance(v, dict) for v in rope.obj.values()):
        raise r.error(
            "rope_parameters", "one set per layer type: not read yet (one rope_type/rope_theta)"
        )
    draft_vocab = top.positive_int("draft_vocab_size", DEFAULT_DRAFT_VOCAB)
    if draft_vocab != vocab:
        absent = "" if top.has("draft_vocab_size") else " (absent: speculators' default)"
        raise top.error(
            "draft_vocab_size",
            f"{draft_vocab}{absent}, but the target's vocab_size is {vocab}: a reduced draft "
            "vocabulary (d2t/t2d) in a block draft is not read yet",
        )
    aux = top.int_list("aux_hidden_state_layer_ids", 0)
    if not aux:
        raise top.error(
            "aux_hidden_state_layer_ids",
            "missing or empty: the draft's fc reads one target layer per id",
        )
    mask = read_mask_token_id(top, vocab, top, "mask_token_id")
    block_size = read_block_size(top, DEFAULT_BLOCK_SIZE)
    causal, windows = _attention(top, layer, num_layers)
    block = BlockConfig(
        family=family,
        # the reference's numbering (it reads hidden_states[id + 1]): the HF index - 1
        layer_ids=tuple(i - 1 for i in aux),
        layer_ids_source="config",
        num_target_layers=None,
        block_size=block_size,
        mask_token_id=mask,
        causal=causal,
        window_from_anchor=True,
        ids_key="aux_hidden_state_layer_ids",
        ids_offset=1,
        marker="speculators_model_type",
        # DFlash: sample_from_anchor (default false) chooses the slots; DSpark: its head's keys
        **(
            read_dspark_head(lambda key: top, SPECULATORS, h)
            if family == "dspark"
            else {"anchor_drafts": top.flag("sample_from_anchor")}
        ),  # type: ignore[arg-type]
    )
    decoder = DecoderFields(
        hidden_size=h,
        target_hidden_size=top.positive_int("target_hidden_size", h),
        num_heads=nh,
        num_kv_heads=nkv,
        head_dim=hd,
        head_dim_explicit=r.has("head_dim"),
        intermediate_size=_int(layer, "intermediate_size"),
        rms_norm_eps=r.positive_number("rms_norm_eps", float(QWEN3_DEFAULTS["rms_norm_eps"])),  # type: ignore[arg-type]
        rope=read_rope(r, r),
        vocab_size=vocab,
        num_layers=num_layers,
    )
    cfg = block_draft_config(decoder, block, windows)
    return cfg, notes


def reader_view(config: dict) -> dict:
    """The keys a reader of the reference's layout finds in a speculators DFlash config once a
    serving engine's speculators loader has flattened it: the decoder's keys on top, the aux ids
    as written under `eagle_aux_hidden_state_layer_ids` (HF indices) and, minus one, under
    `dflash_config.target_layer_ids`; `speculators_config` is kept, so a reader that does not
    load the speculators layout still says so. Any other config is returned as it is."""
    if speculators_block_family(config) is None:
        return config
    inner = config.get(LAYER_KEY)
    view = dict(inner) if isinstance(inner, dict) else {}
    view |= {k: v for k, v in config.items() if k != LAYER_KEY}
    view.setdefault("speculators_config", {})
    aux = config.get("aux_hidden_state_layer_ids")
    if isinstance(aux, list) and all(isinstance(i, int) for i in aux):
        view["eagle_aux_hidden_state_layer_ids"] = list(aux)
        view["dflash_config"] = {
            "target_layer_ids": [i - 1 for i in aux],
            "mask_token_id": config.get("mask_token_id"),
        }
    return view
