"""The presets mean layers, not positions: `train` is the draft's configured layers looked up by
the slots' HF indices, `serve` the train layers but the embedding plus the target's last layer,
whatever layers and order the samples hold; the old positional rules only where HF indices (or
well-formed configured ids) are missing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from inspector.capture.run import CaptureSettings, capture
from inspector.cli import main
from inspector.sample import SlotInfo
from inspector.wiring import (
    configured_layers,
    parse_wiring,
    preset,
    serve_wiring,
    train_wiring,
)

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"
TARGET = DEMO / "target"
DRAFT = DEMO / "draft"
STORED = DEMO / "samples" / "train"


def _infos(hf: list[int | None], verifier_last: bool = True) -> list[SlotInfo]:
    out = []
    for i, k in enumerate(hf):
        label = f"s{i}" if k is None else ("embed" if k == 0 else f"L{k}")
        out.append(SlotInfo(label, k, verifier=verifier_last and i == len(hf) - 1))
    return out


ALL = _infos([0, 1, 2, 3, 4, 5, 6])  # every layer of the 6-layer demo target, HF 6 the verifier's
DEMO_SLOTS = _infos([0, 2, 4, 6])  # the demo samples


# --- units ---------------------------------------------------------------------------------------
def test_configured_layers_read_one_way_and_well_formed_only():
    assert configured_layers((0, 2, 4), "hf") == (0, 2, 4)
    assert configured_layers((4, 0, 2), "llama.cpp") == (4, 0, 2)
    assert configured_layers((1, 3, 5), "sglang") == (2, 4, 6)  # first id 1: +1 either way
    assert configured_layers((2, 4, 5), "sglang") is None  # before / since #25454 disagree
    assert configured_layers((-1, 2, 30), "sglang") == (0, 3, 31)  # since: -1 names no layer
    assert configured_layers((2, 2, 4), "hf") is None
    assert configured_layers((-1, 2, 4), "hf") is None
    assert configured_layers(None, None) is None


def test_presets_resolve_the_configured_layers_on_samples_holding_every_layer():
    assert train_wiring(ALL, 3, (0, 2, 4)).slots == (0, 2, 4)
    assert serve_wiring(ALL, 3, (0, 2, 4)).slots == (2, 4, 6)
    assert train_wiring(ALL, 3, (2, 4, 6)).slots == (2, 4, 6)
    assert serve_wiring(ALL, 3, (2, 4, 6)).slots == (2, 4, 6)
    assert preset("train", ALL, 3, (1, 3, 5)).slots == (1, 3, 5)
    assert preset("serve", ALL, 3, (1, 3, 5)).slots == (3, 5, 6)  # last 3 of [1, 3, 5, 6]
    assert parse_wiring(" Train ", ALL, 3, (0, 2, 4)).slots == (0, 2, 4)


def test_presets_on_the_demo_slots_are_unchanged():
    for layers in ((0, 2, 4), None):
        assert train_wiring(DEMO_SLOTS, 3, layers).slots == (0, 1, 2)
        assert serve_wiring(DEMO_SLOTS, 3, layers).slots == (1, 2, 3)


def test_presets_follow_the_layers_whatever_order_the_samples_hold():
    shuffled = [
        SlotInfo("L4", 4),
        SlotInfo("embed", 0),
        SlotInfo("L6", 6, verifier=True),
        SlotInfo("L2", 2),
        SlotInfo("L3", 3),
    ]
    assert train_wiring(shuffled, 3, (0, 2, 4)).slots == (0, 1, 3)  # in slot order
    assert serve_wiring(shuffled, 3, (0, 2, 4)).slots == (3, 0, 2)  # HF 2, 4, 6 ascending


def test_the_positional_rules_stay_the_fallback():
    # the samples lack a configured layer: the first non-verifier slots; serve from their layers
    assert train_wiring(ALL, 3, (0, 2, 9)).slots == (0, 1, 2)
    assert serve_wiring(ALL, 3, (0, 2, 9)).slots == (1, 2, 6)
    # malformed ids resolve nothing
    assert train_wiring(ALL, 3, (2, 2, 4)).slots == (0, 1, 2)
    # HF indices unknown: the first non-verifier slots, the last pre-norm ones
    unknown = _infos([None] * 5)
    assert train_wiring(unknown, 3, (0, 2, 4)).slots == (0, 1, 2)
    assert serve_wiring(unknown, 3, (0, 2, 4)).slots == (2, 3, 4)
    # SpecForge: N aux slots and the post-norm final state, no pre-norm verifier slot
    specforge = [
        SlotInfo("L2", 2),
        SlotInfo("L4", 4),
        SlotInfo("L6", 6),
        SlotInfo("final", None, post_norm=True),
    ]
    assert train_wiring(specforge, 3, (2, 4, 6)).slots == (0, 1, 2)
    assert serve_wiring(specforge, 3, (2, 4, 6)).slots == (0, 1, 2)


# --- eval on captured samples --------------------------------------------------------------------
@pytest.fixture(scope="module")
def every_layer(tmp_path_factory) -> Path:
    """The demo's first 4 training samples captured again with every layer, HF [0..6]."""
    root = tmp_path_factory.mktemp("every")
    rows = []
    for i in range(4):
        d = torch.load(STORED / f"data_{i}.pt", weights_only=True)
        rows.append({"input_ids": d["input_ids"].tolist(), "loss_mask": d["loss_mask"].tolist()})
    inp = root / "ids.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = root / "samples"
    res = capture(TARGET, inp, out, CaptureSettings(layers="0,1,2,3,4,5,6", device="cpu"))
    assert res.written == 4 and res.plan.slots == (0, 1, 2, 3, 4, 5, 6)
    return out


