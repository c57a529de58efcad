"""What the doctor returns: typed findings, the ranked wirings, the fix plan (pure Python, no torch).

A `Finding` carries its wording (`summary`, `fix`, rendered once by `inspector.doctor.wording`),
its figures (`facts`, a per-check dataclass; `evidence` is their JSON form) and, apart from both,
the control data a consumer acts on: the `wiring` to apply, the `config_fix` to write, the
`vocab_repair` `--write-fixed` performs. `to_dict()` is for JSON output only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Protocol

from inspector.doctor.budget import DoctorPlan
from inspector.formats.sample_set import SampleWarning, SkippedSample
from inspector.metrics import Counts
from inspector.sample import SlotInfo

SEVERITIES = ("error", "warning", "info")
PROBLEM_SEVERITIES = ("error", "warning")


class Evidence(Protocol):
    def to_dict(self) -> dict: ...


# The chain the wiring finding quotes engines' accept length for (a common
# --speculative-num-steps / num_speculative_tokens; `eagle-inspect accept` takes any).
ACCEPT_STEPS = 3
# Tokens of the doctor's samples that replay covers (the first samples up to this many, one at
# least): its cost is ACCEPT_STEPS draft forwards per token and wiring.
ACCEPT_TOKENS = 4096


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


class WiringCase(Enum):
    NOT_ASCENDING = "not_ascending"  # the recommended order is one no engine can feed
    CONFIG_WRONG = "config_wrong"  # the config selects a clearly worse wiring
    CONFIG_CLOSE = "config_close"  # the config selects another wiring, not clearly worse
    CONFIG_UNMATCHED = "config_unmatched"  # the config's ids match no slot as read
    UNCONFIGURED = "unconfigured"  # the config names no aux layer ids
    CONFIGURED = "configured"  # the config selects the recommended wiring


@dataclass
class Finding:
    """One result of one check: what is wrong (or that it is fine), the figures, and the fix.

    kind: "slot_identity", "wiring", "fc_fingerprint", "norm_before_residual", "rope",
      "head_dim", "vocab_map", "alignment", "serving_config", "long_context" (and the kinds
      docs/doctor.md lists; "samples" for unreadable ones).
    facts: the check's typed figures; `evidence` is their JSON form.
    wiring: the wiring the finding names (the app applies it).
    config_fix: config keys the fix sets (norm_before_residual, rope and head_dim findings).
    vocab_repair: how `--write-fixed` repairs the vocab map (vocab_map findings).
    """

    kind: str
    severity: str  # "error" | "warning" | "info"
    summary: str
    fix: str = ""
    facts: Evidence | None = None
    wiring: tuple[int, ...] | None = None
    config_fix: ConfigFix | None = None
    vocab_repair: VocabRepair | None = None

    @property
    def evidence(self) -> dict:
        return self.facts.to_dict() if self.facts is not None else {}

    @property
    def is_problem(self) -> bool:
        return self.severity in PROBLEM_SEVERITIES

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "summary": self.summary,
            "evidence": self.evidence,
            "fix": self.fix,
            "wiring": list(self.wiring) if self.wiring is not None else None,
            "config_fix": self.config_fix.to_dict() if self.config_fix is not None else None,
            "vocab_repair": self.vocab_repair.value if self.vocab_repair is not None else None,
        }


@dataclass
class WiringResult:
    """Step-0 all-tok accuracy of one wiring on the searched samples.

    complete: evaluated on every searched sample. False when the search dropped it early as
    clearly worse than the leader; its counts then cover only the first `samples` samples.
    mean_logp: mean log-probability of the true token over in-vocab positions (the tie-break).
    roles: which named wirings it is ("configured", "train", "serve").
    """

    wiring: tuple[int, ...]
    label: str
    all_tok: Counts
    samples: int
    complete: bool = True
    mean_logp: float | None = None
    roles: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "wiring": list(self.wiring),
            "label": self.label,
            "all_tok": self.all_tok.to_dict(),
            "samples": self.samples,
            "complete": self.complete,
            "mean_logp": self.mean_logp,
            "roles": list(self.roles),
        }


@dataclass(frozen=True)
class FixPlan:
    """What `--write-fixed` changes, computed from a report before anything is written.

    wiring: the recommended wiring (fc block b <- slot wiring[b]).
    block_order: new fc block k is old block block_order[k] (the per-block fc norms and the blocks
      of input_norm move with it), so the ascending `fixed_wiring` computes the same function.
    hf_indices: HF indices of `fixed_wiring` (ascending) for the engine keys, None when unknown.
    """

    wiring: tuple[int, ...]
    block_order: tuple[int, ...]
    fixed_wiring: tuple[int, ...]
    hf_indices: tuple[int, ...] | None
    config_fix: ConfigFix
    vocab_repair: VocabRepair | None

    @property
    def permutes(self) -> bool:
        return self.block_order != tuple(range(len(self.block_order)))

    def to_dict(self) -> dict:
        return {
            "block_order": list(self.block_order),
            "wiring": list(self.fixed_wiring),
            "hf_indices": list(self.hf_indices) if self.hf_indices is not None else None,
            "config_fixes": self.config_fix.to_dict(),
            "vocab_repair": self.vocab_repair.value if self.vocab_repair is not None else None,
        }


@dataclass(frozen=True)
class Verification:
    """The written checkpoint scored against the original on the doctor's samples.

    expected: the original draft (config fixes applied in memory) under the recommended wiring;
    fixed: the written checkpoint under the plan's ascending wiring, on the same positions.
    positions_differing: in-vocab positions whose predicted token differs between the two.
    tolerance: how many may differ, and by how many the hits may (float rounding can flip a
      near-tie): 1 per TOLERANCE_PER positions, at least 1.
    """

    TOLERANCE_PER: ClassVar[int] = 500

    expected: Counts
    fixed: Counts
    positions_differing: int

    @property
    def tolerance(self) -> int:
        return max(1, self.expected.total // self.TOLERANCE_PER)

    @property
    def verified(self) -> bool:
        return (
            self.expected.total == self.fixed.total
            and self.positions_differing <= self.tolerance
            and abs(self.expected.hits - self.fixed.hits) <= self.tolerance
        )


@dataclass
class FixResult:
    """What `--write-fixed` wrote (`path`, from `source`), the plan, the changes, and how the
    written checkpoint scored (`verification`)."""

    path: str
    source: str
    plan: FixPlan
    changes: list[str]
    verification: Verification

    @property
    def verified(self) -> bool:
        return self.verification.verified

    def to_dict(self) -> dict:
        v = self.verification
        return {
            "path": self.path,
            "source": self.source,
            **self.plan.to_dict(),
            "changes": list(self.changes),
            "expected": v.expected.to_dict(),
            "fixed": v.fixed.to_dict(),
            "positions_differing": v.positions_differing,
            "verified": self.verified,
        }


def _severity_rank(f: Finding) -> int:
    return SEVERITIES.index(f.severity) if f.severity in SEVERITIES else len(SEVERITIES)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; check order within a severity."""
    return sorted(findings, key=_severity_rank)


