"""Check: the samples the wiring search could not score (a missing key, a wrong shape, NaN...).

The other checks run on the rest; this finding names every one left out (its file, field and
reason, up to five). A warning: the report is sound on fewer samples than asked for.

Evidence: sample index -> why. Fix: repair or remove those files.
"""

from __future__ import annotations

from dataclasses import dataclass

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.phrasing import Text

SHOWN = 5  # samples named in the summary; the evidence lists all


@dataclass(frozen=True)
class SkippedFacts:
    skipped: dict[int, str]

    def to_dict(self) -> dict:
        return {"skipped": {str(k): v for k, v in self.skipped.items()}}


def skipped_finding(skipped: dict[int, str], searched: int) -> Finding:
    """`skipped`: sample index -> why it could not be scored, of `searched` samples."""
    text = skipped_text(skipped, searched)
    facts = SkippedFacts(dict(skipped))
    return Finding(Kind.SAMPLES, Severity.WARNING, text.summary, text.fix, facts)


# --- words ---------------------------------------------------------------------------------------
def skipped_text(skipped: dict[int, str], searched: int) -> Text:
    """Names every sample that could not be scored (its file, field and reason), up to five."""
    shown = [f"#{i} {why}" for i, why in sorted(skipped.items())[:SHOWN]]
    more = f"; and {len(skipped) - SHOWN} more" if len(skipped) > SHOWN else ""
    return Text(
        f"{len(skipped)} of {searched} samples could not be scored: " + "; ".join(shown) + more,
        "fix or remove those sample files",
    )
