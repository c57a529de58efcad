"""config.json -> a validated `DraftConfig`: every key the inspector reads, typed and range-checked
once, at load, so nothing downstream meets a string where a number belongs.

Two layouts (see docs/formats.md):
- speculators: `speculators_model_type: "eagle3"` with the decoder's keys nested under
  `transformer_layer_config`; draft-level keys (`draft_vocab_size`, `norm_before_residual`,
  `eagle_aux_hidden_state_layer_ids`, ...) at the top.
- EAGLE / SpecForge / SGLang: one flat Llama config; aux layer ids, when present, under
  `eagle_config.eagle_aux_hidden_state_layer_ids` in SGLang's numbering (HF index - 1).

Every error names the file and the key's dotted path, e.g.
`config.json: transformer_layer_config.rope_scaling.factor: expected a positive number, got '8'`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from inspector.draft import DraftConfig, MlaConfig, ParallelConfig, RopeConfig
from inspector.engines.capture import EAGLE_CONFIG, TOP_LEVEL
from inspector.errors import InputError

# The RoPE types the forward pass implements (inspector.model.rope_inv_freq).
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")
DEFAULT_ROPE_THETA = 10000.0  # EAGLE / SpecForge drafts without rope_theta use this
DEFAULT_RMS_NORM_EPS = 1e-6

_MISSING = object()


MAX_INT = 2**40  # far above any real size or id; keeps JSON's unbounded ints out of float math


def _is_number(v: object) -> bool:
    """An int or float that JSON gave us and float arithmetic can use (no bool, no huge int)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    return abs(v) <= MAX_INT if isinstance(v, int) else math.isfinite(v)


def _short(v: object) -> str:
    """A value for an error line: repr, cut to 40 characters (a 10^6-digit int stays one line)."""
    text = (
        repr(v)
        if not isinstance(v, int) or abs(v) <= MAX_INT
        else f"an integer of {v.bit_length()} bits"
    )
    return text if len(text) <= 40 else text[:37] + "..."


class ConfigReader:
    """Typed reads from one JSON object; every error names the file and the key's dotted path."""

    def __init__(self, path: str | Path | None, obj: dict, prefix: str = "") -> None:
        self.path = path
        self.obj = obj
        self.prefix = prefix

    def error(self, key: str, message: str) -> InputError:
        return InputError(self.path, self.prefix + key, message)

    def get(self, key: str, default: object = None) -> object:
        """The raw value; `default` when the key is absent or null."""
        v = self.obj.get(key)
        return default if v is None else v

    def has(self, key: str) -> bool:
        return self.obj.get(key) is not None

    def positive_int(self, key: str, default: object = _MISSING) -> int:
        v = self.obj.get(key)
        if v is None:
            if default is _MISSING:
                raise self.error(key, "missing: expected a positive integer")
            return default  # type: ignore[return-value]
        if not _is_number(v) or int(v) != v or v <= 0:
            raise self.error(key, f"expected a positive integer, got {_short(v)}")
        return int(v)

    def positive_number(
        self, key: str, default: float | None = None, *, above: float = 0.0
    ) -> float:
        """A finite number > `above` (0: positive); `default` when absent (None: required)."""
        what = "a positive number" if above == 0 else f"a number above {above:g}"
        v = self.obj.get(key)
        if v is None:
            if default is None:
                raise self.error(key, f"missing: expected {what}")
            return default
        if not _is_number(v) or v <= above:
            raise self.error(key, f"expected {what}, got {_short(v)}")
        return float(v)

    def number(self, key: str) -> None:
        """Check that an optional key, when present, is a finite number."""
        v = self.obj.get(key)
        if v is not None and not _is_number(v):
            raise self.error(key, f"expected a number, got {_short(v)}")

    def flag(self, key: str, default: bool = False) -> bool:
        v = self.obj.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.error(key, f"expected true or false, got {v!r}")
        return v

    def text(self, key: str, default: str) -> str:
        v = self.obj.get(key)
        if v is None:
            return default
        if not isinstance(v, str):
            raise self.error(key, f"expected a string, got {v!r}")
        return v

    def int_list(self, key: str, minimum: int | None) -> tuple[int, ...] | None:
        """A list of integers (None when absent); `minimum`: the least one allowed (None: any,
        a negative one included, stored as written for the checks that read it)."""
        v = self.obj.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in v
        ):
            raise self.error(key, f"expected a list of integers, got {_short(v)}")
        huge = [i for i in v if abs(i) > MAX_INT]
        if huge:
            raise self.error(key, f"{_short(huge[0])} is no layer index")
        low = [i for i in v if minimum is not None and i < minimum]
        if low:
            raise self.error(key, f"{low[0]} is below {minimum}")
        return tuple(v)

    def sub(self, key: str, *, required: bool = False) -> ConfigReader | None:
        """The nested object at `key` (None when absent or null)."""
        v = self.obj.get(key)
        if v is None:
            if required:
                raise self.error(key, "missing: expected an object")
            return None
        if not isinstance(v, dict):
            raise self.error(key, f"expected an object, got {type(v).__name__}")
        return ConfigReader(self.path, v, f"{self.prefix}{key}.")


