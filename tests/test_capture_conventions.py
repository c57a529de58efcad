"""Each trainer's and engine's layer-id convention, pinned (inspector.capture.conventions / plan).

The facts, per public source: HF index k = output_hidden_states[k] (0 = embedding, L = last layer
before the final norm). vLLM ids are HF indices (EagleModelMixin capture reaches 0 and L; the
older capture crashes on 0 and never reaches L) and vLLM reads the top-level key, then
eagle_config. SGLang reads eagle_config only; before PR #25454 it adds 1 to every explicit id
(-1 = embedding), since #25454 only when the first id is 1; it captures before each layer, so it
never reaches L; without ids it captures [2, L//2, L-3] with no +1. SpecForge ids are
decoder-layer outputs (+1); speculators <= v0.4 data_config layer_ids are too (+1).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from inspector.capture.conventions import (
    EAGLE_CONFIG,
    TOP_LEVEL,
    engine_capture,
    engine_default_hf,
    legacy_layer_ids_to_hf,
    sglang_hf_indices,
    trainer_hf_indices,
)
from inspector.capture.plan import POST_NORM, DraftIds, plan_slots
from inspector.errors import InputError

L61 = 61


def _hf(engine: str, ids, conv, L: int = L61) -> list[int]:
    return list(engine_capture(engine, ids, conv, L).hf_indices)


# --- SGLang ------------------------------------------------------------------------------------


def test_sglang_explicit_minus_one_is_the_embedding_before_25454() -> None:
    assert sglang_hf_indices([-1, 2, 30], since_25454=False) == [0, 3, 31]
    cap = engine_capture("sglang-pre25454", [-1, 2, 30], EAGLE_CONFIG, L61)
    assert cap.hf_indices == (0, 3, 31) and cap.problem(3) is None
    assert any("residual is None" in n for n in cap.notes)  # the layer-0 guard caveat


def test_sglang_since_25454_adds_one_only_when_the_first_id_is_one() -> None:
    assert sglang_hf_indices([1, 29, 57], since_25454=True) == [2, 30, 58]
    assert sglang_hf_indices([2, 30, 58], since_25454=True) == [2, 30, 58]
    assert sglang_hf_indices([2, 30, 58], since_25454=False) == [3, 31, 59]
    # [-1, 2, 30] gets no +1: -1 matches no layer, two states for a three-block fc.
    cap = engine_capture("sglang", [-1, 2, 30], EAGLE_CONFIG, L61)
    assert cap.hf_indices == (2, 30)
    assert "cannot serve" in cap.problem(3)


def test_sglang_never_reaches_the_last_layer_and_ignores_top_level_ids() -> None:
    # eagle_config [59, 60] -> HF [60, 61]: 61 = L is the output after the last layer.
    assert _hf("sglang-pre25454", [0, 59, 60], EAGLE_CONFIG) == [1, 60]
    # A speculators (top-level) config: SGLang does not see the ids and uses its default.
    cap = engine_capture("sglang", [0, 3, 31], TOP_LEVEL, L61)
    assert cap.hf_indices == (2, 30, 58) and cap.configured == (0, 3, 31)
    assert any("not seen" in n for n in cap.notes)


def test_engine_defaults_and_duplicates() -> None:
    assert engine_default_hf(61) == [2, 30, 58]
    assert _hf("vllm", None, None) == [2, 30, 58] == _hf("sglang", None, None)
    # A 6-layer target: L//2 == L-3, captured once, so a 3-block draft cannot be served.
    cap = engine_capture("sglang", None, None, 6)
    assert cap.hf_indices == (2, 3) and cap.problem(3) is not None


# --- vLLM --------------------------------------------------------------------------------------


def test_vllm_id_is_the_hf_index_and_id_L_is_the_final_pre_norm_state() -> None:
    assert _hf("vllm", [0, 3, 31], TOP_LEVEL) == [0, 3, 31]
    assert _hf("vllm", [2, 30, 61], TOP_LEVEL) == [2, 30, 61]
    # Engines concatenate in ascending layer order, whatever the config order.
    assert _hf("vllm", [31, 0, 3], TOP_LEVEL) == [0, 3, 31]
    # eagle_config ids (SGLang convention) are read as HF indices too: one layer lower.
    assert _hf("vllm", [1, 29, 57], EAGLE_CONFIG) == [1, 29, 57]


def test_vllm_before_the_mixin_crashes_on_the_embedding_and_misses_L() -> None:
    assert engine_capture("vllm-pre36063", [0, 3, 31], TOP_LEVEL, L61).problem(3) is not None
    cap = engine_capture("vllm-pre36063", [2, 30, 61], TOP_LEVEL, L61)
    assert cap.hf_indices == (2, 30) and cap.problem(3) is not None


# --- trainers and the worked mapping -----------------------------------------------------------


def test_trainer_readings() -> None:
    # SpecForge [1, 29, 57] = HF [2, 30, 58] = the vLLM default for 61 layers.
    assert trainer_hf_indices([1, 29, 57], EAGLE_CONFIG) == [2, 30, 58] == engine_default_hf(61)
    assert trainer_hf_indices([0, 2, 4], TOP_LEVEL) == [0, 2, 4]
    # speculators <= v0.4 data_config layer_ids (Llama-3.1-8B defaults).
    assert legacy_layer_ids_to_hf([2, 16, 29, 31]) == [3, 17, 30, 32]


def test_worked_mapping_for_a_61_layer_target() -> None:
    assert _hf("sglang-pre25454", [2, 30, 58], EAGLE_CONFIG) == [3, 31, 59]
    # Training data [HF0, HF3, HF31, HF59] feeds hidden_states[:-1] = HF [0, 3, 31]; the fix
    # writes SGLang [-1, 2, 30] (before #25454) or vLLM [0, 3, 31].
    assert _hf("sglang-pre25454", [-1, 2, 30], EAGLE_CONFIG) == [0, 3, 31]
    assert _hf("vllm", [0, 3, 31], TOP_LEVEL) == [0, 3, 31]
    assert _hf("sglang", [-1, 2, 30], EAGLE_CONFIG) == [2, 30]


def test_unknown_engine_is_rejected() -> None:
    with pytest.raises(ValueError):
        engine_capture("tgi", None, None, 6)


# --- slot plans --------------------------------------------------------------------------------


def _draft(ids, conv, blocks: int = 3) -> DraftIds:
    return DraftIds(path=Path("d"), aux_ids=ids, convention=conv, fc_blocks=blocks)


def test_plans_put_L_last_and_post_norm_before_it() -> None:
    assert plan_slots(6, layers="4,0,2").slots == (0, 2, 4, 6)
    assert plan_slots(6, layers="0,2,4,6,post-norm").slots == (0, 2, 4, POST_NORM, 6)
    assert plan_slots(6).slots == (2, 3, 6)  # default 2, L//2, L-3 (+ L)
    # auto: the draft's ids in its convention, then L even when L is an fc input too.
    assert plan_slots(6, draft=_draft((0, 2, 4), TOP_LEVEL)).slots == (0, 2, 4, 6)
    assert plan_slots(6, layers="auto", draft=_draft((1, 3, 5), EAGLE_CONFIG)).slots == (2, 4, 6, 6)
    eng = plan_slots(6, draft=_draft((0, 2, 4), TOP_LEVEL), engine="vllm")
    assert eng.slots == (0, 2, 4, 6) and eng.to_dict()["engine"]["fc_slots"] == [0, 1, 2]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"layers": "0,9"}, "--layers"),
        ({"layers": "-1"}, "--layers"),
        ({"layers": "two"}, "--layers"),
        ({"layers": "auto"}, "--layers"),
        ({"layers": "auto", "draft": "none"}, "eagle_aux_hidden_state_layer_ids"),
        ({"engine": "vllm"}, "--engine"),
        ({"engine": "sglang", "draft": "top"}, "eagle_aux_hidden_state_layer_ids"),
        ({"engine": "vllm", "draft": "top", "layers": "0,2"}, "--layers"),
    ],
)
def test_bad_plans_are_one_line_input_errors(kwargs: dict, field: str) -> None:
    drafts = {"none": _draft(None, None), "top": _draft((0, 2, 4), TOP_LEVEL)}
    if "draft" in kwargs:
        kwargs = {**kwargs, "draft": drafts[kwargs["draft"]]}
    with pytest.raises(InputError) as e:
        plan_slots(6, **kwargs)
    assert getattr(e.value.field, "flag", e.value.field) == field and "\n" not in str(e.value)
