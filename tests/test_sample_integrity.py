"""Samples that lie: a slot of zeros (vLLM's extract_hidden_states before PR #46301 on hybrid
targets), NaN, one constant state, or a slot holding another layer's states. The doctor names
the slot and the samples; eval and accept say so before they report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from inspector.cli import main

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"
HELD = DEMO / "samples" / "held"


def _edited_samples(tmp_path: Path, edit, indices=range(48)) -> Path:
    """A copy of the held-out samples with `edit(hidden_states)` applied to these samples."""
    out = tmp_path / "samples"
    shutil.copytree(HELD, out)
    for i in indices:
        p = out / f"data_{i}.pt"
        d = torch.load(p, weights_only=True)
        edit(d["hidden_states"])
        torch.save(d, p)
    return out


def _doctor(capsys, samples: Path, *extra: str) -> dict:
    capsys.readouterr()
    argv = ["doctor", str(DEMO / "draft"), str(samples), "--samples", "4", "--json"]
    main([*argv, "--device", "cpu", *extra])
    return json.loads(capsys.readouterr().out)


def _finding(doc: dict, kind: str) -> dict:
    return next(f for f in doc["findings"] if f["kind"] == kind)


def test_clean_samples_are_info(capsys):
    f = _finding(_doctor(capsys, HELD), "sample_integrity")
    assert f["severity"] == "info" and "finite, varying" in f["summary"]
    slots = f["evidence"]["slots"]
    assert [s["label"] for s in slots] == ["embed", "L2", "L4", "L6"]
    assert all(s["faults"] == [] and s["median_norm"] > 0 for s in slots)


def test_a_slot_of_zeros_is_named_with_its_samples(capsys, tmp_path):
    def zero_l4(hs):
        hs[2].zero_()

    samples = _edited_samples(tmp_path, zero_l4)
    f = _finding(_doctor(capsys, samples), "sample_integrity")
    assert f["severity"] == "error"
    assert "slot 2 (L4): all zeros in 4 of 4 samples read, samples [0, 1, 2, 3]" in f["summary"]
    assert "PR #46301" in f["summary"] and "capture" in f["fix"]
    bad = [s for s in f["evidence"]["slots"] if s["faults"]]
    assert [(s["label"], s["faults"]) for s in bad] == [("L4", ["zeros"])]
    (l4,) = bad
    lengths = [
        torch.load(samples / f"data_{i}.pt", weights_only=True)["input_ids"].numel()
        for i in range(4)
    ]
    assert l4 == {
        "slot": 2,
        "label": "L4",
        "positions": sum(lengths),
        "zero_rows": sum(lengths),
        "nonfinite_rows": 0,
        "median_norm": 0.0,
        "zero_samples": [0, 1, 2, 3],
        "nonfinite_samples": [],
        "constant_samples": [],
        "vanishing": False,
        "faults": ["zeros"],
    }
    assert f["evidence"]["samples"] == [0, 1, 2, 3]


def test_nan_and_one_constant_state_are_named(capsys, tmp_path):
    def spoil(hs):
        hs[1][3, 5] = float("nan")
        hs[3][:] = hs[3][0].clone()

    samples = _edited_samples(tmp_path, spoil, indices=[0, 1])
    f = _finding(_doctor(capsys, samples), "sample_integrity")
    assert f["severity"] == "error"
    bad = {s["label"]: s for s in f["evidence"]["slots"] if s["faults"]}
    assert bad["L2"]["faults"] == ["non-finite"] and bad["L2"]["nonfinite_samples"] == [0, 1]
    assert bad["L2"]["nonfinite_rows"] == 2 and bad["L2"]["zero_rows"] == 0
    assert bad["L6"]["faults"] == ["constant"] and bad["L6"]["constant_samples"] == [0, 1]
    assert set(bad) == {"L2", "L6"}


def test_a_slot_from_the_wrong_layer_is_named_against_the_target(capsys, tmp_path):
    """L4's slot holding L2's states: finite and varying, so the integrity check passes; run
    against the target, the slot identity check names the slot and the layer it holds."""

    def l2_in_l4(hs):
        hs[2] = hs[1].clone()

    samples = _edited_samples(tmp_path, l2_in_l4)
    doc = _doctor(capsys, samples, "--target", str(DEMO / "target"))
    assert _finding(doc, "sample_integrity")["severity"] == "info"
    ident = _finding(doc, "slot_identity")
    assert ident["severity"] in ("warning", "error"), ident["summary"]
    assert "slot 2" in ident["summary"] and "HF 2" in ident["summary"], ident["summary"]


@pytest.mark.parametrize("command", ["eval", "accept"])
def test_eval_and_accept_say_so_before_they_report(command, capsys, tmp_path):
    def zero_l4(hs):
        hs[2].zero_()

    samples = _edited_samples(tmp_path, zero_l4, indices=range(8))
    capsys.readouterr()
    assert main([command, str(DEMO / "draft"), str(samples), "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert "slot 2 (L4) holds no real hidden state: all zeros in 8 of 8 samples read" in err
