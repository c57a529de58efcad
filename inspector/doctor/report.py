"""What the doctor returns: the findings, the ranked wirings, the serving config, the fix plan
(pure Python, no torch). `Finding` itself is `inspector.doctor.finding`'s (re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from inspector.doctor.budget import DoctorPlan
from inspector.doctor.finding import (
    ConfigFix,
    Evidence,
    Finding,
    Kind,
    Severity,
    VocabRepair,
    sort_findings,
)
from inspector.doctor.serving import ServingConfig
from inspector.formats.sample_set import SampleWarning, SkippedSample
from inspector.metrics import Counts
from inspector.sample import SlotInfo

__all__ = [  # Finding and its parts are re-exported: every consumer reads the report from here
    "ConfigFix",
    "DoctorReport",
    "Evidence",
    "Finding",
    "FixPlan",
    "FixResult",
    "Kind",
    "Severity",
    "Verification",
    "VocabRepair",
    "WiringResult",
    "sort_findings",
]


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


@dataclass
class DoctorReport:
    best_wiring: tuple[int, ...]
    wirings: list[WiringResult]
    findings: list[Finding]
    # None where no check could score the draft (the preflight's reports): JSON `{}`.
    serving_config: ServingConfig | None
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
        return any(f.severity is Severity.ERROR for f in self.findings)

    def finding(self, kind: Kind | str) -> Finding | None:
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
            "serving_config": self.serving_config.to_dict()
            if self.serving_config is not None
            else {},
            "fixed": self.fixed.to_dict() if self.fixed is not None else None,
            "skipped": [e.to_dict() for e in self.skipped],
            "warnings": [w.to_dict() for w in self.warnings],
            "reading": self.plan.to_dict() if self.plan is not None else None,
            "seconds": self.seconds,
        }
