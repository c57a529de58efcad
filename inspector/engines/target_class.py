"""A target model's class as its config.json names it (`architectures`, `model_type`): what an
engine's per-model-file rules are keyed by. Pure; `formats.target_config` reads it from files."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class TargetClass:
    """A target model's class as its config.json names it."""

    architecture: str | None  # the first of `architectures`
    model_type: str | None

    @property
    def name(self) -> str:
        return self.architecture or self.model_type or "?"


def target_class(source: object) -> TargetClass | None:
    """The class `source` names: a TargetClass, a config dict (`architectures` / `model_type`;
    also data_config.json's `target` entry), or a name: a class (CamelCase, as `architectures`
    lists it) or a model_type. None when it names none. A folder is read by `read_target_class`.
    """
    if source is None or isinstance(source, TargetClass):
        return source
    if isinstance(source, Mapping):
        archs = source.get("architectures")
        arch = (
            next((a for a in archs if isinstance(a, str) and a), None)
            if isinstance(archs, list)
            else None
        )
        kind = source.get("model_type")
        kind = kind if isinstance(kind, str) and kind else None
        return TargetClass(arch, kind) if arch or kind else None
    if isinstance(source, str) and source.strip():
        name = source.strip()
        return TargetClass(name, None) if name[:1].isupper() else TargetClass(None, name)
    return None
