"""A draft's shape as engines tell drafts apart, and one engine release's verdict on it.

A draft is no longer always three slots into one Llama layer. The shapes of 2026:

- EAGLE-3.1 means two things. The paper and vLLM: `fc_norm`, one RMSNorm per slot
  (`fc_norm.{i}.weight`), with `norm_output`. speculators first shipped "3.1" as
  `norm_before_fc`, one RMSNorm over the concatenated slots (`input_norm.weight`), with
  `norm_output`, on by default for its Llama drafts; the two flags exclude each other there.
- N != 3 slots (SpecDrift's two, four), a single slot (gpt-oss short-context heads read the
  target's final post-norm state alone), several decoder layers, a Qwen3 decoder layer (q/k
  RMSNorm per head).

Nothing errors when an engine reads such a draft differently: it refuses to load it (the user
sees why), or it runs it without the feature (acceptance drops and nothing says so). Each engine's
module holds its rule (`ServingEngine.shape_rule`), read from the release this project builds and
runs; the doctor's `shape_support` turns the verdicts into a finding.

Pure: no torch, no files; the config is the raw config.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Drop(StrEnum):
    """A feature an engine runs a draft without (`draft_shape.without_dropped` removes it)."""

    QK_NORMS = "its q/k norms"
    LATER_INPUT_NORMS = "the input norms of layers 1 and up"
    NORM_OUTPUT = "norm_output"


class Support(StrEnum):
    SERVES = "serves"
    REFUSES = "refuses"  # errors at conversion or load: the user sees it
    DROPS = "runs without"  # loads and runs without the feature: nothing says so


@dataclass(frozen=True)
class DraftShape:
    """What a draft is, as far as engines tell drafts apart."""

    slots: int  # fc blocks, N
    layers: int
    layer: str  # "llama" | "qwen3" (q/k norms) | "mla"
    fc_norm: bool
    norm_before_fc: bool
    norm_output: bool
    speculators: bool  # a speculators-layout config (transformer_layer_config)
    # layers.{i}.hidden_norm.weight stored for every layer i >= 1 (SGLang's name for their input
    # norm; speculators and vLLM call it input_layernorm)
    later_hidden_norms: bool = False
    # where config.json states N: "num_aux_hidden_states" (the draft's own config as the engine
    # builds it), "eagle_config" (the nested ids), "top" (the top-level ids)
    n_stated: Mapping[str, int] = field(default_factory=dict)

    @property
    def classic(self) -> bool:
        """Three slots into one Llama layer, no optional norm: what every engine serves."""
        return (
            self.slots == 3
            and self.layers == 1
            and self.layer == "llama"
            and not (self.fc_norm or self.norm_before_fc or self.norm_output)
        )

    @property
    def variant(self) -> str:
        if self.fc_norm:
            return "EAGLE-3.1 as the paper and vLLM mean it (fc_norm: one RMSNorm per slot)"
        if self.norm_before_fc and self.norm_output:
            return (
                "EAGLE-3.1 as speculators first shipped it (norm_before_fc: one RMSNorm over "
                "the concatenated slots)"
            )
        if self.norm_before_fc:
            return "EAGLE-3 with norm_before_fc (one RMSNorm over the concatenated slots)"
        return "EAGLE-3"

    def words(self) -> str:
        parts = [self.variant]
        if self.norm_output:
            parts.append("norm_output")
        parts.append(f"{self.slots} slot{'s' if self.slots != 1 else ''}")
        parts.append(f"{self.layers} decoder layer{'s' if self.layers != 1 else ''}")
        parts.append({"qwen3": "Qwen3 layer (q/k norms)", "mla": "MLA layer"}.get(self.layer, ""))
        return ", ".join(p for p in parts if p)

    def to_dict(self) -> dict:
        return {
            "variant": self.variant,
            "slots": self.slots,
            "layers": self.layers,
            "layer": self.layer,
            "fc_norm": self.fc_norm,
            "norm_before_fc": self.norm_before_fc,
            "norm_output": self.norm_output,
            "speculators": self.speculators,
            "n_stated": dict(self.n_stated),
        }


def _ids(v: object) -> list | None:
    return v if isinstance(v, list) and v else None


def shape_of(
    raw: Mapping,
    *,
    slots: int,
    layers: int,
    qk_norm: bool,
    mla: bool,
    flags: Mapping[str, bool],
    later_hidden_norms: bool = False,
) -> DraftShape:
    """The shape of a draft from its raw config.json and what its loader found (`flags`: the
    norm flags as config.json states them)."""
    layer_cfg = raw.get("transformer_layer_config")
    speculators = isinstance(layer_cfg, Mapping)
    built = layer_cfg if speculators else raw  # the config the engines build the model from
    eagle = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), Mapping) else {}
    stated: dict[str, int] = {}
    if isinstance(built.get("num_aux_hidden_states"), int):
        stated["num_aux_hidden_states"] = built["num_aux_hidden_states"]
    if _ids(eagle.get("eagle_aux_hidden_state_layer_ids")):
        stated["eagle_config"] = len(eagle["eagle_aux_hidden_state_layer_ids"])
    if _ids(raw.get("eagle_aux_hidden_state_layer_ids")):
        stated["top"] = len(raw["eagle_aux_hidden_state_layer_ids"])
    return DraftShape(
        slots=slots,
        layers=layers,
        layer="mla" if mla else "qwen3" if qk_norm else "llama",
        fc_norm=bool(flags.get("fc_norm")),
        norm_before_fc=bool(flags.get("norm_before_fc")),
        norm_output=bool(flags.get("norm_output")),
        speculators=speculators,
        n_stated=stated,
        later_hidden_norms=later_hidden_norms,
    )


@dataclass(frozen=True)
class Verdict:
    """One engine release on one draft: serves it, refuses it, or runs it without something."""

    engine: str  # the release as a report names it: "vLLM 0.32"
    support: Support
    why: tuple[str, ...] = ()
    fix: str | None = None
    source: str = ""
    drops: tuple[Drop, ...] = ()  # what it runs the draft without (DROPS)

    @property
    def dropped(self) -> str:
        return " and ".join(self.drops)

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "support": str(self.support),
            "why": list(self.why),
            "fix": self.fix,
            "source": self.source,
            "dropped": self.dropped or None,
        }

    def words(self) -> str:
        if self.support is Support.SERVES:
            return f"{self.engine} serves it" + (f" ({'; '.join(self.why)})" if self.why else "")
        if self.support is Support.DROPS:
            return f"{self.engine} runs it without {self.dropped} ({'; '.join(self.why)})"
        return f"{self.engine} refuses it ({'; '.join(self.why)})"


def n_key_fix(shape: DraftShape) -> str:
    """The fix for an engine that sizes fc from `num_aux_hidden_states`."""
    where = "transformer_layer_config" if shape.speculators else "config.json"
    return f'write "num_aux_hidden_states": {shape.slots} in {where}'
