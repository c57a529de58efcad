"""The target class a target folder's config.json, or a data_config.json, names; and the
hyper-connection streams it declares (`hc_mult`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from inspector.engines.target_class import TargetClass, target_class


def read_target_class(path: str | Path | None) -> TargetClass | None:
    """The class a target folder's config.json (or that file itself) names; None when there is
    none or it cannot be read (the class only words advice: a bad config is not an error here).
    """
    cfg = _target_config(path)
    return target_class(cfg[1]) if cfg is not None else None


def _target_config(path: str | Path | None) -> tuple[Path, dict] | None:
    """A target folder's config.json (or that file itself) and its object; None when there is
    none or it cannot be read: what the target says only words advice, so a bad file is none."""
    if path is None:
        return None
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return (path, cfg) if isinstance(cfg, dict) else None


def _recorded_target(path: str | Path | None) -> tuple[Path, Mapping | Path] | None:
    """What a data_config.json records in `target`: the target's config itself (a mapping), or
    the target folder (relative to the file's own); None when it records neither or cannot be
    read."""
    if path is None or Path(path).is_dir():  # a data_config.json, never a folder's config.json
        return None
    read = _target_config(path)
    if read is None:
        return None
    file, cfg = read
    target = cfg.get("target")
    if isinstance(target, Mapping):
        return file, target
    if isinstance(target, str) and target.strip():
        return file, file.parent / target
    return None


def data_config_target(path: str | Path | None) -> TargetClass | None:
    """The target class a data_config.json records in `target`: the target's config itself, or
    the target folder (relative to the file's own)."""
    recorded = _recorded_target(path)
    if recorded is None:
        return None
    target = recorded[1]
    return target_class(target) if isinstance(target, Mapping) else read_target_class(target)


@dataclass(frozen=True)
class HyperConnections:
    """A target's hyper-connection residual streams, as its config declares them."""

    hc_mult: int  # the residual streams each layer carries (> 1)
    source: str  # the file (and key) that declares them

    @property
    def text(self) -> str:
        return f"hc_mult = {self.hc_mult} ({self.source})"


def hc_mult_of(cfg: object) -> int | None:
    """`hc_mult` of a config dict (at the top level or under `text_config`), where an integer."""
    if not isinstance(cfg, Mapping):
        return None
    for c in (cfg, cfg.get("text_config")):
        if isinstance(c, Mapping):
            x = c.get("hc_mult")
            if isinstance(x, int) and not isinstance(x, bool):
                return x
    return None


def read_hyper_connections(path: str | Path | None) -> HyperConnections | None:
    """The streams a target folder's config.json (or that file) declares, where hc_mult > 1."""
    if path is None or Path(path).is_dir():  # a data_config.json, never a folder's config.json
        return None
    read = _target_config(path)
    if read is None:
        return None
    file, cfg = read
    n = hc_mult_of(cfg)
    return HyperConnections(n, f"{file}: hc_mult") if n is not None and n > 1 else None


def data_config_hyper_connections(path: str | Path | None) -> HyperConnections | None:
    """The streams the target a data_config.json records in `target` declares (its config
    itself, or the target folder relative to the file's own), where hc_mult > 1."""
    recorded = _recorded_target(path)
    if recorded is None:
        return None
    file, target = recorded
    if not isinstance(target, Mapping):
        return read_hyper_connections(target)
    n = hc_mult_of(target)
    return HyperConnections(n, f"{file}: target.hc_mult") if n is not None and n > 1 else None
