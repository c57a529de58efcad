"""A vocabulary map that moved (SpecForge PR #534): a fine-tune warm-started from a parent whose
d2t / t2d were regenerated while lm_head kept the parent's rows. `doctor --parent` names the
rows that moved, and scores the weights under both maps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.cli import main

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"
HELD = DEMO / "samples" / "held"


def _child(tmp_path: Path, name: str, *, head_follows: bool) -> Path:
    """The demo draft with its vocabulary regenerated as a warm-start does: 16 of its target
    tokens out, 16 others in, the map sorted again (so most rows shift); lm_head kept as the
    parent's, or reordered to follow the new map when `head_follows` (a token new to the
    vocabulary gets a zero row)."""
    out = tmp_path / name
    shutil.copytree(DEMO / "draft", out)
    path = out / "model.safetensors"
    t = load_file(str(path))
    d = t["d2t"].numel()
    ids = (torch.arange(d) + t["d2t"]).tolist()
    absent = [k for k in range(t["t2d"].numel()) if k not in set(ids)]
    new = sorted(set(ids[16:]) | set(absent[:16]))
    t["d2t"] = (torch.tensor(new) - torch.arange(d)).to(t["d2t"].dtype)
    t2d = torch.zeros_like(t["t2d"])
    t2d[torch.tensor(new)] = True
    t["t2d"] = t2d
    if head_follows:
        row_of = {tok: r for r, tok in enumerate(ids)}
        head = t["lm_head.weight"]
        rows = [head[row_of[tok]] if tok in row_of else torch.zeros_like(head[0]) for tok in new]
        t["lm_head.weight"] = torch.stack(rows).contiguous()
    save_file(t, str(path))
    return out


def _doctor(capsys, ckpt: Path, parent: Path) -> dict:
    capsys.readouterr()
    argv = ["doctor", str(ckpt), str(HELD), "--samples", "4", "--json", "--device", "cpu"]
    main([*argv, "--parent", str(parent)])
    doc = json.loads(capsys.readouterr().out)
    return next(f for f in doc["findings"] if f["kind"] == "vocab_moved")


def test_a_map_that_moved_under_the_head_is_an_error(capsys, tmp_path):
    f = _doctor(capsys, _child(tmp_path, "child", head_follows=False), DEMO / "draft")
    assert f["severity"] == "error", f["summary"]
    ev = f["evidence"]
    assert ev["left_vocab"] == 16 and ev["entered_vocab"] == 16
    moved = ev["moved_rows"]
    assert 16 <= moved <= 256
    first = ev["examples"][0]
    assert first["parent_target"] != first["target"]
    assert ev["parent_map"]["hits"] > ev["own_map"]["hits"]
    assert ev["parent_map"] == ev["parent_own_map"]  # the parent's map gives the parent back
    assert f"moved under the weights: {moved} of 256 draft rows" in f["summary"]
    assert "d2t and t2d" in f["fix"]


def test_a_map_the_head_followed_is_a_warning(capsys, tmp_path):
    f = _doctor(capsys, _child(tmp_path, "child", head_follows=True), DEMO / "draft")
    assert f["severity"] == "warning", f["summary"]
    ev = f["evidence"]
    assert ev["moved_rows"] >= 16 and not ev["parent_map_clearly_better"]
    assert ev["own_map"]["hits"] > ev["parent_map"]["hits"]


def test_the_same_map_is_info(capsys):
    f = _doctor(capsys, DEMO / "draft", DEMO / "draft")
    assert f["severity"] == "info" and f["evidence"]["moved_rows"] == 0


def test_maps_of_other_sizes_are_one_line(capsys, tmp_path):
    other = tmp_path / "small"
    shutil.copytree(DEMO / "draft", other)
    t = load_file(str(other / "model.safetensors"))
    t["d2t"] = t["d2t"][:128].contiguous()
    t["lm_head.weight"] = t["lm_head.weight"][:128].contiguous()
    save_file(t, str(other / "model.safetensors"))
    cfg = json.loads((other / "config.json").read_text())
    cfg["draft_vocab_size"] = 128
    (other / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    argv = ["doctor", str(DEMO / "draft"), str(HELD), "--samples", "2", "--device", "cpu"]
    assert main([*argv, "--parent", str(other)]) == 2
    err = capsys.readouterr().err
    assert "not one run's maps" in err and err.startswith("eagle-inspect: error: ")


pytestmark = pytest.mark.usefixtures("one_thread")


def test_compare_says_when_bs_map_moved(capsys, tmp_path):
    child = _child(tmp_path, "child", head_follows=False)
    capsys.readouterr()
    argv = ["compare", str(DEMO / "draft"), str(child), str(HELD), "--limit", "4"]
    assert main([*argv, "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert "B's vocabulary map moved against A's: " in err and " of 256 draft rows" in err
    assert f"--parent {DEMO / 'draft'}" in err
