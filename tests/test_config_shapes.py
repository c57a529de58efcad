"""Config shapes that collapse: ids listed twice (a default triple on a small target gives
[1, 1, 1]) and ids past the target's layers are findings with their consequence per engine,
never a crash or a silent choice."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from inspector.cli import main

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"


def _engine_rows(capsys, tmp_path, ids) -> tuple[dict, dict]:
    ckpt = tmp_path / "draft"
    shutil.copytree(DEMO / "draft", ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = ids
    (ckpt / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    argv = ["doctor", str(ckpt), str(DEMO / "samples" / "held"), "--samples", "2", "--json"]
    main([*argv, "--target", str(DEMO / "target"), "--device", "cpu"])
    doc = json.loads(capsys.readouterr().out)
    f = next(x for x in doc["findings"] if x["kind"] == "engine_feeds")
    return f, {e["label"]: e for e in f["evidence"]["engines"]}


def test_ids_listed_twice_are_a_finding_per_engine(capsys, tmp_path):
    f, rows = _engine_rows(capsys, tmp_path, [1, 1, 1])
    assert f["severity"] == "error"
    v = rows["vLLM 0.32"]
    assert v["problem"] == "1 state for an fc that takes 3: it cannot serve it"
    assert v["notes"] == ["ids [1, 1, 1] repeat a layer: it is captured once"]
    lc = rows["llama.cpp @0c1e570 converted"]  # llama.cpp feeds the one state three times
    assert lc["problem"] is None and lc["fed"] == [1, 1, 1]
    assert lc["notes"] == ["ids [1, 1, 1] repeat a layer: llama.cpp feeds it to 3 fc blocks"]
    assert lc["feeds_trained_wiring"] is False


def test_ids_past_the_target_are_a_finding_per_engine(capsys, tmp_path):
    f, rows = _engine_rows(capsys, tmp_path, [2, 4, 9])
    assert f["severity"] == "error"
    for label in ("vLLM 0.32", "llama.cpp @0c1e570 converted"):
        assert rows[label]["problem"] == "HF [9] outside 0..6: no such state", label
        assert rows[label]["fed"] is None


def test_a_negative_top_level_id_is_a_finding_not_a_refusal(capsys, tmp_path):
    """Below 0 no convention reads a top-level id (SGLang's -1 for the embedding lives under
    eagle_config): the loader keeps it, and the wiring finding says what each engine feeds
    (tests/test_malformed_ids.py holds the words)."""
    ckpt = tmp_path / "draft"
    shutil.copytree(DEMO / "draft", ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [-3, 2, 4]
    (ckpt / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    argv = ["doctor", str(ckpt), str(DEMO / "samples" / "held"), "--samples", "2", "--json"]
    assert main(argv) == 1
    doc = json.loads(capsys.readouterr().out)
    w = next(f for f in doc["findings"] if f["kind"] == "wiring")
    assert w["severity"] == "error" and w["evidence"]["malformed_ids"]["negative"] == [-3]
