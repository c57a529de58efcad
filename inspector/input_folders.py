"""The one rule for what a tool that only reads its inputs may never write into: the folders its
inputs live in (a folder itself, a file's folder, a glob's fixed leading part). Export and every
writer (`--write-fixed`, capture's `--out`, the live loop's `--out`) check against it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def input_folders(inputs: Iterable[str | Path | None]) -> list[Path]:
    """The resolved folders the inputs live in (None entries skipped)."""
    out = []
    for p in inputs:
        if p is None:
            continue
        parts = Path(p).parts
        n = next((i for i, q in enumerate(parts) if any(c in q for c in "*?[")), len(parts))
        path = Path(*parts[:n]) if n else Path(".")
        out.append((path if path.is_dir() else path.parent).resolve())
    return out


def enclosing_input(target: Path, inputs: Iterable[str | Path | None]) -> Path | None:
    """The input folder that `target` (resolved) is or lies inside, None when it is outside all."""
    for folder in input_folders(inputs):
        if target == folder or folder in target.parents:
            return folder
    return None
