"""The target class a target folder's config.json, or a data_config.json, names."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from inspector.engines.target_class import TargetClass, target_class


def read_target_class(path: str | Path | None) -> TargetClass | None:
    """The class a target folder's config.json (or that file itself) names; None when there is
    none or it cannot be read (the class only words advice: a bad config is not an error here).
    """
    if path is None:
        return None
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return target_class(cfg) if isinstance(cfg, dict) else None


def data_config_target(path: str | Path | None) -> TargetClass | None:
    """The target class a data_config.json records in `target`: the target's config itself, or
    the target folder (relative to the file's own)."""
    if path is None:
        return None
    path = Path(path)
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    target = cfg.get("target") if isinstance(cfg, dict) else None
    if isinstance(target, Mapping):
        return target_class(target)
    if isinstance(target, str) and target.strip():
        return read_target_class(path.parent / target)
    return None