@dataclass
class DoctorReport:
    best_wiring: tuple[int, ...]
    wirings: list[WiringResult]
    findings: list[Finding]
    serving_config: dict
    # What to serve: best_wiring, or the best ascending wiring when best_wiring is not ascending
    # and not clearly better than it (no permuted checkpoint needed). The wiring finding names it.
    recommended_wiring: tuple[int, ...] | None = None
    slots: list[SlotInfo] = field(default_factory=list)
    # What each slot is and what decided it (a `slot_identity.SlotIdentity`; its JSON form).
    slot_identity: Evidence | None = None
    sample_indices: list[int] = field(default_factory=list)
    configured_wiring: tuple[int, ...] | None = None
    pairing_shift: int = 0
    checkpoint: str = ""
    seconds: dict = field(default_factory=dict)
    fixed: FixResult | None = None  # what --write-fixed wrote and whether it verified
    skipped: list[SkippedSample] = field(default_factory=list)  # samples that could not be read
    warnings: list[SampleWarning] = field(default_factory=list)  # what the scored samples hold
    plan: DoctorPlan | None = None  # how much of the samples was read (the compute budget)

    @property
    def serve_wiring(self) -> tuple[int, ...]:
        """The wiring to serve (the recommended one)."""
        return tuple(self.recommended_wiring or self.best_wiring)

    @property
    def has_errors(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    def finding(self, kind: str) -> Finding | None:
        """The first (most severe) finding of that kind, or None."""
        return next((f for f in self.findings if f.kind == kind), None)

    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.is_problem]

    def wiring_result(self, wiring: tuple[int, ...]) -> WiringResult | None:
        return next((w for w in self.wirings if w.wiring == tuple(wiring)), None)

    def to_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint,
            "best_wiring": list(self.best_wiring),
            "recommended_wiring": list(self.serve_wiring),
            "configured_wiring": list(self.configured_wiring) if self.configured_wiring else None,
            "pairing_shift": self.pairing_shift,
            "samples": list(self.sample_indices),
            "slots": [s.to_dict(i) for i, s in enumerate(self.slots)],
            "slot_identity": self.slot_identity.to_dict() if self.slot_identity else None,
            "wirings": [w.to_dict() for w in self.wirings],
            "findings": [f.to_dict() for f in self.findings],
            "serving_config": self.serving_config,
            "fixed": self.fixed.to_dict() if self.fixed is not None else None,
            "skipped": [e.to_dict() for e in self.skipped],
            "warnings": [w.to_dict() for w in self.warnings],
            "reading": self.plan.to_dict() if self.plan is not None else None,
            "seconds": self.seconds,
        }
