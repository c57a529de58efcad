"""What every check returns: a `Finding` (pure Python, no torch; imports no check).

A `Finding` carries its words (`summary`, `fix`, written by the check that makes it), its
figures (`facts`, a per-check dataclass; `evidence` is their JSON form) and, apart from both,
the control data a consumer acts on: the `wiring` to apply, the `config_fix` to write, the
`vocab_repair` `--write-fixed` performs. `to_dict()` is for JSON output only.

This module is a leaf: the checks import it, it imports none of them (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol


class StrEnum(str, Enum):
    """A str-valued enum that prints as its value: JSON, f-strings and comparisons with the
    strings the reports always held read the same (`enum.StrEnum` is 3.11+; we support 3.10)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Severity(StrEnum):
    """In report order: errors first (`sort_findings`)."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def is_problem(self) -> bool:
        return self is not Severity.INFO

    @property
    def rank(self) -> int:
        return list(Severity).index(self)


class Kind(StrEnum):
    """Every finding kind, one per concern (docs/doctor.md lists what each check tests)."""

    SAMPLE_INTEGRITY = "sample_integrity"  # slots of zeros, NaN/Inf, one constant state
    SLOT_IDENTITY = "slot_identity"
    TARGET_DATA = "target_data"
    FINAL_STATE = "final_state"
    VOCAB_MAP = "vocab_map"
    VOCAB_MOVED = "vocab_moved"  # the map against a parent checkpoint's (doctor --parent)
    VOCAB_CONTRACT = "vocab_contract"  # the map against the target's real, unpadded vocabulary
    PARENT_DIFF = "parent_diff"  # config fields and tensors a fine-tune changed (doctor --parent)
    QUANTIZATION = "quantization"  # an FP8 draft's acceptance against its parent (doctor --parent)
    SAMPLES = "samples"  # samples that could not be scored
    ALIGNMENT = "alignment"
    NORM_BEFORE_RESIDUAL = "norm_before_residual"
    ROPE = "rope"
    HEAD_DIM = "head_dim"
    NORM_BEFORE_FC = "norm_before_fc"
    FC_NORM = "fc_norm"
    NORM_OUTPUT = "norm_output"
    DRAFT_SHAPE = "draft_shape"  # EAGLE-3.1's two meanings, N slots, layers: who serves it
    LM_HEAD = "lm_head"
    WIRING = "wiring"
    FC_FINGERPRINT = "fc_fingerprint"
    SERVING_CONFIG = "serving_config"
    ENGINE_FEEDS = "engine_feeds"  # what each engine release reads from the config and feeds
    LONG_CONTEXT = "long_context"
    GGUF_LAYERS = "gguf_layers"  # a llama.cpp GGUF's baked target layers against the trained ones
    GGUF_CONVERSION = "gguf_conversion"  # what llama.cpp's converter changed (doctor --source)
    DRAFT_NUMERICS = "draft_numerics"  # the target's quantization an engine runs the draft in
    TRACE = "trace"  # one sample through the trained path and each engine's (doctor --trace)


class Evidence(Protocol):
    def to_dict(self) -> dict: ...


@dataclass(frozen=True)
class ConfigFix:
    """Config keys a fix sets. None leaves a key as it is; `drop_rope_scaling` removes the scaling."""

    norm_before_residual: bool | None = None
    rope_theta: float | None = None
    rope_scaling: dict | None = None
    drop_rope_scaling: bool = False
    head_dim: int | None = None

    @property
    def empty(self) -> bool:
        return self == ConfigFix()

    def merged(self, other: ConfigFix) -> ConfigFix:
        """These keys, with every key `other` sets taking its value."""
        return ConfigFix.from_dict({**self.to_dict(), **other.to_dict()})

    @classmethod
    def from_dict(cls, d: dict) -> ConfigFix:
        """The inverse of `to_dict`."""
        return cls(
            norm_before_residual=d.get("norm_before_residual"),
            rope_theta=d.get("rope_theta"),
            rope_scaling=dict(d["rope_scaling"]) if d.get("rope_scaling") is not None else None,
            drop_rope_scaling="rope_scaling" in d and d["rope_scaling"] is None,
            head_dim=d.get("head_dim"),
        )

    def to_dict(self) -> dict:
        """The keys as config.json spells them (`rope_scaling: None` removes the scaling)."""
        out: dict[str, Any] = {}
        if self.norm_before_residual is not None:
            out["norm_before_residual"] = self.norm_before_residual
        if self.rope_theta is not None:
            out["rope_theta"] = self.rope_theta
        if self.drop_rope_scaling:
            out["rope_scaling"] = None
        elif self.rope_scaling is not None:
            out["rope_scaling"] = dict(self.rope_scaling)
        if self.head_dim is not None:
            out["head_dim"] = self.head_dim
        return out


class VocabRepair(Enum):
    """How `--write-fixed` repairs a faulty stored vocab map (both from the loader's repaired map)."""

    OFFSETS = "offsets"  # d2t held absolute target ids: written as offsets, t2d rebuilt from it
    T2D_FROM_D2T = "t2d_from_d2t"  # t2d disagreed with a sound d2t: rebuilt from d2t


@dataclass
class Finding:
    """One result of one check: what is wrong (or that it is fine), the figures, and the fix.

    kind, severity: enums; plain strings of their values are accepted and converted, so a
    finding read back from JSON compares equal.
    facts: the check's typed figures; `evidence` is their JSON form.
    wiring: the wiring the finding names (the app applies it).
    config_fix: config keys the fix sets (norm_before_residual, rope and head_dim findings).
    vocab_repair: how `--write-fixed` repairs the vocab map (vocab_map findings).
    """

    kind: Kind
    severity: Severity
    summary: str
    fix: str | None = ""
    facts: Evidence | None = None
    wiring: tuple[int, ...] | None = None
    config_fix: ConfigFix | None = None
    vocab_repair: VocabRepair | None = None

    def __post_init__(self) -> None:
        self.kind = Kind(self.kind)
        self.severity = Severity(self.severity)

    @property
    def evidence(self) -> dict:
        return self.facts.to_dict() if self.facts is not None else {}

    @property
    def lines(self) -> list[str]:
        """The finding's table in words, one line a row, where its facts have one (the views
        show them under the summary)."""
        fn = getattr(self.facts, "lines", None)
        return list(fn()) if callable(fn) else []

    @property
    def is_problem(self) -> bool:
        return self.severity.is_problem

    def to_dict(self) -> dict:
        return {
            "kind": self.kind.value,
            "severity": self.severity.value,
            "summary": self.summary,
            "evidence": self.evidence,
            "fix": self.fix,
            "wiring": list(self.wiring) if self.wiring is not None else None,
            "config_fix": self.config_fix.to_dict() if self.config_fix is not None else None,
            "vocab_repair": self.vocab_repair.value if self.vocab_repair is not None else None,
        }


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; check order within a severity."""
    return sorted(findings, key=lambda f: f.severity.rank)
