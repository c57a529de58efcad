"""The trace as one doctor finding: per engine path, where it parts from the trained path, by
how much (the norm ratio and the relative difference), the cause, and what that does to the
proposals.

Severity: error where a path parts and fewer than `AGREE` of its proposals are the trained
path's; warning where it parts and the proposals still agree, or where the dtype alone explains
every parting (the rounding bound does not count attention's amplification); info where every
path computes what the trainer did (every stage within rounding).
"""

from __future__ import annotations

from dataclasses import dataclass

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.trace.stage_compare import PathTrace, Trace
from inspector.formatting import pct

AGREE = 0.95

# what makes each cause go away, in words that name no engine (the difference's own words do)
FIX = {
    "embedding scale": "serve with a release that scales the embedding rows as the trainer did, "
    "or retrain at the scale the engine applies",
    "norm flag": "serve with a release that reads the flag, or retrain with the flag the engine "
    "runs (see the norm_before_residual finding)",
    "dtype": "trace it in float32 beside the stored dtype (the rounding bound does not count "
    "attention's amplification): a real dtype fault, an overflow or a lost scale, departs far "
    "beyond it",
    "vocabulary map": "give the engine the draft's own map (see the vocab_map finding)",
    "shift": "pair each token with the features of the position before it, as the trainer did",
    "wiring": "feed the layers the draft was trained on (see the wiring and engine_feeds findings)",
    "dropped feature": "serve with an engine that runs the feature (see the draft_shape finding)",
}


def _num(x: float) -> str:
    return f"{x:.3g}" if x == x else "n/a"


def path_line(p: PathTrace) -> str:
    """One line: where `p` parts and why, or that it does not."""
    first = p.first_parted
    tail = (
        f"proposals agree on {pct(p.agreement)} of {p.rows} rows "
        f"(accuracy {pct(p.accuracy_trained)} trained, {pct(p.accuracy_served)} served)"
    )
    label = p.label
    if p.note:  # the engine's own reading fails: the rest is traced over the trained wiring
        label += f" ({p.note}; traced over the trained wiring)"
    if first is None:
        return f"{label}: every stage within rounding of the trained path; {tail}"
    causes = p.causes
    why = "; ".join(f"{d.cause}: {d.words}" for d in causes) if causes else "no known cause"
    return (
        f"{label}: parts at {first.stage}, norm ratio {_num(first.ratio)} (served/trained), "
        f"relative difference {_num(first.rel)}; cause: {why}; {tail}"
    )


@dataclass(frozen=True)
class TraceFacts:
    trace: Trace

    def to_dict(self) -> dict:
        return self.trace.to_dict()

    def lines(self) -> list[str]:
        t = self.trace
        out = [f"sample {t.sample}, {t.rows} rows, against the trained path ({t.trained})"]
        for p in self.trace.paths:
            out.append(path_line(p))
            out += [f"{p.label}, known and not modelled here: {k}" for k in p.known]
        return out


def trace_finding(trace: Trace) -> Finding:
    parted = [p for p in trace.paths if p.first_parted is not None]
    facts = TraceFacts(trace)
    if not parted:
        return Finding(
            Kind.TRACE,
            Severity.INFO,
            f"train/serve trace: {len(trace.paths)} engine path(s) compute what the trainer did "
            f"on sample {trace.sample} (every stage within rounding)",
            None,
            facts,
        )
    worst = min(parted, key=lambda p: p.agreement)
    severity = Severity.ERROR if worst.agreement < AGREE else Severity.WARNING
    if all({d.cause for d in p.causes} == {"dtype"} for p in parted):
        severity = Severity.WARNING  # a lead, not a fault: the bound is rounding's, unamplified
    fixes = []
    for p in parted:
        for d in p.causes:
            line = f"{p.label}: {FIX[d.cause]}"
            if line not in fixes:
                fixes.append(line)
    return Finding(
        Kind.TRACE,
        severity,
        "train/serve trace: " + path_line(worst),
        "; ".join(fixes) or None,
        facts,
    )
