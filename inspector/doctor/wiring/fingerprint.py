"""Check: the fc fingerprint, which slot each fc block was trained on, without any label.

Captured states grow in norm with depth (the embedding ~1, late layers ~100), and training scales
each fc column block to the slot it receives, so ||W_b s|| is about the same for every block under
the trained wiring. A named wiring (configured, train, serve) that feeds block b a slot whose
projected norm is off by more than NORM_RATIO_FLAG from the best wiring's slot is flagged.

Evidence: fc block weight norms, mean slot norms, the projected norm of every (block, slot), the
flagged blocks. A warning when the configured wiring is flagged and the accuracy agrees.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.phrasing import Text
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.sample import SlotInfo
from inspector.wiring import Wiring

NORM_RATIO_FLAG = 2.0  # projected norm off by this factor from the best wiring's
FINGERPRINT_UNREADABLE = "fc fingerprint: no readable sample"


@dataclass(frozen=True)
class FlaggedBlock:
    wiring: str  # the named wiring ("configured", "train", "serve")
    block: int
    slot: str
    norm: float
    best_slot: str
    best_norm: float
    ratio: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class FingerprintFacts:
    block_weight_norms: list[float]
    slot_norms: list[float]
    projected_norms: list[list[float]]  # [block][slot]
    slots: list[str]
    best_wiring: tuple[int, ...]
    best_label: str
    best_projected: list[float]
    flagged: list[FlaggedBlock] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "block_weight_norms": [round(x, 4) for x in self.block_weight_norms],
            "slot_norms": [round(x, 3) for x in self.slot_norms],
            "projected_norms": [[round(x, 3) for x in row] for row in self.projected_norms],
            "slots": list(self.slots),
            "best_wiring": list(self.best_wiring),
            "best_projected": [round(x, 3) for x in self.best_projected],
            "flagged": [f.to_dict() for f in self.flagged],
        }

    @property
    def flagged_wirings(self) -> list[str]:
        return sorted({f.wiring for f in self.flagged})

    @property
    def worst(self) -> FlaggedBlock:
        return max(self.flagged, key=lambda f: abs(math.log(f.ratio)) if f.ratio > 0 else math.inf)


def _norms(ev: Evaluator, samples: Sequence[int]) -> tuple[list, list]:
    """Per readable sample: projected norms [N, S] and mean slot norms over masked rows."""
    per, slot_norm = [], []
    for i in samples:
        try:
            per.append(ev.slot_projection_norms(i))
            s = ev.samples[i]
        except InputError:
            continue
        m = s.loss_mask.bool()
        rows = [t.float().norm(dim=-1) for t in s.slots]
        slot_norm.append([float(r[m].mean() if bool(m.any()) else r.mean()) for r in rows])
    return per, slot_norm


def _flag(
    proj: np.ndarray,
    best: tuple[int, ...],
    named: dict[str, tuple[int, ...]],
    infos: Sequence[SlotInfo],
) -> list[FlaggedBlock]:
    def label(s: int) -> str:
        return infos[s].label if s < len(infos) else f"s{s}"

    flagged = []
    for name, w in named.items():
        if w == best:
            continue
        for b, (s, s_best) in enumerate(zip(w, best, strict=True)):
            if s == s_best:
                continue
            ratio = float(proj[b, s] / proj[b, s_best]) if proj[b, s_best] > 0 else math.inf
            if ratio > NORM_RATIO_FLAG or ratio < 1 / NORM_RATIO_FLAG:
                flagged.append(
                    FlaggedBlock(
                        name,
                        b,
                        label(s),
                        round(float(proj[b, s]), 3),
                        label(s_best),
                        round(float(proj[b, s_best]), 3),
                        round(ratio, 3),
                    )
                )
    return flagged


def fc_fingerprint(
    ev: Evaluator,
    samples: Sequence[int],
    best: tuple[int, ...],
    named: dict[str, tuple[int, ...]],
    infos: Sequence[SlotInfo],
    *,
    corroborates: bool = True,
) -> Finding:
    """Norm of each fc block and of its output for every slot; flags blocks that a named wiring
    feeds a slot whose projected norm is far from the best wiring's (no labels needed).

    A warning when the configured wiring is flagged and `corroborates` (the accuracy says the
    configured wiring is wrong too); info otherwise."""
    per, slot_norm = _norms(ev, samples)
    if not per:
        return Finding(Kind.FC_FINGERPRINT, Severity.INFO, FINGERPRINT_UNREADABLE)
    proj = np.mean(per, axis=0)  # [N, S]
    facts = FingerprintFacts(
        block_weight_norms=list(ev.draft.fc_block_norms()),
        slot_norms=np.mean(slot_norm, axis=0).tolist(),
        projected_norms=proj.tolist(),
        slots=[s.label for s in infos],
        best_wiring=tuple(best),
        best_label=Wiring(tuple(best)).label(infos),
        best_projected=[float(proj[b, s]) for b, s in enumerate(best)],
        flagged=_flag(proj, tuple(best), named, infos),
    )
    text = fingerprint_text(facts)
    if not facts.flagged:
        return Finding(Kind.FC_FINGERPRINT, Severity.INFO, text.summary, text.fix, facts)
    flagged = "configured" in facts.flagged_wirings and corroborates
    severity = Severity.WARNING if flagged else Severity.INFO
    return Finding(Kind.FC_FINGERPRINT, severity, text.summary, text.fix, facts, wiring=tuple(best))


# --- words ---------------------------------------------------------------------------------------
def fingerprint_text(facts: FingerprintFacts) -> Text:
    if not facts.flagged:
        return Text(
            "fc fingerprint: block norms "
            + ", ".join(f"{x:.3g}" for x in facts.block_weight_norms)
            + f"; the best wiring {facts.best_label} gives projected norms "
            + ", ".join(f"{x:.3g}" for x in facts.best_projected)
        )
    names = facts.flagged_wirings
    many = len(names) > 1
    joined = ", ".join(names[:-1]) + " and " + names[-1] if many else names[0]
    w = facts.worst
    return Text(
        f"fc fingerprint: the {joined} wiring{'s' if many else ''} feed{'' if many else 's'} "
        f"{len(facts.flagged)} fc block(s) a slot the block was not trained on, e.g. block "
        f"{w.block} gets {w.slot} (projected norm {w.norm:.3g}) where the best wiring gives "
        f"{w.best_slot} ({w.best_norm:.3g}, x{w.ratio:.2g})",
        "feed each block the slot of the best wiring (see the wiring finding)",
    )
