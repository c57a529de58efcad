"""Check: does acceptance collapse further into the context? The recommended wiring's replayed
rounds (a greedy chain of ACCEPT_STEPS drafts) split at `SPLIT` tokens: the accept length of
rounds that start in the first 2K tokens against those that start later.

Public cases: an Eagle3 converter that dropped the target's rope_scaling (speculators#574),
drafts trained at a shorter max length than they serve (speculators#684: 2.30 at 2K to 1.08 at
20K; SGLang#6783): teacher-forced accuracy over short training windows never shows it. A warning
when the later rounds accept `DROP` tokens fewer per round or more, each side with `MIN_ROUNDS`
rounds at least; info with both figures otherwise; no finding when no round starts past SPLIT
(the samples are too short to tell).

Evidence: rounds and accept length on each side, the split. Fix: the draft config's rope
settings (the rope finding) and training at the serving context length.
"""

from __future__ import annotations

from dataclasses import dataclass

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.phrasing import Text
from inspector.metrics.rounds import AcceptStats

SPLIT = 2048
DROP = 0.3  # tokens per round
MIN_ROUNDS = 50


@dataclass(frozen=True)
class LongContextFacts:
    split: int
    early_rounds: int
    early: float
    late_rounds: int
    late: float

    def to_dict(self) -> dict:
        return {
            "split": self.split,
            "early": {"rounds": self.early_rounds, "accept_length": self.early},
            "late": {"rounds": self.late_rounds, "accept_length": self.late},
        }


def long_context_finding(stats: AcceptStats | None, bucket: int = 1024) -> Finding | None:
    """None when no round starts past SPLIT (or nothing was replayed). `stats.buckets` are
    `bucket`-token buckets of round starts: [rounds, accepted] each."""
    if stats is None:
        return None
    early = [0, 0]
    late = [0, 0]
    for k, (n, a) in stats.buckets.items():
        side = early if k * bucket < SPLIT else late
        side[0] += n
        side[1] += a
    if late[0] == 0 or early[0] == 0:
        return None
    facts = LongContextFacts(
        SPLIT,
        early[0],
        round(1 + early[1] / early[0], 4),
        late[0],
        round(1 + late[1] / late[0], 4),
    )
    enough = min(facts.early_rounds, facts.late_rounds) >= MIN_ROUNDS
    # rounded figures: 2.0 - 1.7 is 0.30000000000000004, and a drop of exactly DROP counts
    collapse = enough and facts.early - facts.late >= DROP - 1e-9
    text = long_context_text(facts, collapse)
    severity = Severity.WARNING if collapse else Severity.INFO
    return Finding(Kind.LONG_CONTEXT, severity, text.summary, text.fix, facts)


# --- words ---------------------------------------------------------------------------------------
def long_context_text(facts: LongContextFacts, collapse: bool) -> Text:
    """The replayed accept length before and after `facts.split` tokens of context."""
    figures = (
        f"accept len {facts.early:.2f} in rounds starting within the first {facts.split} tokens "
        f"({facts.early_rounds} rounds), {facts.late:.2f} beyond ({facts.late_rounds} rounds)"
    )
    if not collapse:
        return Text(f"{figures}: no long-context collapse")
    return Text(
        f"{figures}: acceptance collapses with context length, which accuracy over short "
        "training windows never shows",
        "check the draft's rope settings against the target's (the rope finding: a dropped "
        "rope_scaling) and train at the context length the engine serves",
    )
