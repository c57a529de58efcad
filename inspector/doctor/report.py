"""What the doctor returns: findings, the ranked wirings, the serving config (pure Python, no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field

from inspector.metrics import Counts
from inspector.sample import SlotInfo

SEVERITIES = ("error", "warning", "info")


@dataclass
class Finding:
    """One result of one check: what is wrong (or that it is fine), the figures, and the fix.

    kind: "wiring", "fc_fingerprint", "norm_before_residual", "rope", "head_dim", "vocab_map",
    "alignment", "serving_config" (plus "samples" for unreadable ones).
    wiring: the wiring the fix applies, for the finding that names one (the app applies it).
    """

    kind: str
    severity: str  # "error" | "warning" | "info"
    summary: str
    evidence: dict = field(default_factory=dict)
    fix: str = ""
    wiring: tuple[int, ...] | None = None

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "summary": self.summary,
            "evidence": self.evidence,
            "fix": self.fix,
            "wiring": list(self.wiring) if self.wiring is not None else None,
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
    sample_indices: list[int] = field(default_factory=list)
    configured_wiring: tuple[int, ...] | None = None
    pairing_shift: int = 0
    checkpoint: str = ""
    seconds: dict = field(default_factory=dict)
    fixed: dict | None = None  # what --write-fixed wrote and whether it verified

    def finding(self, kind: str) -> Finding | None:
        """The first (most severe) finding of that kind, or None."""
        return next((f for f in self.findings if f.kind == kind), None)

    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.severity in ("error", "warning")]

    def wiring_result(self, wiring: tuple[int, ...]) -> WiringResult | None:
        return next((w for w in self.wirings if w.wiring == tuple(wiring)), None)

    def to_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint,
            "best_wiring": list(self.best_wiring),
            "recommended_wiring": list(self.recommended_wiring or self.best_wiring),
            "configured_wiring": list(self.configured_wiring) if self.configured_wiring else None,
            "pairing_shift": self.pairing_shift,
            "samples": list(self.sample_indices),
            "slots": [s.to_dict(i) for i, s in enumerate(self.slots)],
            "wirings": [w.to_dict() for w in self.wirings],
            "findings": [f.to_dict() for f in self.findings],
            "serving_config": self.serving_config,
            "fixed": self.fixed,
            "seconds": self.seconds,
        }
