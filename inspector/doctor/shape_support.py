"""Check: the draft's shape, and whether each engine release serves it.

A draft is no longer always three slots into one Llama layer. The shapes of 2026:

- EAGLE-3.1 means two things. The paper and vLLM: `fc_norm`, one RMSNorm per slot
  (`fc_norm.{i}.weight`), with `norm_output`. speculators first shipped "3.1" as
  `norm_before_fc`, one RMSNorm over the concatenated slots (`input_norm.weight`), with
  `norm_output`, on by default for its Llama drafts; the two flags exclude each other there.
  (`norm_flags` scores which of them the weights were trained with.)
- N != 3 slots (SpecDrift's two, four), a single slot (gpt-oss short-context heads read the
  target's final post-norm state alone), several decoder layers, a Qwen3 decoder layer (q/k
  RMSNorm per head).

Nothing errors when an engine reads such a draft differently: it refuses to load it (the user
sees why), or it runs it without the feature (acceptance drops and nothing says so). `RULES`
holds, per engine release, what its source does with each feature, read from the versions this
project builds and runs (vLLM 0.32.0's CPU wheel, SGLang 0.5.23, llama.cpp 0c1e570 from the
llama-cpp-python 0.3.36 sdist); the ones marked `run` were also served or refused by that engine
here, on drafts of each shape trained on the demo (docs/guides/draft-shapes.md).

Pure: no torch, no files; the config is the raw config.json.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from inspector.doctor.finding import Finding, Kind, Severity


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

    engine: str  # "vLLM 0.32"
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


def _n_key_fix(shape: DraftShape) -> str:
    where = "transformer_layer_config" if shape.speculators else "config.json"
    return f'write "num_aux_hidden_states": {shape.slots} in {where}'


def vllm_032(shape: DraftShape) -> Verdict | None:
    """vLLM 0.32.0: model_executor/models/llama_eagle3.py 179-252 and qwen3_eagle3.py 201-233
    build fc from the draft config; transformers_utils/configs/speculators/algos.py 15-50 maps a
    speculators config (model_type llama or qwen3 only)."""
    if shape.layer == "mla":
        return None  # Eagle3DeepseekV2ForCausalLM: not run here
    src = "vLLM 0.32.0 llama_eagle3.py 209-221, qwen3_eagle3.py 201-213, speculators/algos.py 15-50"
    if shape.layer == "qwen3" and not shape.speculators:
        return None  # a plain config names its own architecture: not run here
    # the Llama class sizes fc from num_aux_hidden_states, else eagle_config's ids, else 3;
    # the Qwen3 class reads the top-level ids too
    order = ["num_aux_hidden_states", "eagle_config"]
    if shape.layer == "qwen3":
        order = ["num_aux_hidden_states", "top", "eagle_config"]
    n = next((shape.n_stated[k] for k in order if k in shape.n_stated), 3)
    if n != shape.slots:
        found = next((k for k in order if k in shape.n_stated), None)
        read = f"{found} gives {n}" if found else "no num_aux_hidden_states, no eagle_config ids"
        return Verdict(
            "vLLM 0.32",
            Support.REFUSES,
            (
                f"it sizes fc for {n} slots ({read}"
                + ("" if "top" in order else "; the top-level ids are not read for this")
                + f") and stops at loading fc.weight, which takes {shape.slots}",
            ),
            _n_key_fix(shape),
            src + " (run)",
        )
    return Verdict("vLLM 0.32", Support.SERVES, source=src + " (run)")


def sglang_0523(shape: DraftShape) -> Verdict | None:
    """SGLang 0.5.23: srt/models/llama_eagle3.py 156-207 (fc, the norms, the layers) and its
    load_weights 325-378, the only EAGLE-3 class for non-MLA drafts. It reads no speculators
    config: such a draft is served from a config in SGLang's layout (flat, the ids under
    eagle_config), which is what the verdict assumes for it."""
    if shape.layer == "mla":
        return None
    src = "SGLang 0.5.23 srt/models/llama_eagle3.py 156-207, 325-378 (run)"
    why: list[str] = []
    if shape.speculators:
        n = shape.slots  # the config in its layout holds the draft's N ids under eagle_config
    else:
        n = shape.n_stated.get("num_aux_hidden_states", shape.n_stated.get("eagle_config", 3))
    if n != shape.slots:
        read = (
            "num_aux_hidden_states"
            if "num_aux_hidden_states" in shape.n_stated
            else "eagle_config's ids"
            if "eagle_config" in shape.n_stated
            else "no eagle_config ids"
        )
        return Verdict(
            "SGLang 0.5.23",
            Support.REFUSES,
            (
                f"it sizes fc for {n} slots ({read}; it never reads the top-level ids) and "
                f"stops at loading fc.weight, which takes {shape.slots}",
            ),
            "write the ids under eagle_config.eagle_aux_hidden_state_layer_ids",
            src,
        )
    dropped: list[Drop] = []
    fixes = []
    if shape.layer == "qwen3":
        dropped.append(Drop.QK_NORMS)
        why.append(
            "its one EAGLE-3 class is a Llama layer, whose load_weights skips q_norm and k_norm "
            "(no such parameters)"
        )
        fixes.append("serve it on vLLM, whose Eagle3Qwen3ForCausalLM applies them")
    if shape.layers > 1 and not shape.later_hidden_norms:
        dropped.append(Drop.LATER_INPUT_NORMS)
        why.append(
            "its layers after the first normalise their input with layers.{i}.hidden_norm, "
            "which this checkpoint does not hold (it names that norm input_layernorm), so a "
            "unit weight stands in for it"
        )
        fixes.append(
            "copy layers.{i}.input_layernorm.weight to layers.{i}.hidden_norm.weight (i >= 1) "
            "in the checkpoint SGLang loads"
        )
    if shape.speculators:
        why.append("served from a config in its own layout, the ids under eagle_config")
    if dropped:
        return Verdict(
            "SGLang 0.5.23",
            Support.DROPS,
            tuple(why),
            "; ".join(fixes),
            src,
            drops=tuple(dropped),
        )
    return Verdict("SGLang 0.5.23", Support.SERVES, tuple(why), source=src)


def llamacpp_0c1e570(shape: DraftShape) -> Verdict | None:
    """llama.cpp 0c1e570 (llama-cpp-python 0.3.36): conversion/llama.py 49-104, 208-262 (what the
    converter detects and maps) and src/models/eagle3.cpp 6-33 (what the graph reads). Each
    refusal below is the message llama.cpp printed here on a draft of that shape."""
    if shape.layer == "mla":
        return None
    src = "llama.cpp 0c1e570 conversion/llama.py 49-104, 208-262, src/models/eagle3.cpp 6-33 (run)"
    why = []
    if shape.layers != 1:  # not taken for EAGLE-3: converted as a plain Llama, which has no d2t
        why.append(
            "its converter takes a draft for EAGLE-3 only with num_hidden_layers 1, and stops "
            "on the rest: \"Can not map tensor 'd2t'\""
        )
    if shape.fc_norm:
        why.append("its converter stops: \"Can not map tensor 'fc_norm.0.weight'\"")
    if shape.layer == "qwen3":
        why.append(
            'its converter stops on the q/k norms: "Can not map tensor '
            "'model.layers.0.self_attn.k_norm.weight'\""
        )
    if shape.slots != 3 and not why:  # reached only past the converter
        why.append(
            'llama-server stops at loading it: "EAGLE3 requires exactly 3 entries in '
            "'extract_layers'\""
        )
    if why:
        fix = "serve it on vLLM" + ("" if shape.layer == "qwen3" else " or SGLang")
        return Verdict("llama.cpp @0c1e570", Support.REFUSES, tuple(why), fix, src)
    if shape.norm_output:
        return Verdict(
            "llama.cpp @0c1e570",
            Support.DROPS,
            (
                "neither its converter nor its graph reads it: every drafting step after the "
                "first is fed the pre-norm output",
            ),
            "serve it on vLLM or SGLang, which apply norm_output",
            src,
            drops=(Drop.NORM_OUTPUT,),
        )
    return Verdict("llama.cpp @0c1e570", Support.SERVES, source=src)


RULES: dict[str, Callable[[DraftShape], Verdict | None]] = {
    "vllm": vllm_032,
    "sglang": sglang_0523,
    "llama.cpp": llamacpp_0c1e570,
}


@dataclass(frozen=True)
class ShapeFacts:
    shape: DraftShape
    verdicts: tuple[Verdict, ...]

    def to_dict(self) -> dict:
        return {"shape": self.shape.to_dict(), "engines": [v.to_dict() for v in self.verdicts]}


def shape_finding(shape: DraftShape, engines: Sequence[str] | None = None) -> Finding | None:
    """The draft's shape and each engine release's verdict on it; None for the classic shape
    (every engine serves it) and where no rule knows the shape. A warning when an engine refuses
    it or runs it without a feature (an error when the user named that engine)."""
    if shape.classic:
        return None
    names = [e for e in RULES if engines is None or e in engines]
    verdicts = tuple(v for e in names if (v := RULES[e](shape)) is not None)
    if not verdicts:
        return None
    off = [v for v in verdicts if v.support is not Support.SERVES]
    severity = Severity.INFO
    if off:
        named = engines is not None and any(v.support is Support.DROPS for v in off)
        severity = Severity.ERROR if named else Severity.WARNING
    summary = f"draft shape: {shape.words()}: " + "; ".join(v.words() for v in verdicts)
    fix = "; ".join(f"{v.engine}: {v.fix}" for v in off if v.fix) or None
    return Finding(Kind.DRAFT_SHAPE, severity, summary, fix, ShapeFacts(shape, verdicts))
