"""Session fixtures of a DFlash draft trained here (`inspector.demo.block_draft`), registered in
conftest.py's `pytest_plugins`: the demo target's samples recaptured with every layer (HF 0..6),
a 3-layer DFlash draft trained on ids TRAINED (HF 1, 4, 6: not the reference's default spread
[1, 2, 3] for a 6-layer target and 3 draft layers) for STEPS steps (about 30 s of one CPU
thread), and a copy of it whose config lost its ids (the reference and SGLang then guess
[1, 2, 3]). Skipped where the bundled demo is not built."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from inspector.demo.block_draft import DEMO_STEPS, TRAINED_IDS

TRAINED = TRAINED_IDS  # dflash_config.target_layer_ids the draft is trained on
STEPS = DEMO_STEPS


@dataclass(frozen=True)
class BlockBed:
    target: Path
    samples: Path  # every layer, HF 0..6
    draft: Path  # configured with TRAINED
    lost_ids: Path  # the same weights, config without target_layer_ids


@pytest.fixture(scope="session")
def block_bed(demo, tmp_path_factory) -> BlockBed:
    """The README's block-draft case (`python -m inspector.demo block`), built once a session."""
    from inspector.demo.block_draft import build_block_demo

    root = tmp_path_factory.mktemp("block") / "case"
    made = build_block_demo(root, demo.root, log=lambda line: None)
    return BlockBed(demo.target, made["samples"], made["draft"], made["lost_ids"])
