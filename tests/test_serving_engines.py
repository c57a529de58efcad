"""Whose counting: the engine conventions, their names, defaults and refusals."""

from __future__ import annotations

import pytest

from inspector.engines import ENGINES, SERVING, Engine, conventions, default_engine, parse_engine
from inspector.errors import InputError


def test_defaults_and_names():
    assert ENGINES == ("vllm", "sglang", "llamacpp", "ort-genai")
    assert SERVING == (Engine.VLLM, Engine.SGLANG, Engine.LLAMACPP)
    assert default_engine(True) is Engine.VLLM and default_engine(False) is Engine.SGLANG
    assert parse_engine(None, True) is Engine.VLLM and parse_engine(None, False) is Engine.SGLANG
    assert parse_engine(" SGLang ", True) is Engine.SGLANG
    assert parse_engine("vllm", True) is Engine.VLLM
    assert Engine.SGLANG.overlap_round and not Engine.VLLM.overlap_round
    assert (Engine.VLLM.display, Engine.SGLANG.display) == ("vLLM", "SGLang")
    assert Engine.LLAMACPP.display == "llama.cpp" and not Engine.LLAMACPP.overlap_round
    assert Engine.LLAMACPP.caps_at_remaining and not Engine.VLLM.caps_at_remaining


def test_refusals_name_the_flag():
    with pytest.raises(InputError) as e:
        parse_engine("trtllm", True)
    assert (e.value.field, e.value.message) == (
        "engine",
        "'trtllm': one of vllm, sglang, llamacpp",
    )
    assert str(e.value) == "--engine: 'trtllm': one of vllm, sglang, llamacpp"  # the CLI's words
    assert e.value.words() == "engine: 'trtllm': one of vllm, sglang, llamacpp"  # the app's
    with pytest.raises(InputError) as e:
        parse_engine("vllm", False)
    assert e.value.field == "engine"
    assert e.value.message == "vllm drafts chains only (--topk 1): trees are SGLang's"
    with pytest.raises(InputError) as e:
        parse_engine("llamacpp", False)
    assert e.value.message == "llamacpp drafts chains only (--topk 1): trees are SGLang's"


def test_the_json_says_what_each_figure_follows():
    v, s = conventions(Engine.VLLM), conventions(Engine.SGLANG)
    keys = {"accept_length", "accepted", "emitted_per_round", "per_depth", "engine", "rounds"}
    assert keys | {"logged_as", "per_sample"} == set(v) == set(s)
    assert (v["engine"], s["engine"]) == ("vllm", "sglang")
    assert (
        v["accept_length"]
        == s["accept_length"]
        == ("1 + accepted / rounds, pooled over every round of every request")
    )
    assert "past its stop" in v["accepted"]
    assert "vllm:spec_decode_num_drafts" in v["rounds"] and "overlap" in s["rounds"]
    assert "Prometheus, cumulative" in v["logged_as"] and "avg_spec_accept_length" in s["logged_as"]
    assert "per_step_accepted" in v["per_sample"] and "spec_verify_ct" in s["per_sample"]
