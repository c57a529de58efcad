"""ONNX Runtime GenAI, the fourth engine: read from its released model builder (0.18.0), where it
runs no EAGLE-3 drafter, so the tool holds its reading and refuses to replay a count for it."""

from __future__ import annotations

import pytest

from inspector.doctor.wiring.engine_reading import engine_reads
from inspector.engines import (
    ENGINES,
    REGISTRY,
    SERVING,
    Engine,
    engine,
    engine_words,
    ort_genai,
    parse_engine,
)
from inspector.errors import InputError


def test_it_is_registered_under_its_spellings():
    assert engine("onnxruntime-genai").id is Engine.ORT_GENAI
    assert engine("ONNX Runtime GenAI").id is Engine.ORT_GENAI
    assert engine_words("ort") == "ONNX Runtime GenAI"
    assert engine(Engine.ORT_GENAI).label == "ONNX Runtime GenAI 0.18.0"


def test_an_engine_without_an_eagle3_drafter_is_read_not_replayed():
    assert Engine.ORT_GENAI in REGISTRY and Engine.ORT_GENAI not in SERVING
    assert ENGINES[-1] == "ort-genai"
    with pytest.raises(InputError) as e:
        parse_engine("onnxruntime-genai", True)
    assert e.value.field == "engine" and "no release runs an EAGLE-3 draft" in e.value.message
    assert parse_engine("ort", True, serving=False) is Engine.ORT_GENAI


def test_ort_genai_taps_the_input_of_each_layer_and_wants_dflash_ids_plus_one():
    # a 32-layer target, a DSpark draft trained (SpecForge ids: a layer's output) on 5, 15, 25
    cfg = {"dflash_config": {"target_layer_ids": [5, 15, 25]}}
    (read,) = engine_reads(cfg, 32, 3, draft="dspark", readers=ort_genai.READERS)
    assert read.hf == (6, 16, 26) and read.problem is None
    assert ort_genai.aux_layers(read.hf) == [6, 16, 26]
    # the last layer's output (id L-1 -> HF L) cannot be tapped: it feeds the input of layer i < L
    (last,) = engine_reads(
        {"dflash_config": {"target_layer_ids": [5, 15, 31]}},
        32,
        3,
        draft="dspark",
        readers=ort_genai.READERS,
    )
    assert last.problem is not None and "HF [32] cannot be fed" in last.problem
    (none,) = engine_reads({}, 32, 3, draft="dspark", readers=ort_genai.READERS)
    assert none.problem is not None and "target_layer_ids" in none.problem
    # its exporter's own refusals, as its model builder words them
    assert ort_genai.export_problem([5, 15, 25], 32) is None
    assert "must lie in [0, 31)" in (ort_genai.export_problem([5, 31], 32) or "")
    assert "at least one" in (ort_genai.export_problem([], 32) or "")
    # it reads no EAGLE-3 config: the doctor's rows for an EAGLE-3 draft leave it out
    eagle = {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}
    assert all(r.reader.engine is not Engine.ORT_GENAI for r in engine_reads(eagle, 32, 3))