@dataclass(frozen=True)
class ParsedConfig:
    """A draft's config.json, validated. `config.num_fc_blocks` and an absent head_dim are
    settled against the weights by the loader."""

    config: DraftConfig
    layout: str  # "speculators" | "specforge"
    layer_prefix: str  # where the decoder's keys live: "transformer_layer_config." or ""


# Draft families that are not EAGLE-3 (their layers, masks or heads differ), by the value of
# speculators_model_type, by an `architectures` entry, or by a key only they write.
OTHER_FAMILIES_BY_KIND = {
    "dflash": "DFlash (block diffusion drafting)",
    "dspark": "DSpark",
    "mtp": "MTP heads",
}
OTHER_FAMILIES_BY_ARCH = {
    "DFlashDraftModel": "DFlash (block diffusion drafting)",
    "DFlash2DraftModel": "DFlash (block diffusion drafting)",
    "DSparkDraftModel": "DSpark",
    "DominoDraftModel": "Domino",
    "MTPDraftModel": "MTP heads",
}
OTHER_FAMILIES_BY_KEY = {
    "dflash_config": "DFlash (block diffusion drafting)",
    "mask_token_id": "P-EAGLE (parallel drafting)",
    "pard_token": "PARD (parallel drafting)",
    "ptd_token_id": "P-EAGLE (parallel drafting)",
}
NOT_EAGLE3 = "not an EAGLE-3 or P-EAGLE draft, which is what this tool runs"
# The one-line refusal of a DFlash draft by the commands that replay EAGLE-3's TTT steps only:
# eval and doctor branch to the block draft's own (evaluate.block_eval, doctor.checks.block_checks).
DFLASH_MISSING = (
    "eval, doctor, accept and the app run block drafts; compare and the other replays do not "
    "yet (docs/guides/block-drafts.md)"
)
# P-EAGLE (docs/peagle.md) is run: speculators marks it by speculators_model_type "peagle" (and
# saves architectures ["PEagleDraftModel"], its class), SpecForge by its class name alone.
PEAGLE_ARCHS = ("PEagleSpeculator", "PEagleDraftModel")
# Where a P-EAGLE config names the token its depth >= 1 slots are fed: speculators writes
# mask_token_id; vLLM reads ptd_token_id (or PARD's pard_token) instead.
PEAGLE_MASK_KEYS = ("mask_token_id", "ptd_token_id", "pard_token")
DEFAULT_PEAGLE_DEPTHS = 8  # both trainers' num_depths default


def _why(family: str) -> str:
    return DFLASH_MISSING if family.startswith(("DFlash", "DSpark")) else NOT_EAGLE3


def is_peagle(top: ConfigReader) -> bool:
    archs = top.get("architectures")
    named = isinstance(archs, list) and any(a in PEAGLE_ARCHS for a in archs)
    return top.get("speculators_model_type") == "peagle" or named


