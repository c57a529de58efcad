"""Check: the stored vocab map (d2t / t2d) and how much of the samples' text the draft vocab covers.

Engines map a draft id to a target id as `target = draft_id + d2t[draft_id]` (d2t holds offsets)
and read t2d as a [V] mask of the target ids in the draft vocab, with nonzero(t2d) in ascending
target-id order equal to arange(D) + d2t. A d2t holding absolute target ids (a common export slip)
sends every draft id to the wrong token. The loaded `VocabMap` may already be repaired (lenient
loading), so the check reads the tensors exactly as stored.

Evidence: the d2t form ("absent", "offsets", "absolute"), each problem found, the coverage of the
samples' true tokens (an upper bound on all-tok accuracy). Fix: `--write-fixed` rewrites d2t as
offsets / t2d from d2t where the stored data allows (`Finding.vocab_repair`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from inspector.doctor.finding import Finding, Kind, Severity, VocabRepair
from inspector.doctor.phrasing import Text
from inspector.draft import Draft
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formatting import pct
from inspector.metrics import Counts

LOW_COVERAGE = 0.7  # below this share of true tokens in the draft vocab, warn


@dataclass(frozen=True)
class VocabProblem:
    """One fault of the stored map. code: a key of `VOCAB_PROBLEMS`; count / of: its
    size (how many ids or entries, out of how many)."""

    code: str
    severity: str
    count: int = 0
    of: int = 0

    def to_dict(self) -> dict:
        return {"problem": self.code, "severity": self.severity, "count": self.count, "of": self.of}


@dataclass
class VocabAnalysis:
    """Static faults of a stored d2t/t2d pair."""

    draft_vocab_size: int
    vocab_size: int
    d2t: str = "absent"  # "absent" | "offsets" | "absolute"
    problems: list[VocabProblem] = field(default_factory=list)
    fixable: bool = False  # the loader's repaired map can replace the stored one
    first_entries: list[int] | None = None
    out_of_range_as_offsets: int | None = None
    t2d_count: int | None = None

    @property
    def repair(self) -> VocabRepair | None:
        if not self.fixable:
            return None
        return VocabRepair.OFFSETS if self.d2t == "absolute" else VocabRepair.T2D_FROM_D2T

    def add(self, code: str, severity: str = "error", count: int = 0, of: int = 0) -> None:
        self.problems.append(VocabProblem(code, severity, count, of))


@dataclass
class VocabFacts:
    analysis: VocabAnalysis
    coverage: Counts
    notes: list[str]  # what the lenient loader said about d2t / t2d

    def to_dict(self) -> dict:
        a = self.analysis
        out: dict = {
            "draft_vocab_size": a.draft_vocab_size,
            "vocab_size": a.vocab_size,
            "d2t": a.d2t,
            "problems": [p.to_dict() for p in a.problems],
            "coverage": self.coverage.to_dict(),
            "notes": list(self.notes),
        }
        for key in ("first_entries", "out_of_range_as_offsets", "t2d_count"):
            if getattr(a, key) is not None:
                out[key] = getattr(a, key)
        return out


def raw_vocab_tensors(draft: Draft) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """d2t and t2d exactly as stored in the checkpoint (the loaded VocabMap may be repaired);
    the loaded map for a draft that was not read from files."""
    if draft.stored_vocab is None:
        return draft.vocab.d2t.cpu(), draft.vocab.t2d.cpu()
    return draft.stored_vocab.d2t, draft.stored_vocab.t2d


def analyse_vocab(
    d2t: torch.Tensor | None,
    t2d: torch.Tensor | None,
    d: int,
    v: int,
    real: int | None = None,
) -> VocabAnalysis:
    """Static faults of a stored d2t/t2d pair (D = d draft ids, V = v target ids). `real`: the
    target's real vocabulary where its tokenizer is known; no map with D >= real is then no fault
    of the draft (the vocab_contract check says what engines make of it)."""
    out = VocabAnalysis(d, v)
    if d2t is None:
        if t2d is not None:
            out.add("t2d_without_d2t")
        elif d != v and (real is None or d < real):
            out.add("no_d2t", count=d, of=v)
        return out
    d2t = d2t.long().flatten()
    out.d2t = "offsets"
    if d2t.numel() != d:
        out.add("d2t_size", count=d2t.numel(), of=d)
        return out
    as_off = torch.arange(d) + d2t
    off_in_range = bool(((as_off >= 0) & (as_off < v)).all())
    abs_valid = bool(((d2t >= 0) & (d2t < v)).all()) and d2t.unique().numel() == d
    mask = t2d.flatten().bool() if t2d is not None else None
    ids_t2d = mask.nonzero().flatten() if mask is not None and mask.numel() == v else None
    out.first_entries = [int(x) for x in d2t[:6]]
    # Absolute ids: they equal nonzero(t2d) where offsets would not, or only they are in range.
    if ids_t2d is not None and torch.equal(ids_t2d, d2t) and not torch.equal(ids_t2d, as_off):
        out.d2t = "absolute"
    elif not off_in_range and abs_valid:
        out.d2t = "absolute"
    n_out = int(((as_off < 0) | (as_off >= v)).sum())
    if out.d2t == "absolute":
        out.out_of_range_as_offsets = n_out
        out.add("absolute_d2t" if n_out else "absolute_d2t_in_range", count=n_out, of=d)
        out.fixable = True
        target_ids = d2t
    elif not off_in_range:
        out.add("out_of_range", count=n_out, of=d)
        return out
    else:
        target_ids = as_off
    dup = d - int(target_ids.unique().numel())
    if dup:
        out.add("duplicates", count=dup, of=d)
    if mask is not None:
        _check_t2d(out, mask, ids_t2d, target_ids, dup)
    return out


def _check_t2d(
    out: VocabAnalysis,
    mask: torch.Tensor,
    ids_t2d: torch.Tensor | None,
    target_ids: torch.Tensor,
    dup: int,
) -> None:
    d, v = out.draft_vocab_size, out.vocab_size
    if ids_t2d is None:
        out.add("t2d_size", count=mask.numel(), of=v)
        return
    n_true = int(mask.sum())
    out.t2d_count = n_true
    if n_true != d:
        out.add("t2d_count", count=n_true, of=d)
        out.fixable = not dup
    elif not torch.equal(ids_t2d, target_ids.sort().values):
        out.add("t2d_disagrees", count=int((~mask[target_ids]).sum()), of=d)
        out.fixable = not dup
    elif not torch.equal(ids_t2d, target_ids):
        out.add("unsorted", severity="warning")


def coverage(ev: Evaluator, samples: Sequence[int]) -> Counts:
    """Loss-masked true tokens inside the draft vocab: an upper bound on all-tok accuracy, since a
    token outside it can never be drafted. Unreadable samples are left out."""
    t2d = ev.draft.vocab.t2d.cpu()
    inside = total = 0
    for i in samples:
        try:
            s = ev.samples[i]
        except InputError:
            continue
        rows = torch.arange(s.length - 2)
        rows = rows[s.loss_mask[rows + 1].bool()]
        true = s.input_ids[rows + 2]
        ok = (true >= 0) & (true < t2d.numel())
        inside += int(t2d[true[ok]].sum())
        total += int(rows.numel())
    return Counts(inside, total)


def vocab_check(ev: Evaluator, samples: Sequence[int], real_vocab: int | None = None) -> Finding:
    draft = ev.draft
    cfg = draft.config
    d2t, t2d = raw_vocab_tensors(draft)
    analysis = analyse_vocab(d2t, t2d, cfg.draft_vocab_size, cfg.vocab_size, real_vocab)
    facts = VocabFacts(
        analysis,
        coverage(ev, samples),
        [n for n in draft.notes if "d2t" in n or "t2d" in n],
    )
    severities = {p.severity for p in analysis.problems}
    cov = facts.coverage.acc
    if "error" in severities:
        severity = Severity.ERROR
    elif "warning" in severities or (cov is not None and cov < LOW_COVERAGE):
        severity = Severity.WARNING
    else:
        severity = Severity.INFO
    text = vocab_text(facts, severity)
    # Only an error is repairable (`fixable` is set with error problems only).
    return Finding(
        Kind.VOCAB_MAP, severity, text.summary, text.fix, facts, vocab_repair=analysis.repair
    )


# --- words ---------------------------------------------------------------------------------------
VOCAB_PROBLEMS = {  # code -> text; n = VocabProblem.count, of = VocabProblem.of, v = vocab_size
    "t2d_without_d2t": "t2d is stored without d2t: engines need d2t to map draft ids",
    "no_d2t": "no d2t but draft_vocab_size {n} != vocab_size {of}",
    "d2t_size": "d2t has {n} entries, draft_vocab_size is {of}",
    "absolute_d2t": "d2t holds absolute target ids, not offsets: engines compute target = draft "
    "id + d2t, which leaves [0, {v}) for {n} of {of} ids",
    "absolute_d2t_in_range": "d2t holds absolute target ids, not offsets: engines compute "
    "target = draft id + d2t, which maps draft ids to the wrong tokens",
    "out_of_range": "{n} of {of} draft ids map outside the target vocab [0, {v})",
    "duplicates": "{n} draft ids map to a target id another draft id already has",
    "t2d_size": "t2d has {n} entries, vocab_size is {of}",
    "t2d_count": "t2d marks {n} tokens, draft_vocab_size is {of}",
    "t2d_disagrees": "t2d disagrees with d2t: {n} of the ids d2t maps to are not marked in t2d",
    "unsorted": "d2t is not in ascending target-id order, unlike nonzero(t2d) (trainers and "
    "engines assume it is)",
}
VOCAB_FIXES = {
    VocabRepair.OFFSETS: "rewrite d2t as offsets (d2t - arange(D)) and t2d from it; --write-fixed "
    "OUT does this",
    VocabRepair.T2D_FROM_D2T: "rebuild t2d from d2t (t2d[arange(D) + d2t] = True); --write-fixed "
    "OUT does this",
    None: "rebuild d2t/t2d from the draft vocabulary used in training",
}


def vocab_problem(p: VocabProblem, v: int) -> str:
    return VOCAB_PROBLEMS[p.code].format(n=p.count, of=p.of, v=v)


def vocab_text(facts: VocabFacts, severity: Severity) -> Text:
    a = facts.analysis
    d, v = a.draft_vocab_size, a.vocab_size
    by_sev = {
        s: [vocab_problem(p, v) for p in a.problems if p.severity == s]
        for s in ("error", "warning")
    }
    if by_sev["error"]:
        return Text("vocab map: " + "; ".join(by_sev["error"]), VOCAB_FIXES[a.repair])
    if by_sev["warning"]:
        return Text(
            "vocab map: " + "; ".join(by_sev["warning"]), "sort the draft vocab by target id"
        )
    cov = facts.coverage
    if severity is Severity.WARNING:
        return Text(
            f"the draft vocab covers only {pct(cov.acc)} of the samples' true tokens "
            f"({cov.hits}/{cov.total}): all-tok accuracy cannot exceed that",
            "choose the draft vocab from the serving distribution's most frequent tokens, or "
            "enlarge it",
        )
    return Text(
        f"vocab map consistent ({a.d2t} d2t, D={d} of V={v}); covers {pct(cov.acc)} of the "
        "samples' true tokens"
    )
