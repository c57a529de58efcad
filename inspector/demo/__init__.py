"""Builds the bundled demo: a small Llama-style target trained here on the Python standard library,
speculators-v1 samples captured from it, and an EAGLE-3 draft trained on those samples.

The demo reproduces the real incident the inspector exists for: a draft trained on the slots
[embed, low, middle] (speculators v1 feeds all slots but the last) scores well under that wiring and
collapses when serving feeds [low, middle, last].

Entry points: ``python -m inspector.demo build [--out DIR] [--seed N]`` and :func:`build`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from inspector.demo_paths import default_demo_root

# Where the committed demo lives (the one definition: inspector.demo_paths).
DEFAULT_OUT = default_demo_root()


def build(
    out: Path = DEFAULT_OUT,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    plan: Any = None,
) -> dict[str, Any]:
    """Build the whole demo into ``out``; returns the build_info dict (see :mod:`inspector.demo.build`).

    ``progress`` receives one line per stage (default: stderr); ``plan`` is an optional
    :class:`inspector.demo.build.BuildPlan` (default: the committed demo's sizes).
    Imported lazily so that ``import inspector.demo`` stays cheap (no torch) for the CLI.
    """
    from inspector.demo.build import build as _build

    return _build(out, seed=seed, progress=progress, plan=plan)


__all__ = ["DEFAULT_OUT", "build"]