def check_family(top: ConfigReader) -> None:
    """Refuse, in one line naming the field, a draft of another family than EAGLE-3 / P-EAGLE."""
    kind = top.get("speculators_model_type")
    peagle = is_peagle(top)
    if kind is not None and kind not in ("eagle3", "peagle"):
        family = OTHER_FAMILIES_BY_KIND.get(kind) if isinstance(kind, str) else None
        if family is None:
            raise top.error("speculators_model_type", f"{kind!r} is not an EAGLE-3 draft")
        why = _why(family)
        raise top.error("speculators_model_type", f"{kind!r}: a {family} draft, {why}")
    archs = top.get("architectures")
    if isinstance(archs, list):
        for arch in archs:
            family = OTHER_FAMILIES_BY_ARCH.get(arch) if isinstance(arch, str) else None
            if family is None and isinstance(arch, str) and "MTP" in arch:
                family = "MTP heads"
            if family is not None:
                raise top.error("architectures", f"{arch!r}: a {family} draft, {_why(family)}")
    for key, family in OTHER_FAMILIES_BY_KEY.items():
        if peagle and key in PEAGLE_MASK_KEYS:
            continue  # read as the mask token by read_parallel
        if top.has(key):
            if key == "dflash_config":
                sub = top.sub(key)
                projector = sub.get("projector_type") if sub is not None else None
                if projector in ("dspark", "domino"):
                    family = "DSpark" if projector == "dspark" else "Domino"
                    key = "dflash_config.projector_type"
            if key in PEAGLE_MASK_KEYS and family.startswith("P-EAGLE"):
                raise top.error(
                    key,
                    f"marks a {family} draft, but neither speculators_model_type ('peagle') "
                    "nor architectures (PEagleDraftModel) says so",
                )
            raise top.error(key, f"marks a {family} draft, {_why(family)}")
    eagle = top.sub("eagle_config")
    if eagle is not None:
        # ModelOpt's EAGLE-3 variants: only the standard layer arrangement is implemented.
        for key, standard in (
            ("use_input_layernorm_in_first_layer", True),
            ("use_last_layernorm", True),
            ("use_mtp_layernorm", False),
        ):
            if eagle.flag(key, standard) != standard:
                raise eagle.error(
                    key,
                    f"{str(not standard).lower()} is not supported (only {str(standard).lower()})",
                )
        steps = eagle.get("parallel_draft_step", 1)
        if steps != 1:
            raise eagle.error(
                "parallel_draft_step", f"{_short(steps)}: parallel drafting is {NOT_EAGLE3}"
            )


def layer_reader(top: ConfigReader) -> tuple[ConfigReader, str]:
    """The reader for the decoder's keys, and the layout they imply."""
    check_family(top)
    kind = top.get("speculators_model_type")
    if kind is None:
        return top, "specforge"
    inner = top.sub("transformer_layer_config", required=True)
    assert inner is not None
    return inner, "speculators"


