"""--write-fixed end to end through the CLI: a checkpoint whose .bin ties tensors, side files,
a refused retry. (Kept apart from test_writer.py: it runs the doctor, seconds rather than
milliseconds, so the mutation run's fast selection leaves it out.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hostile import World, build_world, snapshot, tied_bin

from inspector.cli import main
from inspector.formats import load_draft


# --- --write-fixed through the CLI -------------------------------------------------------------
@pytest.fixture
def world(tmp_path: Path) -> World:
    return build_world(tmp_path / "w")


def test_write_fixed_from_a_bin_with_tied_tensors(world: World, capsys) -> None:
    tied_bin(world)
    (world.ckpt / "tokenizer.json").write_text("{}")
    (world.ckpt / "leak.txt").symlink_to(world.root / "target" / "config.json")
    before = snapshot(world.root)
    out = world.root / "fixed"
    argv = ["doctor", str(world.ckpt), str(world.samples), "--device", "cpu", "--json"]
    rc = main([*argv, "--write-fixed", str(out)])
    cap = capsys.readouterr()
    assert rc in (0, 1), cap.err
    assert json.loads(cap.out)["fixed"]["verified"] is True
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    after = snapshot(world.root)
    assert {k: v for k, v in after.items() if not k.startswith("fixed")} == before
    fixed = load_draft(out)
    assert torch.equal(fixed.weights["norm.weight"], torch.ones(64))
    # A retry into the same OUT is refused, and changes nothing.
    assert main([*argv, "--write-fixed", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert snapshot(world.root) == after
