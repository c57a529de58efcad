"""reconcile on HELD-OUT drafts (tests/heldout.py): drafts trained here on wirings, norm flags,
seeds and a second target the bundled demo never shows. On every draft an engine can feed:

- served right (the log is the replay of the layers its config names, its trained ones), the
  verdict is never a wrong wiring and gives no fix;
- served from a copy whose config names the last-N layers, the verdict is a wrong wiring whose
  fix restores the trained layers (or names them among the neighbours the samples cannot tell
  apart)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from heldout import CASES, HeldOutDraft, with_ids
from support import vllm_line

from inspector.cli import main
from inspector.commands.exit_codes import for_verdict

pytestmark = pytest.mark.usefixtures("one_thread")
LIMIT = "8"
FEEDABLE = [n for n, c in CASES.items() if list(c.shape.ids) == sorted(c.shape.ids)]


def _json(capsys, argv: list[str]) -> dict:
    capsys.readouterr()
    rc = main([*argv, "--json", "--device", "cpu", "--limit", LIMIT])
    doc = json.loads(capsys.readouterr().out)
    assert rc == (for_verdict(doc["verdict"]) if argv[0] == "reconcile" else 0)
    return doc


def _served_log(capsys, draft: Path, d: HeldOutDraft, hf: tuple[int, ...], out: Path) -> Path:
    """What vLLM logs serving `draft` fed the layers `hf`: our replay of that wiring."""
    wiring = ",".join(str(d.slot_hf.index(k)) for k in hf)
    w = _json(capsys, ["accept", str(draft), str(d.samples), "--wiring", wiring])["wirings"][0]
    line = vllm_line(w, 3)
    out.write_text(line + "\n")
    return out


@pytest.mark.parametrize("name", FEEDABLE)
def test_a_draft_served_right_is_never_told_to_change_its_ids(
    capsys, heldout_drafts, name, tmp_path
):
    d = heldout_drafts[name]
    log = _served_log(capsys, d.checkpoint, d, d.trained_hf, tmp_path / "vllm.log")
    r = _json(capsys, ["reconcile", str(d.checkpoint), str(d.samples), "--engine-log", str(log)])
    assert r["verdict"] == "as_is", r["summary"]
    assert r["fix"] is None, r["summary"]
    assert r["wirings_named"]["fed"].startswith("configured"), r["summary"]


@pytest.mark.parametrize("name", FEEDABLE)
def test_a_mis_served_draft_gets_the_fix_that_restores_its_trained_layers(
    capsys, heldout_drafts, name, tmp_path
):
    d = heldout_drafts[name]
    copy = with_ids(d, d.serve_ids, tmp_path / "deployed")
    log = _served_log(capsys, copy, d, d.serve_ids, tmp_path / "vllm.log")
    r = _json(capsys, ["reconcile", str(copy), str(d.samples), "--engine-log", str(log)])
    assert r["verdict"] == "wrong_wiring", r["summary"]
    # the fc fingerprint is measured as a witness where the config names another wiring
    assert isinstance(r["trained_search"]["fingerprint_flags_configured"], bool)
    trained = list(d.trained_wiring)
    settled = r["settlement"]
    assert trained in [settled["wiring"], *settled["indistinct"]], settled
    hf = list(d.trained_hf)
    if settled["ambiguous"]:
        assert "cannot settle the trained wiring among" in r["fix"]
        assert f"{hf}" in r["fix"], r["fix"]
    else:
        assert settled["wiring"] == trained, settled
        assert f"eagle_aux_hidden_state_layer_ids {hf} for vLLM" in r["fix"], r["fix"]
