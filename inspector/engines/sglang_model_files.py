"""How SGLang reads `eagle_config.eagle_aux_hidden_state_layer_ids`, per target model class.

SGLang hands the draft's ids to the *target's* model file: `set_eagle3_layers_to_capture(ids)`
sets `model.layers_to_capture`, and the model captures `hidden + residual` at the input of each
decoder layer i listed there, which is HF index i (`output_hidden_states[i]`; 0 = embedding).
Whether the ids get +1 on the way is each model file's own rule, read from SGLang 0.5.23:

- most files add 1 to every explicit id ("for the ith layer, it takes the output of the (i-1)th
  layer as aux hidden state"), so id = HF index - 1 and -1 is the embedding: Llama
  (srt/models/llama.py; Mistral, Phi-3, InternLM3 and Llama 4 inherit or delegate to
  it), Qwen2/Qwen3 and their MoE, Next and VL files, Gemma 3/4, GLM-4 MoE, GLM-5 Next, Apertus,
  Bailing MoE, EXAONE MoE, LongCat-Flash, MiniMax-M2/M3;
- DeepSeek-V2/V3 (srt/models/deepseek_v2.py; DeepSeek-V3.2, GLM MoE DSA, Mistral
  Large 3 and Kimi K2.5 inherit or delegate to it) and GLM-4 MoE Lite (glm4_moe_lite.py)
  add 1 only when the first id is 1, else read the ids as HF indices;
- gpt-oss (gpt_oss.py) adds 1 unless the largest id equals `num_hidden_layers`, and
  also captures HF L, the last layer's output before the final norm (708-737).

`SGLANG_ID_RULES` is that table, one row per model file, keyed by the class names SGLang
registers (its `EntryClass`, which a target's config.json names in `architectures`) and, where
the mapping is plain, the config's `model_type`. A class not in it is read both ways
(`READINGS`): the ids each rule would need are given side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inspector.engines.sglang import LABEL
from inspector.engines.target_class import target_class

EVERY = "every"  # +1 to every explicit id
FIRST_IS_ONE = "first-is-1"  # +1 only when the first id is 1
UNLESS_LAST = "unless-last"  # +1 unless the largest id is num_hidden_layers

RULE_WORDS = {
    EVERY: "SGLang adds 1 to every id",
    FIRST_IS_ONE: "SGLang adds 1 only when the first id is 1",
    UNLESS_LAST: "SGLang adds 1 unless the largest id is the layer count",
}


def captured(rule: str, ids: Sequence[int], num_layers: int | None = None) -> list[int] | None:
    """The HF indices SGLang sets to capture for explicit `ids` under `rule` (None: the rule
    needs the target's layer count, not known)."""
    if rule == EVERY:
        return [i + 1 for i in ids]
    if rule == FIRST_IS_ONE:
        return [i + 1 for i in ids] if ids and ids[0] == 1 else list(ids)
    if not ids:
        return []
    if num_layers is None:
        return None
    return list(ids) if max(ids) == num_layers else [i + 1 for i in ids]


def ids_for(rule: str, hf: Sequence[int]) -> list[int] | None:
    """The ids that make SGLang capture HF indices `hf` (ascending) under `rule`, None when no
    list does. Where several lists do, the one every rule reads alike (HF index - 1)."""
    hf = list(hf)
    if not hf:
        return None
    if rule in (EVERY, UNLESS_LAST):
        # gpt-oss: the largest id, HF max - 1, is below the layer count, so the +1 applies
        return [k - 1 for k in hf]
    if hf[0] == 2:  # [1, ...] triggers the +1: HF index - 1, as every other file reads it
        return [k - 1 for k in hf]
    if hf[0] == 1:  # as HF indices the list starts with 1 and gets +1; as k - 1, with 0
        return None
    return hf


@dataclass(frozen=True)
class SglangIdRule:
    """One SGLang model file's `set_eagle3_layers_to_capture`: the rule it applies to explicit
    ids, the classes it serves, and where it is (SGLang 0.5.23, path under `sglang/`)."""

    family: str  # "Llama"
    rule: str  # EVERY | FIRST_IS_ONE | UNLESS_LAST
    source: str  # "srt/models/llama.py"
    architectures: tuple[str, ...]
    model_types: tuple[str, ...] = ()
    captures_last: bool = False  # HF L (the last layer's pre-norm output) is captured too

    @property
    def words(self) -> str:
        return RULE_WORDS[self.rule]

    def captured(self, ids: Sequence[int], num_layers: int | None = None) -> list[int] | None:
        """The HF indices SGLang sets to capture for explicit `ids` (see `captured`)."""
        return captured(self.rule, ids, num_layers)

    def ids_for(self, hf: Sequence[int]) -> list[int] | None:
        """The ids that make SGLang capture HF indices `hf` (see `ids_for`)."""
        return ids_for(self.rule, hf)

    def to_dict(self) -> dict:
        return {
            "family": self.family,
            "rule": self.rule,
            "words": self.words,
            "source": f"{LABEL} {self.source}",
        }


# SGLang 0.5.23's model files with `set_eagle3_layers_to_capture`, and the registered classes
# that reach each one (defined there, inherited, or a multimodal wrapper delegating to its
# language model). Draft-side classes (…Eagle, …NextN, …MTP) are left out: they are not targets.
SGLANG_ID_RULES: tuple[SglangIdRule, ...] = (
    SglangIdRule(
        "Llama",
        EVERY,
        "srt/models/llama.py 929-941",
        (
            "LlamaForCausalLM",
            "MistralForCausalLM",  # mistral.py, a LlamaForCausalLM
            "Ministral3ForCausalLM",  # ministral3.py
            "Phi3ForCausalLM",  # llama.py
            "InternLM3ForCausalLM",  # llama.py
            "IQuestCoderForCausalLM",  # llama.py
            "TeleFLMForCausalLM",  # teleflm.py
            "Llama4ForCausalLM",  # llama4.py, a LlamaForCausalLM
            "Llama4ForConditionalGeneration",  # mllama4.py, to its Llama4ForCausalLM
        ),
        ("llama", "mistral", "phi3", "llama4", "llama4_text"),
    ),
    SglangIdRule("Qwen2", EVERY, "srt/models/qwen2.py 781-794", ("Qwen2ForCausalLM",), ("qwen2",)),
    SglangIdRule(
        "Qwen2-MoE",
        EVERY,
        "srt/models/qwen2_moe.py 1418-1433",
        ("Qwen2MoeForCausalLM",),
        ("qwen2_moe",),
    ),
    SglangIdRule(
        "Qwen2.5-VL",
        EVERY,
        "srt/models/qwen2_5_vl.py 990-1001",
        ("Qwen2_5_VLForConditionalGeneration",),
        ("qwen2_5_vl",),
    ),
    SglangIdRule("Qwen3", EVERY, "srt/models/qwen3.py 778-791", ("Qwen3ForCausalLM",), ("qwen3",)),
    SglangIdRule(
        "Qwen3-MoE",
        EVERY,
        "srt/models/qwen3_moe.py 1128-1143",
        ("Qwen3MoeForCausalLM", "MellumForCausalLM"),
        ("qwen3_moe",),
    ),
    SglangIdRule(
        "Qwen3-Next",
        EVERY,
        "srt/models/qwen3_next.py 1286-1301",
        ("Qwen3NextForCausalLM",),
        ("qwen3_next",),
    ),
    SglangIdRule(
        "Qwen3.5",
        EVERY,
        "srt/models/qwen3_5_text.py 150-159",
        ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"),
    ),
    SglangIdRule(
        "Qwen3-VL",
        EVERY,
        "srt/models/qwen3_vl.py 1777-1795",
        (
            "Qwen3VLForConditionalGeneration",
            "Qwen3VLMoeForConditionalGeneration",
            "Qwen3_5ForConditionalGeneration",
            "Qwen3_5MoeForConditionalGeneration",
            "Qwen4ExpForConditionalGeneration",
            "Cosmos3ForConditionalGeneration",
            "InternS1ProForConditionalGeneration",
            "InternS2MobiusForConditionalGeneration",
            "InternS2PreviewForConditionalGeneration",
        ),
        ("qwen3_vl", "qwen3_vl_moe"),
    ),
    SglangIdRule(
        "Gemma 3",
        EVERY,
        "srt/models/gemma3_causal.py 917-926",
        (
            "Gemma3ForCausalLM",
            "Gemma3ForConditionalGeneration",  # gemma3_mm.py, to its Gemma3ForCausalLM
        ),
        ("gemma3_text", "gemma3"),
    ),
    SglangIdRule(
        "Gemma 4",
        EVERY,
        "srt/models/gemma4_causal.py 1495-1504",
        ("Gemma4ForCausalLM",),
    ),
    SglangIdRule(
        "Gemma 4 (multimodal)",
        EVERY,
        "srt/models/gemma4_mm.py 1155-1168",
        ("Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration"),
    ),
    SglangIdRule(
        "GLM-4 MoE",
        EVERY,
        "srt/models/glm4_moe.py 1269-1281",
        ("Glm4MoeForCausalLM",),
        ("glm4_moe",),
    ),
    SglangIdRule(
        "GLM-4 MoE Lite",
        FIRST_IS_ONE,
        "srt/models/glm4_moe_lite.py 805-820",
        ("Glm4MoeLiteForCausalLM",),
    ),
    SglangIdRule(
        "GLM-5 Next",
        EVERY,
        "srt/models/glm5_next.py 1533-1543",
        ("Glm5NextForConditionalGeneration",),
    ),
    SglangIdRule(
        "DeepSeek-V2/V3",
        FIRST_IS_ONE,
        "srt/models/deepseek_v2.py 3458-3473",
        (
            "DeepseekV2ForCausalLM",
            "DeepseekV3ForCausalLM",
            "DeepseekV32ForCausalLM",
            "GlmMoeDsaForCausalLM",  # glm4_moe.py, a DeepseekV2ForCausalLM
            "MistralLarge3ForCausalLM",  # mistral_large_3.py
            "KimiK25ForConditionalGeneration",  # kimi_k25.py, to its DeepseekV3ForCausalLM
        ),
        ("deepseek_v2", "deepseek_v3"),
    ),
    SglangIdRule(
        "gpt-oss",
        UNLESS_LAST,
        "srt/models/gpt_oss.py 1337-1352",
        ("GptOssForCausalLM",),
        ("gpt_oss",),
        captures_last=True,
    ),
    SglangIdRule("Apertus", EVERY, "srt/models/apertus.py 675-687", ("ApertusForCausalLM",)),
    SglangIdRule(
        "Bailing MoE",
        EVERY,
        "srt/models/bailing_moe.py 1098-1109",
        (
            "BailingMoEForCausalLM",
            "BailingMoeForCausalLM",
            "BailingMoeV2ForCausalLM",
            "SarvamMoEForCausalLM",  # sarvam_moe.py
        ),
    ),
    SglangIdRule(
        "EXAONE MoE",
        EVERY,
        "srt/models/exaone_moe.py 866-879",
        ("ExaoneMoEForCausalLM", "ExaoneMoeForCausalLM"),
    ),
    SglangIdRule(
        "LongCat-Flash",
        EVERY,
        "srt/models/longcat_flash.py 1112-1119",
        ("LongcatFlashForCausalLM",),
    ),
    SglangIdRule(
        "MiniMax-M2", EVERY, "srt/models/minimax_m2.py 1067-1080", ("MiniMaxM2ForCausalLM",)
    ),
    SglangIdRule(
        "MiniMax-M3",
        EVERY,
        "srt/models/minimax_m3.py 2056-2075",
        ("MiniMaxM3SparseForCausalLM",),
    ),
    SglangIdRule(
        "MiniMax-M3 (multimodal)",
        EVERY,
        "srt/models/minimax_m3_vl.py 246-270",
        ("MiniMaxM3SparseForConditionalGeneration",),
    ),
)

# An unknown class: the ids each rule needs (gpt-oss's reading of HF - 1 is EVERY's).
READINGS = (EVERY, FIRST_IS_ONE)
# The families each reading is the rule of, for the words of an unknown class.
READING_EXAMPLES = {EVERY: "Llama, Qwen, Gemma", FIRST_IS_ONE: "DeepSeek-V2/V3"}


def sglang_rule(target: object) -> SglangIdRule | None:
    """The table's row for a target class (what `target_class` reads): by its architecture,
    else its model_type; None for a class the table does not know."""
    cls = target_class(target)
    if cls is None:
        return None
    if cls.architecture is not None:
        for row in SGLANG_ID_RULES:
            if cls.architecture in row.architectures:
                return row
    if cls.model_type is not None:
        for row in SGLANG_ID_RULES:
            if cls.model_type in row.model_types:
                return row
    return None