def parse_draft_config(path: str | Path, config: dict) -> ParsedConfig:
    """Validate a draft config.json (already parsed) into a DraftConfig."""
    top = ConfigReader(path, config)
    layer, layout = layer_reader(top)
    h = layer.positive_int("hidden_size")
    nh = layer.positive_int("num_attention_heads")
    nkv = layer.positive_int("num_key_value_heads", nh)
    if nh % nkv:
        raise layer.error("num_key_value_heads", f"{nkv} does not divide {nh} heads")
    mla = read_mla(layer)
    head_dim_explicit = layer.has("head_dim") or mla is not None
    if mla is not None:
        hd = mla.qk_head_dim  # the q.k width; MLA drafts carry no usable head_dim
    else:
        hd = layer.positive_int("head_dim") if head_dim_explicit else max(h // nh, 1)
    num_layers = layer.positive_int("num_hidden_layers", 1)
    rope = read_rope(layer, top)
    _check_mrope(rope, mla.qk_rope_head_dim if mla is not None else hd, layer, top)
    vocab = layer.positive_int("vocab_size")
    draft_vocab = _top_or_layer(top, layer, "draft_vocab_size", vocab)
    if draft_vocab > vocab:
        raise (top if top.has("draft_vocab_size") else layer).error(
            "draft_vocab_size", f"{draft_vocab} exceeds vocab_size {vocab}"
        )
    aux_ids, aux_conv = aux_layer_ids(top)
    parallel = read_parallel(top, vocab)
    windows = sliding_windows(layer, num_layers)
    if parallel is not None and any(w is not None for w in windows):
        # speculators' P-EAGLE mask windows only the depth-0 keys (attention.py l.59-63), which
        # is not what our TTT-step window does
        raise layer.error("layer_types", "sliding-window layers in a P-EAGLE draft: not supported")
    cfg = DraftConfig(
        hidden_size=h,
        target_hidden_size=_top_or_layer(top, layer, "target_hidden_size", h),
        num_heads=nh,
        num_kv_heads=nkv,
        head_dim=hd,
        intermediate_size=layer.positive_int("intermediate_size"),
        rms_norm_eps=layer.positive_number("rms_norm_eps", DEFAULT_RMS_NORM_EPS),
        rope=rope,
        vocab_size=vocab,
        draft_vocab_size=draft_vocab,
        num_layers=num_layers,
        norm_before_residual=top.flag("norm_before_residual"),
        norm_before_fc=top.flag("norm_before_fc"),
        # SpecForge's use_aux_norm (aux_norm_low/mid/high) is the same per-slot RMSNorm as
        # Eagle 3.1's fc_norm: the loader maps its tensors onto fc_norm.{0,1,2}.
        fc_norm=top.flag("fc_norm") or top.flag("use_aux_norm"),
        # read from every layout, as vLLM (llama_eagle3.py) and SGLang (llama_eagle3.py) both do
        norm_output=top.flag("norm_output"),
        aux_layer_ids=aux_ids,
        aux_layer_convention=aux_conv,
        source_format=layout,
        head_dim_explicit=head_dim_explicit,
        norm_before_residual_explicit=top.has("norm_before_residual"),
        mla=mla,
        sliding_windows=windows,
        tie_word_embeddings=layer.flag("tie_word_embeddings"),
        parallel=parallel,
    )
    return ParsedConfig(cfg, layout, layer.prefix)


def read_parallel(top: ConfigReader, vocab: int) -> ParallelConfig | None:
    """P-EAGLE's mask token and K, or None for an EAGLE-3 config. SpecForge writes no mask
    token (it resolves one at training time), so its configs need one added by hand."""
    if not is_peagle(top):
        return None
    key = next((k for k in PEAGLE_MASK_KEYS if top.has(k)), None)
    if key is None:
        raise top.error(
            "mask_token_id",
            "missing: a P-EAGLE draft's depth >= 1 slots are fed this token (SpecForge does "
            "not save it: add the id it trained with)",
        )
    mask = top.get(key)
    if not _is_number(mask) or int(mask) != mask or not 0 <= mask < vocab:  # type: ignore[operator]
        raise top.error(key, f"expected a token id in [0, {vocab}), got {_short(mask)}")
    depths = DEFAULT_PEAGLE_DEPTHS
    spec = top.sub("speculators_config")
    methods = spec.get("proposal_methods") if spec is not None else None
    if isinstance(methods, list) and methods and isinstance(methods[0], dict):
        first = ConfigReader(top.path, methods[0], "speculators_config.proposal_methods[0].")
        depths = first.positive_int("speculative_tokens", DEFAULT_PEAGLE_DEPTHS)
    return ParallelConfig(mask_token_id=int(mask), num_depths=depths)  # type: ignore[arg-type]


def read_mla(layer: ConfigReader) -> MlaConfig | None:
    """MLA attention sizes (DeepSeek-V2/V3 and Kimi K2 drafts), when `kv_lora_rank` says so."""
    if not layer.has("kv_lora_rank"):
        return None
    rope = layer.positive_int("qk_rope_head_dim")
    if rope % 2:
        raise layer.error("qk_rope_head_dim", f"{rope} is odd: RoPE rotates pairs of dims")
    return MlaConfig(
        q_lora_rank=layer.positive_int("q_lora_rank", None),  # type: ignore[arg-type]
        kv_lora_rank=layer.positive_int("kv_lora_rank"),
        qk_nope_head_dim=layer.positive_int("qk_nope_head_dim"),
        qk_rope_head_dim=rope,
        v_head_dim=layer.positive_int("v_head_dim"),
        rope_interleave=layer.flag("rope_interleave", True),
    )


LAYER_TYPES = ("full_attention", "sliding_attention")


def sliding_windows(layer: ConfigReader, num_layers: int) -> tuple[int | None, ...]:
    """Each decoder layer's window: `layer_types` says which layers slide (transformers'
    convention), `sliding_window` how far, `use_sliding_window: false` turns windows off (Qwen
    configs carry a window they never use). A Llama layer ignores a bare `sliding_window`."""
    types = layer.get("layer_types")
    use = layer.flag("use_sliding_window", True)
    if types is None:
        if layer.obj.get("use_sliding_window") is True:
            raise layer.error(
                "use_sliding_window",
                "true without layer_types: which draft layers slide is not said (not supported)",
            )
        return ()
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise layer.error("layer_types", f"expected a list of strings, got {_short(types)}")
    if len(types) != num_layers:
        raise layer.error("layer_types", f"{len(types)} entries for {num_layers} layers")
    for i, t in enumerate(types):
        if t not in LAYER_TYPES:
            raise layer.error(
                "layer_types", f"layer {i} is {t!r}: not supported (only {', '.join(LAYER_TYPES)})"
            )
    if not use or "sliding_attention" not in types:
        return ()
    window = layer.positive_int("sliding_window")
    return tuple(window if t == "sliding_attention" else None for t in types)


def _check_mrope(rope: RopeConfig, rope_dim: int, layer: ConfigReader, top: ConfigReader) -> None:
    """M-RoPE (Qwen2.5-VL / Qwen3-VL drafts) splits the rotary pairs into sections for the
    temporal, height and width position ids. For text positions the three ids are equal, so any
    split is plain RoPE: the sections only have to cover the head's pairs."""
    section = rope.scaling.get("mrope_section")
    if section is None:
        return
    where = layer.sub("rope_scaling") or top.sub("rope_scaling") or layer.sub("rope_parameters")
    assert where is not None
    if not isinstance(section, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in section
    ):
        raise where.error(
            "mrope_section", f"expected a list of positive integers, got {_short(section)}"
        )
    if sum(section) != rope_dim // 2:
        raise where.error(
            "mrope_section",
            f"sums to {sum(section)}, but a head has {rope_dim // 2} rotary pairs (head_dim {rope_dim})",
        )
    where.flag("mrope_interleaved")


def _top_or_layer(top: ConfigReader, layer: ConfigReader, key: str, default: int) -> int:
    if top.has(key):
        return top.positive_int(key)
    return layer.positive_int(key, default)


def aux_layer_ids(top: ConfigReader) -> tuple[tuple[int, ...] | None, str | None]:
    """The aux layer ids a config names and their numbering: top-level ids are HF
    `hidden_states` indices; `eagle_config` ids are SGLang's (HF index - 1, so -1 is the
    embedding). Stored as written, a repeated or negative id included: which layers each engine
    then feeds is the doctor's finding (`doctor.checks.malformed_ids`), not a load error."""
    ids = top.int_list("eagle_aux_hidden_state_layer_ids", None)
    if ids is not None:
        return ids, TOP_LEVEL
    eagle = top.sub("eagle_config")
    if eagle is not None:
        ids = eagle.int_list("eagle_aux_hidden_state_layer_ids", None)
        if ids is not None:
            return ids, EAGLE_CONFIG
    return None, None


def read_rope(layer: ConfigReader, top: ConfigReader) -> RopeConfig:
    """The draft's RoPE settings, from `rope_parameters` (transformers >= 4.56) or `rope_theta` +
    `rope_scaling` (older), in the decoder's keys or at the top; validated for the forward."""
    params = layer.sub("rope_parameters")
    legacy = layer.sub("rope_scaling") or top.sub("rope_scaling")
    theta_at = layer if layer.has("rope_theta") else top
    if params is not None and params.has("rope_theta"):
        theta_at = params
    # theta is the base of the frequencies' geometric series: 1 or below gives no rotation at
    # all (and a division by log(theta) in yarn).
    theta = theta_at.positive_number("rope_theta", DEFAULT_ROPE_THETA, above=1.0)
    source = params
    if params is None or (_rope_kind(params) == "default" and legacy is not None):
        source = legacy
    if source is None:
        return RopeConfig(theta=theta)
    kind = _rope_kind(source)
    type_key = "rope_type" if source.has("rope_type") else "type"
    if kind == "mrope":
        # M-RoPE is default RoPE whose pairs take their position from one of three ids; a text
        # sample's ids are equal (checked against head_dim by the caller).
        kind = "default"
    if kind not in ROPE_TYPES:
        raise source.error(type_key, f"unknown RoPE type {kind!r} (known: {', '.join(ROPE_TYPES)})")
    _check_scaling(source, kind)
    scaling = {k: v for k, v in source.obj.items() if k not in ("rope_theta", "rope_type", "type")}
    return RopeConfig(theta=theta, rope_type=kind, scaling=scaling)


def _rope_kind(r: ConfigReader) -> str:
    return r.text("rope_type", r.text("type", "default"))


def _check_scaling(r: ConfigReader, kind: str) -> None:
    if kind in ("llama3", "yarn"):
        r.positive_number("factor")  # required
    elif r.has("factor"):
        r.positive_number("factor")
    for key in (
        "low_freq_factor",
        "high_freq_factor",
        "beta_fast",
        "beta_slow",
        "attention_factor",
    ):
        if r.has(key):
            r.positive_number(key)
    for key in ("mscale", "mscale_all_dim"):
        r.number(key)
    if r.has("original_max_position_embeddings"):
        r.positive_int("original_max_position_embeddings")
