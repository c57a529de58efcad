"""doctor/checks/draft_shape.py on the golden fixtures speculators wrote: the shape read from a
checkpoint folder, each engine's verdict on it, and the draft as the engine runs it."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from inspector.doctor.checks.draft_shape import (
    as_engine_runs,
    draft_shape,
    draft_shape_finding,
    engine_verdict,
    without_dropped,
)
from inspector.engines.shapes import Drop, Support, Verdict
from inspector.formats import load_draft


def _load(golden, name: str):
    return load_draft(golden / f"speculators-{name}" / "checkpoint")


@pytest.mark.parametrize(
    "name,want",
    [
        ("normfc", (3, 1, "llama", False, True, True, True)),
        ("fcnorm", (3, 1, "llama", True, False, True, True)),
        ("qwen3", (3, 1, "qwen3", False, False, False, True)),
        ("deep", (2, 2, "llama", False, False, False, False)),
        ("wide", (4, 1, "llama", False, False, False, True)),
        ("single", (1, 1, "llama", False, False, False, True)),
    ],
)
def test_the_shape_of_each_golden_draft(golden, name, want):
    s = draft_shape(_load(golden, name))
    got = (s.slots, s.layers, s.layer, s.fc_norm, s.norm_before_fc, s.norm_output)
    # later_hidden_norms: every layer after the first has one (vacuously so for one layer)
    assert got + (s.later_hidden_norms,) == want
    assert s.speculators and s.n_stated == {"top": want[0]}


def test_an_mla_draft_is_read_as_one(golden):
    d = load_draft(golden / "specforge-mla" / "checkpoint")
    assert draft_shape(d).layer == "mla" and draft_shape_finding(d) is None


def test_no_folder_no_shape(golden):
    d = replace(_load(golden, "qwen3"), path="")
    assert draft_shape(d) is None and draft_shape_finding(d) is None
    assert engine_verdict(d, "sglang") is None and as_engine_runs(d, "sglang") == (d, None)


def test_the_basic_draft_is_classic(golden):
    d = load_draft(golden / "speculators-basic" / "checkpoint")
    assert draft_shape(d).classic and draft_shape_finding(d) is None
    assert engine_verdict(d, "vllm").support is Support.SERVES


def test_a_two_layer_draft_that_names_sglangs_norm(golden, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    src = golden / "speculators-deep" / "checkpoint"
    copy = tmp_path / "deep"
    shutil.copytree(src, copy)
    w = load_file(str(copy / "model.safetensors"))
    w["layers.1.hidden_norm.weight"] = w["layers.1.input_layernorm.weight"].clone()
    save_file(w, str(copy / "model.safetensors"))
    d = load_draft(copy)
    assert draft_shape(d).later_hidden_norms
    assert engine_verdict(d, "sglang").support is Support.SERVES


def test_sglang_runs_a_qwen3_layer_without_its_qk_norms(golden):
    d = _load(golden, "qwen3")
    served, verdict = as_engine_runs(d, "sglang")
    assert verdict.support is Support.DROPS
    gone = {n for n in d.weights if n not in served.weights}
    assert gone == {"layers.0.self_attn.q_norm.weight", "layers.0.self_attn.k_norm.weight"}
    assert served.config == d.config
    assert as_engine_runs(d, "vllm") == (d, None)


def test_sglang_runs_later_layers_with_a_unit_input_norm(golden):
    d = _load(golden, "deep")
    served, verdict = as_engine_runs(d, "sglang")
    assert verdict.dropped == "the input norms of layers 1 and up"
    name = "layers.1.input_layernorm.weight"
    assert torch.equal(served.weights[name], torch.ones_like(d.weights[name]))
    assert not torch.equal(d.weights[name], served.weights[name])
    for n, t in d.weights.items():
        if n != name:
            assert served.weights[n] is t, n
    assert served.config == d.config


def test_llamacpp_runs_speculators_eagle_3_1_without_norm_output(golden):
    d = _load(golden, "normfc")
    served, verdict = as_engine_runs(d, "llama.cpp")
    assert verdict.dropped == "norm_output"
    assert d.config.norm_output and served.config == replace(d.config, norm_output=False)
    assert served.config.norm_before_fc and served.weights == d.weights


def test_without_dropped_leaves_a_served_draft_alone(golden):
    d = _load(golden, "qwen3")
    assert without_dropped(d, Verdict("vLLM 0.32", Support.SERVES)) is d
    assert without_dropped(d, Verdict("x", Support.REFUSES, drops=(Drop.QK_NORMS,))) is d


def test_the_finding_of_a_folder(golden):
    f = draft_shape_finding(_load(golden, "qwen3"), ["sglang"])
    assert f.severity == "error" and "runs it without its q/k norms" in f.summary
