"""Small helpers several test modules share (imported as `support`, like `hostile`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[1]


def edited_copy(
    src: Path,
    dst: Path,
    *,
    tensors: Callable[[dict], dict] | None = None,
    config: Callable[[dict], None] | None = None,
) -> Path:
    """A copy of a draft folder: `tensors(weights)` returns tensors to add or replace,
    `config(cfg)` edits the config in place."""
    shutil.copytree(src, dst)
    if tensors is not None:
        w = load_file(str(dst / "model.safetensors"))
        w.update(tensors(w))
        save_file(w, str(dst / "model.safetensors"))
    if config is not None:
        cfg = json.loads((dst / "config.json").read_text())
        config(cfg)
        (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def python_output(code: str) -> subprocess.CompletedProcess:
    """`code` run by a fresh interpreter on this checkout (what a module imports at load)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
