"""Check: are hidden states and tokens paired as every trainer pairs them?

Row j of a sample combines the slots captured at position j (computed from tokens x_0..x_j) with
the embedding of x_{j+1} and predicts x_{j+2}. A capture that lags or leads the tokens by one
position pairs each state with the wrong token; the draft then fits the samples better when they
are re-paired one position off. The check scores the leading wirings under shifts -1, 0 and +1 on
the same rows.

Evidence: all-tok counts per shift and wiring; for a clear shift, the shift, the standard and the
shifted counts and the paired z. Fix: repair the capture and regenerate the samples (the other
findings then use the shifted pairing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.phrasing import Text
from inspector.doctor.stats import clearly_better, counts_of, paired_hits_z, severity_for_gain
from inspector.doctor.wiring.search import Scorer
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formatting import pct
from inspector.metrics import Counts
from inspector.progress import StageProgress
from inspector.sample import SlotInfo
from inspector.wiring import Wiring

SHIFTS = (0, -1, 1)


@dataclass
class AlignmentFacts:
    """by_shift[shift][wiring label]: all-tok counts. shift: the pairing the doctor adopts (0 =
    as stored); standard / shifted: the best wiring's counts as stored and under that shift (or,
    when no shift wins, under the better of the two shifts, `other_shift`)."""

    by_shift: dict[int, dict[str, Counts]]
    wirings: list[tuple[int, ...]]
    shift: int
    standard: Counts
    shifted: Counts
    other_shift: int
    shifted_wiring: tuple[int, ...] | None = None
    z: float | None = None

    def to_dict(self) -> dict:
        out: dict = {
            "by_shift": {
                str(s): {label: c.to_dict() for label, c in row.items()}
                for s, row in self.by_shift.items()
            },
            "wirings": [list(w) for w in self.wirings],
        }
        if self.shift:
            out.update(
                {
                    "shift": self.shift,
                    "standard": self.standard.to_dict(),
                    "shifted": self.shifted.to_dict(),
                    "shifted_wiring": list(self.shifted_wiring or ()),
                    "z": self.z,
                }
            )
        return out


def _score_shifts(
    ev: Evaluator,
    samples: Sequence[int],
    wirings: list[tuple[int, ...]],
    progress: StageProgress | None,
) -> dict[tuple[int, tuple[int, ...]], np.ndarray]:
    hits: dict[tuple[int, tuple[int, ...]], list[np.ndarray]] = {}
    # count_from=1: shifts -1, 0 and +1 then count the same rows.
    scorers = {s: Scorer(ev, shift=s, count_from=1) for s in SHIFTS}
    for n, i in enumerate(samples):  # sample-major: the sample's fc projections stay cached
        try:
            res = {s: sc.score(i, wirings) for s, sc in scorers.items()}
        except InputError:
            continue
        for s, rs in res.items():
            for w, r in zip(wirings, rs, strict=True):
                hits.setdefault((s, w), []).append(r.hit)
        if progress is not None:
            progress("alignment", n + 1, len(samples))
    return {k: np.concatenate(v) for k, v in hits.items()}


def alignment_check(
    ev: Evaluator,
    samples: Sequence[int],
    wirings: Sequence[tuple[int, ...]],
    infos: Sequence[SlotInfo],
    progress: StageProgress | None = None,
) -> tuple[Finding, int]:
    """Re-pair hidden states and tokens one position off; returns the finding and the pairing shift
    the rest of the doctor should use (0 unless a shift is clearly better)."""
    wirings = list(dict.fromkeys(tuple(w) for w in wirings))
    arr = _score_shifts(ev, samples, wirings, progress)
    empty = np.zeros(0, bool)

    def best_for(s: int) -> tuple[tuple[int, ...], np.ndarray]:
        w = max(wirings, key=lambda w: int(arr.get((s, w), empty).sum()))
        return w, arr.get((s, w), empty)

    w0, h0 = best_for(0)
    best_shift, best_w, best_h = 0, w0, h0
    for s in (-1, 1):
        w, h = best_for(s)
        if clearly_better(h, best_h):
            best_shift, best_w, best_h = s, w, h
    other = best_shift or max((-1, 1), key=lambda s: best_for(s)[1].sum())
    facts = AlignmentFacts(
        by_shift={
            s: {Wiring(w).label(infos): counts_of(arr.get((s, w), empty)) for w in wirings}
            for s in SHIFTS
        },
        wirings=wirings,
        shift=best_shift,
        standard=counts_of(h0),
        shifted=counts_of(best_h if best_shift else best_for(other)[1]),
        other_shift=other,
    )
    if best_shift == 0:
        text = alignment_text(facts)
        return Finding(Kind.ALIGNMENT, Severity.INFO, text.summary, text.fix, facts), 0
    facts.shifted_wiring = best_w
    facts.z = paired_hits_z(best_h, h0)
    severity = severity_for_gain(float(best_h.mean() - h0.mean()))
    text = alignment_text(facts)
    return Finding(Kind.ALIGNMENT, severity, text.summary, text.fix, facts), best_shift


# --- words ---------------------------------------------------------------------------------------
def alignment_text(facts: AlignmentFacts) -> Text:
    std, shifted = pct(facts.standard.acc), pct(facts.shifted.acc)
    if not facts.shift:
        return Text(
            f"hidden states and tokens pair as trained: standard pairing {std}, shifted by "
            f"{facts.other_shift:+d} {shifted}"
        )
    what = "each stored hidden state belongs one position " + (
        "earlier (the states lag the tokens by one)"
        if facts.shift == 1
        else "later (the states lead the tokens by one)"
    )
    return Text(
        f"samples are paired one position off: re-pairing hidden states with tokens shifted by "
        f"{facts.shift:+d} scores {shifted} vs {std} as stored; {what}. The other findings use the "
        "shifted pairing",
        "fix the capture / data generation so that the hidden state at position t comes from "
        "tokens x_0..x_t (row j pairs the states at j with x_{j+1} and predicts x_{j+2}), "
        "regenerate the samples, and retrain if the draft was trained on them",
    )
