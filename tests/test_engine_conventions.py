"""SGLang's reading of eagle_config ids per target model class (`engines/sglang_model_files`), and
the ids the doctor and reconcile advise from it.

The rows follow SGLang 0.5.23's `set_eagle3_layers_to_capture`: srt/models/llama.py 929-941
(`[val + 1 for val in layer_ids]`), srt/models/deepseek_v2.py 3458-3473 (+1 only when
`layer_ids[0] == 1`, else `list(layer_ids)`), srt/models/gpt_oss.py 1337-1352 (ids kept when
`max(layer_ids) == num_layers`, else +1)."""

from __future__ import annotations

import json
import re

from inspector.doctor.serving import engine_configs, engine_settings
from inspector.engines.sglang_model_files import (
    EVERY,
    FIRST_IS_ONE,
    SGLANG_ID_RULES,
    UNLESS_LAST,
    captured,
    sglang_rule,
)
from inspector.engines.target_class import TargetClass, target_class
from inspector.formats.target_config import data_config_target, read_target_class


def test_every_class_has_one_row_and_a_source():
    archs = [a for r in SGLANG_ID_RULES for a in r.architectures]
    assert len(archs) == len(set(archs))
    types = [t for r in SGLANG_ID_RULES for t in r.model_types]
    assert len(types) == len(set(types))
    for r in SGLANG_ID_RULES:
        assert re.fullmatch(r"srt/models/\w+\.py \d+-\d+", r.source), r.source
        assert r.rule in (EVERY, FIRST_IS_ONE, UNLESS_LAST)
    first = {r.family for r in SGLANG_ID_RULES if r.rule == FIRST_IS_ONE}
    assert first == {"DeepSeek-V2/V3", "GLM-4 MoE Lite"}
    assert {r.family for r in SGLANG_ID_RULES if r.rule == UNLESS_LAST} == {"gpt-oss"}


def test_a_llama_target_gets_every_id_plus_one():
    rule = sglang_rule("LlamaForCausalLM")
    assert rule is not None and (rule.family, rule.rule) == ("Llama", EVERY)
    assert rule.source == "srt/models/llama.py 929-941"
    assert rule.captured([-1, 1, 3]) == [0, 2, 4]  # -1: the embedding
    assert rule.captured([1, 29, 57]) == [2, 30, 58]  # the first id 1 changes nothing here
    assert rule.ids_for([0, 2, 4]) == [-1, 1, 3]
    assert rule.ids_for([3, 31, 59]) == [2, 30, 58]
    assert rule.ids_for([1, 5, 9]) == [0, 4, 8]
    # classes served by llama.py's method, and others with the same rule
    for name in ("MistralForCausalLM", "Llama4ForConditionalGeneration", "llama", "mistral"):
        assert sglang_rule(name) is rule, name
    for name in ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "qwen3"):
        assert sglang_rule(name).rule == EVERY, name  # type: ignore[union-attr]


def test_a_deepseek_target_adds_one_only_when_the_first_id_is_one():
    for name in (
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "KimiK25ForConditionalGeneration",
    ):
        rule = sglang_rule(name)
        assert rule is not None and rule.family == "DeepSeek-V2/V3", name
    rule = sglang_rule({"model_type": "deepseek_v3"})  # no architectures: by model_type
    assert rule is not None and rule.source == "srt/models/deepseek_v2.py 3458-3473"
    assert rule.captured([1, 29, 57]) == [2, 30, 58]
    assert rule.captured([2, 30, 58]) == [2, 30, 58]
    assert rule.captured([-1, 1, 3]) == [-1, 1, 3]  # no +1: -1 matches no layer
    assert rule.ids_for([0, 2, 4]) == [0, 2, 4]
    assert rule.ids_for([2, 4, 6]) == [1, 3, 5]  # as every other file reads them
    assert rule.ids_for([3, 31, 59]) == [3, 31, 59]
    assert rule.ids_for([1, 5, 9]) is None  # [1, 5, 9] gets +1, [0, 4, 8] does not
    assert captured(FIRST_IS_ONE, [0, 4, 8]) == [0, 4, 8]


