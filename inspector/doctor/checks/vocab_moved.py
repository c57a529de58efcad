"""Check (`doctor CKPT SAMPLES --parent PARENT`): did the vocabulary map move under the weights?

A fine-tune warm-started from a parent checkpoint can regenerate its draft vocabulary (`d2t` /
`t2d`) from the new data while keeping the parent's `lm_head`: every head row then maps to
another target token than the one it was trained to predict (SpecForge PR #534). The trainer's
own metrics use the new map throughout and cannot see it; serving collapses.

The check diffs the two maps row by row (a draft row whose target id changed has moved; target
ids that left or entered the draft vocabulary), and scores the checkpoint's weights against the
full target vocabulary (a hit is the mapped argmax equal to the true target token) under its own
map and under the parent's, on the doctor's samples and its recommended wiring, with the parent
scored too for reference. A map that moved while the weights still fit the parent's one clearly
better is an error (the head never followed); a moved map the weights fit is a warning (a
regenerated map, the head retrained to it: it can be right, say so); an unmoved map is info.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.stats import clearly_better, counts_of
from inspector.doctor.wiring.search import Scorer
from inspector.draft import Draft
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.metrics import Counts

EXAMPLES = 8

__all__ = ["MovedFacts", "compare_maps", "vocab_moved_finding"]


@dataclass
class MovedFacts:
    parent: str
    child: str
    draft_vocab: int
    moved_rows: int
    examples: list[tuple[int, int, int]]  # (draft row, the parent's target id, the child's)
    left: int  # target ids in the parent's draft vocabulary, not in the child's
    entered: int
    wiring: tuple[int, ...] = ()
    own: Counts | None = None  # the child's weights under its own map
    parent_map: Counts | None = None  # the child's weights under the parent's map
    parent_own: Counts | None = None  # the parent under its own map
    parent_map_better: bool = False

    def to_dict(self) -> dict:
        def c(x: Counts | None) -> dict | None:
            return x.to_dict() if x is not None else None

        return {
            "parent": self.parent,
            "checkpoint": self.child,
            "draft_vocab": self.draft_vocab,
            "moved_rows": self.moved_rows,
            "examples": [
                {"draft_row": r, "parent_target": a, "target": b} for r, a, b in self.examples
            ],
            "left_vocab": self.left,
            "entered_vocab": self.entered,
            "wiring": list(self.wiring),
            "own_map": c(self.own),
            "parent_map": c(self.parent_map),
            "parent_own_map": c(self.parent_own),
            "parent_map_clearly_better": self.parent_map_better,
        }


def compare_maps(child: Draft, parent: Draft) -> MovedFacts:
    """The two maps, row by row (InputError when their vocabularies differ in size)."""
    a, b = parent.vocab.draft_to_target.cpu(), child.vocab.draft_to_target.cpu()
    if a.numel() != b.numel() or parent.vocab.t2d.numel() != child.vocab.t2d.numel():
        raise InputError(
            child.path or None,
            "d2t",
            f"a draft vocabulary of {b.numel()} (target {child.vocab.t2d.numel()}) against the "
            f"parent's {a.numel()} (target {parent.vocab.t2d.numel()}): not one run's maps",
        )
    moved = (a != b).nonzero().flatten().tolist()
    sa, sb = set(a.tolist()), set(b.tolist())
    return MovedFacts(
        parent=parent.path,
        child=child.path,
        draft_vocab=int(a.numel()),
        moved_rows=len(moved),
        examples=[(r, int(a[r]), int(b[r])) for r in moved[:EXAMPLES]],
        left=len(sa - sb),
        entered=len(sb - sa),
    )


def _hits(
    ev: Evaluator, samples: Sequence[int], wiring: tuple[int, ...], draft: Draft
) -> np.ndarray:
    sc = Scorer(ev, draft=draft)
    out = []
    for i in samples:
        try:
            out.append(sc.score(i, [wiring])[0].hit)
        except InputError:
            continue
    return np.concatenate(out) if out else np.zeros(0, bool)


def score_maps(
    facts: MovedFacts,
    ev: Evaluator,
    parent: Draft,
    samples: Sequence[int],
    wiring: tuple[int, ...],
) -> MovedFacts:
    """The child's weights under both maps, and the parent under its own, on these samples."""
    child = ev.draft
    own = _hits(ev, samples, wiring, child)
    swapped = replace(child, vocab=parent.vocab.to(child.device))
    under_parent = _hits(ev, samples, wiring, swapped)
    ref = _hits(ev, samples, wiring, parent.to(child.device, child.dtype))
    return replace(
        facts,
        wiring=tuple(wiring),
        own=counts_of(own),
        parent_map=counts_of(under_parent),
        parent_own=counts_of(ref),
        parent_map_better=bool(clearly_better(under_parent, own)),
    )


def vocab_moved_finding(facts: MovedFacts) -> Finding:
    moved = facts.moved_rows
    where = f"{facts.child} against its parent {facts.parent}"
    if not moved:
        return Finding(
            Kind.VOCAB_MOVED,
            Severity.INFO,
            f"{where}: the vocabulary map is the parent's ({facts.draft_vocab} draft rows, each to "
            "the same target token)",
            "",
            facts,
        )
    shown = ", ".join(f"row {r}: {a} -> {b}" for r, a, b in facts.examples)
    diff = (
        f"{moved} of {facts.draft_vocab} draft rows map to another target token than in the "
        f"parent ({shown}{', ...' if moved > len(facts.examples) else ''}); {facts.left} target "
        f"ids left the draft vocabulary, {facts.entered} entered it"
    )
    scores = ""
    if facts.own is not None and facts.parent_map is not None and facts.parent_own is not None:
        scores = (
            f"; its weights score {facts.own.fmt()} under its own map and "
            f"{facts.parent_map.fmt()} under the parent's (the parent {facts.parent_own.fmt()} "
            "under its own)"
        )
    if facts.parent_map_better:
        return Finding(
            Kind.VOCAB_MOVED,
            Severity.ERROR,
            f"{where}: the vocabulary map moved under the weights: {diff}{scores}. The lm_head "
            "rows still predict the parent's tokens: the map was regenerated when the run "
            "warm-started and the head never followed; the trainer's metrics use the new map "
            "and cannot see it",
            "write the parent's d2t and t2d into the checkpoint (its head fits them), or "
            "warm-start again keeping the parent's map",
            facts,
        )
    return Finding(
        Kind.VOCAB_MOVED,
        Severity.WARNING,
        f"{where}: the vocabulary map was regenerated: {diff}{scores}; the weights fit the new "
        "map at least as well, so the head was retrained to it",
        "nothing to repair if that was meant; serve the checkpoint with its own d2t",
        facts,
    )
