"""Malformed aux layer ids are diagnosed, never read as all-clear: a repeated id or a negative
one is loaded as written, and the doctor's wiring finding is an error that says what each engine
release feeds and gives the ids of the trained wiring (never "fits its configured wiring")."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from support import error_lines

from inspector.cli import main
from inspector.doctor.checks.layer_ids import layer_id_facts
from inspector.doctor.wiring.engine_reading import engine_reads
from inspector.formats.checkpoint import load_draft
from inspector.sample import SlotInfo

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"
HELD = DEMO / "samples" / "held"
FIX = (
    "set eagle_aux_hidden_state_layer_ids [0, 2, 4] for vLLM, eagle_config ids [-1, 1, 3] for "
    "SGLang 0.5.23 (Llama: SGLang adds 1 to every id) in the draft's config.json: the ids that "
    "name the trained wiring [embed, L2, L4], each layer once"
)


def _draft(tmp_path: Path, ids: object, name: str = "draft") -> Path:
    ckpt = tmp_path / name
    shutil.copytree(DEMO / "draft", ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = ids
    (ckpt / "config.json").write_text(json.dumps(cfg))
    return ckpt


def _doctor(capsys, ckpt: Path, status: int = 1) -> dict:
    """The doctor's report (exit status 1: an error finding)."""
    capsys.readouterr()
    argv = ["doctor", str(ckpt), str(HELD), "--samples", "2", "--json", "--device", "cpu"]
    assert main(argv) == status
    return json.loads(capsys.readouterr().out)


def test_the_loader_keeps_repeated_and_negative_ids_as_written(tmp_path):
    assert load_draft(_draft(tmp_path, [2, 2, 4], "rep")).config.aux_layer_ids == (2, 2, 4)
    assert load_draft(_draft(tmp_path, [-1, 2, 4], "neg")).config.aux_layer_ids == (-1, 2, 4)


@pytest.mark.parametrize("ids", [["0", "2", "4"], [0, 2.5, 4], "0,2,4", [0, True, 4]])
def test_non_integer_ids_are_one_line(tmp_path, capsys, ids):
    ckpt = _draft(tmp_path, ids)
    capsys.readouterr()
    assert main(["doctor", str(ckpt), str(HELD), "--samples", "2"]) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "eagle_aux_hidden_state_layer_ids: expected a list of integers" in line


def test_malformed_ids_select_no_configured_wiring():
    infos = [
        SlotInfo("embed", 0),
        SlotInfo("L2", 2),
        SlotInfo("L4", 4),
        SlotInfo("L6", 6, verifier=True),
    ]
    base = load_draft(DEMO / "draft").config
    for ids in ((2, 2, 4), (-1, 2, 4)):
        cfg = replace(base, aux_layer_ids=ids, aux_layer_convention="hf")
        facts = layer_id_facts(cfg, infos, 3)
        assert facts.configured is None and facts.configured_hf is None, ids


def test_engine_reads_say_what_a_negative_id_feeds():
    reads = {
        r.reader.label: r
        for r in engine_reads({"eagle_aux_hidden_state_layer_ids": [-1, 2, 4]}, 6, 3)
    }
    v = reads["vLLM 0.32"]
    assert v.hf == (-1, 2, 4) and v.fed is None
    assert v.notes == (
        "id -1 matches no layer: it captures a layer whose index (0..6) is among the ids, with no "
        "negative indexing, so 2 states (HF [2, 4]) reach an fc that takes 3 (a shape error when "
        "the draft first runs)",
    )
    lc = reads["llama.cpp @0c1e570 converted"]
    assert lc.fed is None
    assert lc.notes == (
        "id -1: llama.cpp captures the input of layer i, and there is no such layer",
    )
    # SGLang's eagle_config -1 is the embedding on a Llama target: no note, HF 0 fed
    nested = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 1, 3]}}
    sg = next(
        r
        for r in engine_reads(nested, 6, 3, target="LlamaForCausalLM")
        if r.reader.engine == "sglang"
    )
    assert sg.fed == (0, 2, 4) and not any("no layer" in n for n in sg.notes)


def test_doctor_on_a_repeated_id(capsys, tmp_path):
    doc = _doctor(capsys, _draft(tmp_path, [2, 2, 4]))
    assert doc["configured_wiring"] is None
    w = next(f for f in doc["findings"] if f["kind"] == "wiring")
    assert w["severity"] == "error" and w["wiring"] == [0, 1, 2]
    ev = w["evidence"]
    assert ev["case"] == "config_malformed" and ev["best"]["label"] == "[embed, L2, L4]"
    assert "configured" not in ev["named"]
    m = ev["malformed_ids"]
    assert (m["ids"], m["repeated"], m["negative"]) == ([2, 2, 4], [2], [])
    feeds = {e["engine"]: e["feeds"] for e in m["engines"]}
    assert feeds["vLLM 0.32"] == (
        "reads them: ids [2, 2, 4] repeat a layer: it is captured once; 2 states for an fc that "
        "takes 3: it cannot serve it"
    )
    assert feeds["llama.cpp @0c1e570 converted"] == (
        "reads them: ids [2, 2, 4] repeat a layer: llama.cpp feeds it to 2 fc blocks; "
        "it feeds [L2, L2, L4]"
    )
    assert feeds["SGLang 0.5.23"].startswith("does not load this config's layout")
    assert w["summary"].startswith(
        "its config.json eagle_aux_hidden_state_layer_ids [2, 2, 4] list 2 twice, so they select "
        "no wiring"
    )
    assert "fits its configured wiring" not in w["summary"]
    assert w["fix"] == FIX


def test_doctor_on_a_negative_id(capsys, tmp_path):
    doc = _doctor(capsys, _draft(tmp_path, [-1, 2, 4]))
    assert doc["configured_wiring"] is None
    w = next(f for f in doc["findings"] if f["kind"] == "wiring")
    assert w["severity"] == "error" and w["wiring"] == [0, 1, 2]
    m = w["evidence"]["malformed_ids"]
    assert (m["ids"], m["repeated"], m["negative"]) == ([-1, 2, 4], [], [-1])
    feeds = {e["engine"]: e["feeds"] for e in m["engines"]}
    assert feeds["vLLM 0.32"].startswith("reads them: id -1 matches no layer")
    assert "2 states (HF [2, 4]) reach an fc that takes 3" in feeds["vLLM 0.32"]
    assert feeds["llama.cpp @0c1e570 converted"] == (
        "reads them: id -1: llama.cpp captures the input of layer i, and there is no such layer"
    )
    assert "-1 for it is SGLang's eagle_config convention" in w["summary"]
    assert "fits its configured wiring" not in w["summary"]
    assert w["fix"] == FIX


def test_well_formed_ids_are_no_malformed_case(capsys):
    doc = _doctor(capsys, DEMO / "draft", 0)
    w = next(f for f in doc["findings"] if f["kind"] == "wiring")
    assert w["evidence"]["case"] == "configured" and "malformed_ids" not in w["evidence"]
    assert doc["configured_wiring"] == [0, 1, 2]
