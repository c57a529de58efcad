"""Where the bundled demo lives (assets/demo beside the package, in a checkout or editable install)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from inspector.errors import InputError


@dataclass(frozen=True)
class DemoPaths:
    root: Path

    @property
    def draft(self) -> Path:
        return self.root / "draft"

    @property
    def target(self) -> Path:
        return self.root / "target"

    @property
    def train_samples(self) -> Path:
        return self.root / "samples" / "train"

    @property
    def prompts(self) -> Path:
        """Eight short Python prompts (capture --generate and accept --live take them)."""
        return self.root / "prompts.jsonl"

    @property
    def tokenizer(self) -> Path:
        return self.target / "tokenizer.json"


def default_demo_root() -> Path:
    return Path(__file__).resolve().parent.parent / "assets" / "demo"


def demo_paths() -> DemoPaths:
    """The demo folder: $EAGLE_INSPECT_DEMO, else assets/demo next to the package."""
    root = Path(os.environ.get("EAGLE_INSPECT_DEMO") or default_demo_root())
    paths = DemoPaths(root)
    if not (paths.draft / "config.json").is_file():
        raise InputError(
            root,
            None,
            "bundled demo not found: run `eagle-inspect demo build` or pass CKPT and SAMPLES",
        )
    return paths
