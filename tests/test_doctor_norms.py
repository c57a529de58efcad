"""Norm flags against tensors on demo variants (the demo draft uses neither norm): a stored tensor
without its flag, a flag the draft was not trained with, a flag without its tensor, norm_output."""

from __future__ import annotations

import json

import pytest
import torch
from support import edited_copy

from inspector.cli import main
from inspector.doctor import DiagnoseSettings, diagnose
from inspector.doctor.checks.norm_flags import NormFacts, missing_norm_findings, tensors_of
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft

N = 3
WIDTH = 3 * 128  # input_norm spans the three concatenated slots


def _weight(seed: int, n: int) -> torch.Tensor:
    return (0.5 + torch.rand(n, generator=torch.Generator().manual_seed(seed))).float()


def _run(draft):
    from inspector.demo_paths import demo_paths

    ev = Evaluator(load_draft(draft, strict=False), SampleSet(demo_paths().train_samples))
    return diagnose(ev, DiagnoseSettings(N))


def test_the_demo_has_no_norm_findings(demo):
    report = _run(demo.draft)
    assert not {f.kind for f in report.findings} & {"norm_before_fc", "fc_norm", "norm_output"}


def test_a_stored_tensor_without_its_flag(demo, tmp_path):
    d = edited_copy(
        demo.draft, tmp_path / "d", tensors=lambda w: {"input_norm.weight": _weight(0, WIDTH)}
    )
    f = _run(d).finding("norm_before_fc")
    assert f.severity == "warning"
    assert "input_norm.weight is stored but norm_before_fc is false, so no engine reads it" in (
        f.summary
    )
    e = f.evidence
    assert (e["configured"], e["stored"], e["flipped_clearly_better"]) == (
        False,
        ["input_norm.weight"],
        False,
    )
    assert e["as_configured"]["acc"] > e["flipped"]["acc"]


def test_a_flag_the_draft_was_not_trained_with(demo, tmp_path):
    d = edited_copy(
        demo.draft,
        tmp_path / "d",
        tensors=lambda w: {f"fc_norm.{i}.weight": _weight(i, 128) * 3 for i in range(3)},
        config=lambda c: c.update(fc_norm=True),
    )
    f = _run(d).finding("fc_norm")
    assert f.severity == "error"
    assert (
        "fc_norm: the draft fits fc_norm=false" in f.summary and "trained with false" in f.summary
    )
    assert f.fix.startswith('set "fc_norm": false') and "vLLM #42764" in f.fix
    assert f.evidence["flipped_clearly_better"] is True


def test_a_flag_without_its_tensor_is_the_report(demo, tmp_path, capsys):
    d = edited_copy(demo.draft, tmp_path / "d", config=lambda c: c.update(norm_before_fc=True))
    (f,) = missing_norm_findings(d)
    assert (f.kind, f.severity) == ("norm_before_fc", "error")
    assert "input_norm.weight is not stored: the loader refuses" in f.summary
    assert "sglang#32334" in f.summary
    assert missing_norm_findings(demo.draft) == [] and missing_norm_findings(tmp_path / "x") == []
    rc = main(["doctor", str(d), str(demo.train_samples), "--samples", "1", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and [x["kind"] for x in doc["findings"]] == ["norm_before_fc"]
    assert doc["checkpoint"] == str(d)
    fc = edited_copy(demo.draft, tmp_path / "fc", config=lambda c: c.update(fc_norm=True))
    (f,) = missing_norm_findings(fc)
    assert f.evidence["stored"] == [] and "fc_norm.0.weight" in f.summary


def test_norm_output(demo, tmp_path):
    d = edited_copy(demo.draft, tmp_path / "d", config=lambda c: c.update(norm_output=True))
    f = _run(d).finding("norm_output")
    assert f.severity == "info" and "SpecForge#879" in f.summary


def test_facts():
    f = NormFacts("fc_norm", True, tuple(tensors_of("fc_norm", 2)), ("fc_norm.0.weight",))
    assert f.missing == ("fc_norm.1.weight",)
    assert f.to_dict() == {
        "flag": "fc_norm",
        "configured": True,
        "tensors": ["fc_norm.0.weight", "fc_norm.1.weight"],
        "stored": ["fc_norm.0.weight"],
    }
    assert tensors_of("norm_before_fc", 5) == ["input_norm.weight"]


@pytest.mark.parametrize(
    ("layout", "explicit", "value", "expected"),
    [
        # The key absent: speculators' class defaults to false, vLLM's speculators parser to
        # true, vLLM's flat Llama draft reads the missing attribute as false.
        ("speculators", False, False, {"vLLM": True, "SGLang": False, "speculators": False}),
        ("specforge", False, False, {"vLLM": False, "SGLang": False}),
        # Written: every reader that honours it takes it; SGLang has no such branch.
        ("speculators", True, True, {"vLLM": True, "SGLang": False, "speculators": True}),
        ("specforge", True, True, {"vLLM": True, "SGLang": False}),
        ("speculators", True, False, {"vLLM": False, "SGLang": False, "speculators": False}),
    ],
)
def test_residual_readings(demo, layout, explicit, value, expected):
    from dataclasses import replace

    from inspector.doctor.checks.config_alternatives import residual_readings

    cfg = load_draft(demo.draft).config
    cfg = replace(
        cfg,
        source_format=layout,
        norm_before_residual_explicit=explicit,
        norm_before_residual=value,
    )
    assert residual_readings(cfg) == expected