def _eval(capsys, draft: Path, samples: Path) -> dict[str, tuple[list[int], str]]:
    argv = ["eval", str(draft), str(samples), "--wiring", "train", "--wiring", "serve"]
    assert main([*argv, "--json", "--device", "cpu"]) == 0
    doc = json.loads(capsys.readouterr().out)
    return {w["label"].split()[0]: (w["wiring"], w["label"]) for w in doc["wirings"]}


def test_eval_presets_on_samples_holding_every_layer(capsys, every_layer):
    got = _eval(capsys, DRAFT, every_layer)
    assert got["train"] == ([0, 2, 4], "train [embed, L2, L4]")
    assert got["serve"] == ([2, 4, 6], "serve [L2, L4, L6]")


def test_eval_presets_on_the_demo_samples(capsys):
    got = _eval(capsys, DRAFT, STORED)
    assert got["train"] == ([0, 1, 2], "train [embed, L2, L4]")
    assert got["serve"] == ([1, 2, 3], "serve [L2, L4, L6]")


def test_eval_presets_follow_another_configured_triple(capsys, every_layer, tmp_path):
    draft = tmp_path / "draft"
    shutil.copytree(DRAFT, draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [1, 3, 5]
    (draft / "config.json").write_text(json.dumps(cfg))
    got = _eval(capsys, draft, every_layer)
    assert got["train"] == ([1, 3, 5], "train [L1, L3, L5]")
    assert got["serve"] == ([3, 5, 6], "serve [L3, L5, L6]")


def test_the_doctor_names_the_presets_by_layer(capsys, every_layer):
    argv = ["doctor", str(DRAFT), str(every_layer), "--samples", "2", "--json", "--device", "cpu"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    w = next(f for f in doc["findings"] if f["kind"] == "wiring")
    named = w["evidence"]["named"]
    assert named["train"]["wiring"] == [0, 2, 4] and named["train"]["label"] == "[embed, L2, L4]"
    assert named["serve"]["wiring"] == [2, 4, 6] and named["serve"]["label"] == "[L2, L4, L6]"
