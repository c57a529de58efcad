"""The draft's vocabulary map against the target's real, unpadded vocabulary (vLLM PR #46435: a
padded target vocab made vLLM build a map the draft does not have). Both faults are planted in
the demo draft (trained here by inspector.demo): a full-vocabulary head without d2t beside a
padded vocab_size (a needless map), and the draft vocabulary of 256 without its d2t (a missing
map)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.cli import main
from inspector.errors import InputError
from inspector.formats.real_vocab import RealVocab, padded_vocab_size, read_real_vocab

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"
HELD = DEMO / "samples" / "held"
TOKENIZER = DEMO / "target" / "tokenizer.json"
REAL = 512  # the demo tokenizer's ids
PADDED = 576  # the demo target's 512 rows padded to a multiple of 64, plus one more block

pytestmark = pytest.mark.usefixtures("one_thread")


def _draft(tmp_path: Path, name: str) -> tuple[Path, dict, dict]:
    out = tmp_path / name
    shutil.copytree(DEMO / "draft", out)
    shutil.copy(TOKENIZER, out / "tokenizer.json")  # the doctor reads R beside the draft
    return (
        out,
        load_file(str(out / "model.safetensors")),
        json.loads((out / "config.json").read_text()),
    )


def _save(out: Path, t: dict, cfg: dict) -> Path:
    save_file(t, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def _needless(tmp_path: Path) -> Path:
    """A head over the whole real vocabulary (512 rows: the demo head's rows at their target
    ids), no d2t/t2d, against a target whose config pads vocab_size to 576."""
    out, t, cfg = _draft(tmp_path, "needless")
    ids = torch.arange(t["d2t"].numel()) + t["d2t"]
    head = torch.zeros(REAL, t["lm_head.weight"].shape[1])
    head[ids] = t["lm_head.weight"]
    t["lm_head.weight"] = head
    emb = t["embed_tokens.weight"]
    t["embed_tokens.weight"] = torch.cat([emb, torch.zeros(PADDED - REAL, emb.shape[1])])
    del t["d2t"], t["t2d"]
    cfg["draft_vocab_size"] = REAL
    cfg["transformer_layer_config"]["vocab_size"] = PADDED
    return _save(out, t, cfg)


def _missing(tmp_path: Path) -> Path:
    """The demo draft (256 of 512 tokens) with its d2t and t2d dropped."""
    out, t, cfg = _draft(tmp_path, "missing")
    del t["d2t"], t["t2d"]
    return _save(out, t, cfg)


def _doctor(capsys, ckpt: Path) -> dict:
    capsys.readouterr()
    main(["doctor", str(ckpt), str(HELD), "--samples", "2", "--json", "--device", "cpu"])
    return json.loads(capsys.readouterr().out)


def _finding(doc: dict, kind: str) -> dict | None:
    return next((f for f in doc["findings"] if f["kind"] == kind), None)


def test_a_needless_map_names_the_engines_that_build_one(capsys, tmp_path):
    doc = _doctor(capsys, _needless(tmp_path))
    f = _finding(doc, "vocab_contract")
    assert f is not None and f["severity"] == "warning", f
    ev = f["evidence"]
    assert (ev["verdict"], ev["map"]) == ("needless", "absent")
    assert (ev["draft_vocab_size"], ev["real_vocab_size"], ev["padded_vocab_size"]) == (
        REAL,
        REAL,
        PADDED,
    )
    assert any("46435" in e["since"] for e in ev["engines"]), ev["engines"]
    assert "a needless vocabulary map" in f["summary"] and "46435" in f["fix"]
    # the draft's own map is no fault: the vocab check no longer calls a missing d2t an error
    assert _finding(doc, "vocab_map")["severity"] != "error"


def test_a_missing_map_is_an_error(capsys, tmp_path):
    doc = _doctor(capsys, _missing(tmp_path))
    f = _finding(doc, "vocab_contract")
    assert f is not None and f["severity"] == "error", f
    ev = f["evidence"]
    assert (ev["verdict"], ev["uncovered"], ev["draft_vocab_size"]) == ("missing", REAL - 256, 256)
    assert "256 real tokens can never be drafted" in f["summary"]
    assert _finding(doc, "vocab_map")["severity"] == "error"


def test_the_demo_draft_keeps_its_contract(capsys, tmp_path):
    out, _, _ = _draft(tmp_path, "demo")
    assert _finding(_doctor(capsys, out), "vocab_contract") is None


def test_a_map_into_padding_and_the_real_vocab_read(tmp_path):
    from inspector.doctor.checks.vocab_contract import contract_facts
    from inspector.formats import load_draft

    real = read_real_vocab(TOKENIZER)
    assert (real.size, real.tokens) == (REAL, REAL)
    assert padded_vocab_size(DEMO / "target") == REAL
    draft = load_draft(DEMO / "draft")
    f = contract_facts(draft, RealVocab(300, 300, "t"), None)
    # counted by hand in the demo's stored map: draft ids 0..114 land on target ids up to 299,
    # draft ids 115..255 on 301..509, so 256 - 115 = 141 of them lie at or above R = 300
    ids = torch.arange(256) + draft.vocab.d2t
    assert (int(ids[114]), int(ids[115]), int(ids[-1])) == (299, 301, 509)
    assert (f.verdict, f.uncovered) == ("into_padding", 141)
    bad = tmp_path / "tokenizer.json"
    bad.write_text(json.dumps({"model": {"vocab": {"a": -1}}}))
    with pytest.raises(InputError, match="model.vocab: expected non-negative integer ids"):
        read_real_vocab(bad)
    bad.write_text(json.dumps({"model": {"vocab": ["a"]}, "added_tokens": [{"id": "x"}]}))
    with pytest.raises(InputError, match=r"added_tokens\[0\].id"):
        read_real_vocab(bad)


def test_the_draft_the_doctor_clears_is_evaluated(capsys, tmp_path):
    """The needless case is no fault of the draft (the doctor says so): the strict loader eval,
    accept and sweep use reads it too, its D head rows as target ids 0..D-1, and says so."""
    from inspector.formats import load_draft

    ckpt = _needless(tmp_path)
    draft = load_draft(ckpt)  # strict
    assert draft.vocab.t2d.tolist() == [True] * REAL + [False] * (PADDED - REAL)
    assert not draft.vocab.d2t.any()
    assert f"no d2t/t2d while draft_vocab_size {REAL} < vocab_size {PADDED}" in draft.notes[0]
    capsys.readouterr()
    main(["eval", str(ckpt), str(HELD), "--limit", "2", "--json", "--device", "cpu"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["wirings"][0]["steps"][0]["all_tok"]["total"] > 0
