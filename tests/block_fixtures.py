"""Session fixtures of a DFlash draft trained here (`inspector.demo.block_draft`), registered in
conftest.py's `pytest_plugins`: the demo target's samples recaptured with every layer (HF 0..6),
a 3-layer DFlash draft trained on ids TRAINED (HF 1, 4, 6: not the reference's default spread
[1, 2, 3] for a 6-layer target and 3 draft layers) for STEPS steps (about 30 s of one CPU
thread), and a copy of it whose config lost its ids (the reference and SGLang then guess
[1, 2, 3]). Skipped where the bundled demo is not built."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

TRAINED = (0, 3, 5)  # dflash_config.target_layer_ids the draft is trained on
STEPS = 400


@dataclass(frozen=True)
class BlockBed:
    target: Path
    samples: Path  # every layer, HF 0..6
    draft: Path  # configured with TRAINED
    lost_ids: Path  # the same weights, config without target_layer_ids
    seconds: float


@pytest.fixture(scope="session")
def block_bed(demo, tmp_path_factory) -> BlockBed:
    import torch

    from inspector.demo.block_draft import BlockPlan, load_target, recapture, train_block_draft

    root = tmp_path_factory.mktemp("block")
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the bits depend on it, and one thread beats two on a busy box
    try:
        started = time.perf_counter()
        samples = recapture(load_target(demo.target), demo.train_samples, root / "samples")
        draft = train_block_draft(
            root / "draft", samples, demo.target, TRAINED, BlockPlan(steps=STEPS)
        )
        seconds = time.perf_counter() - started
    finally:
        torch.set_num_threads(before)
    lost = root / "lost_ids"
    shutil.copytree(draft, lost)
    cfg = json.loads((lost / "config.json").read_text())
    del cfg["dflash_config"]["target_layer_ids"]
    (lost / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return BlockBed(demo.target, samples, draft, lost, seconds)