def test_gpt_oss_keeps_ids_that_reach_the_layer_count():
    rule = sglang_rule("GptOssForCausalLM")
    assert rule is not None and rule.rule == UNLESS_LAST and rule.captures_last
    assert rule.captured([1, 11, 21], num_layers=24) == [2, 12, 22]
    assert rule.captured([2, 12, 24], num_layers=24) == [2, 12, 24]
    assert rule.captured([2, 12, 24]) is None  # the rule needs the layer count
    assert rule.ids_for([2, 12, 24]) == [1, 11, 23]
    cfg = engine_configs([2, 12, 24], last_layer=24, target="GptOssForCausalLM")["sglang"]
    assert cfg["layer_ids"] == [1, 11, 23]
    assert not any("last layer's output" in n for n in cfg["caveats"])
    llama = engine_configs([2, 12, 24], last_layer=24, target="LlamaForCausalLM")["sglang"]
    assert any("last layer's output" in n for n in llama["caveats"])


def test_an_unknown_class_gives_both_readings():
    assert sglang_rule("FooForCausalLM") is None and sglang_rule(None) is None
    for target in (None, "FooForCausalLM"):
        s = engine_settings([0, 2, 4], last_layer=6, target=target).sglang
        assert s.rule is None and s.layer_ids is None
        assert s.by_rule == {EVERY: [-1, 1, 3], FIRST_IS_ONE: [0, 2, 4]}
        assert s.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 1, 3]
        assert any("does not know" in c for c in s.caveats)
    assert engine_settings([0, 2, 4], last_layer=6).sglang.text == (
        "eagle_config ids for SGLang 0.5.23 by the target's model file (target class unknown): "
        "[-1, 1, 3] where it adds 1 to every id (Llama, Qwen, Gemma), [0, 2, 4] where it adds 1 "
        "only when the first id is 1 (DeepSeek-V2/V3)"
    )
    foo = engine_settings([0, 2, 4], last_layer=6, target="FooForCausalLM").sglang.text
    assert "(FooForCausalLM, a class the table of model files does not know)" in foo
    # HF [2, 4, 6]: both readings want [1, 3, 5]
    agree = engine_settings([2, 4, 6], last_layer=6).sglang
    assert agree.layer_ids == [1, 3, 5]
    assert agree.text == (
        "eagle_config ids [1, 3, 5] for SGLang 0.5.23 (every reading; target class unknown)"
    )
    # HF [1, 3, 5]: no list under the DeepSeek reading
    assert engine_settings([1, 3, 5], last_layer=6).sglang.by_rule[FIRST_IS_ONE] is None


def test_the_words_name_the_class_and_its_rule():
    llama = engine_settings([0, 2, 4], last_layer=6, target="LlamaForCausalLM").sglang
    assert llama.text == (
        "eagle_config ids [-1, 1, 3] for SGLang 0.5.23 (Llama: SGLang adds 1 to every id)"
    )
    assert llama.to_dict()["rule"] == {
        "family": "Llama",
        "rule": "every",
        "words": "SGLang adds 1 to every id",
        "source": "SGLang 0.5.23 srt/models/llama.py 929-941",
    }
    ds = engine_settings([0, 2, 4], last_layer=6, target="DeepseekV3ForCausalLM").sglang
    assert ds.text == (
        "eagle_config ids [0, 2, 4] for SGLang 0.5.23 (DeepSeek-V2/V3: SGLang adds 1 only when "
        "the first id is 1)"
    )
    assert ds.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]
    none = engine_settings([1, 3, 5], last_layer=6, target="DeepseekV3ForCausalLM").sglang
    assert none.layer_ids is None and none.config == {}
    assert none.text == (
        "no eagle_config ids for SGLang 0.5.23 (DeepSeek-V2/V3: SGLang adds 1 only when the "
        "first id is 1)"
    )
    assert any("no id list selects HF indices [1, 3, 5]" in c for c in none.caveats)


def test_the_target_class_is_read_from_its_config(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(
        json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"})
    )
    assert read_target_class(target) == TargetClass("Qwen3ForCausalLM", "qwen3")
    assert read_target_class(target / "config.json") == TargetClass("Qwen3ForCausalLM", "qwen3")
    assert read_target_class(tmp_path / "missing") is None and read_target_class(None) is None
    assert target_class("deepseek_v2") == TargetClass(None, "deepseek_v2")
    assert target_class({"architectures": []}) is None
    # data_config.json's `target`: a folder relative to the file, or the config itself
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "data_config.json").write_text(json.dumps({"target": "../target"}))
    assert data_config_target(samples / "data_config.json") == TargetClass(
        "Qwen3ForCausalLM", "qwen3"
    )
    (samples / "data_config.json").write_text(
        json.dumps({"target": {"architectures": ["GptOssForCausalLM"]}})
    )
    assert data_config_target(samples / "data_config.json") == TargetClass(
        "GptOssForCausalLM", None
    )
    (samples / "data_config.json").write_text(json.dumps({"hidden_states": {}}))
    assert data_config_target(samples / "data_config.json") is None
