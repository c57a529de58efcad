"""Accuracy counts and their aggregation. Pure Python: no torch here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from inspector.formatting import pct


@dataclass
class Counts:
    hits: int = 0
    total: int = 0

    @property
    def acc(self) -> float | None:
        return self.hits / self.total if self.total else None

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.hits + other.hits, self.total + other.total)

    def to_dict(self) -> dict:
        return {"hits": self.hits, "total": self.total, "acc": self.acc}

    def fmt(self) -> str:
        """'386/1235 31.3%', the form the field reads logs in."""
        return f"{self.hits}/{self.total} {pct(self.acc)}"


@dataclass
class StepMetrics:
    """Metrics of one TTT step over loss-masked positions.

    all_tok: predicted target id == true token (OOV true tokens are misses, as in serving).
    in_vocab: the same over positions whose true token is in the draft vocab.
    coverage: share of true tokens inside the draft vocab (hits = in-vocab count).
    cond: P(step k hit | steps < k hit at the same row): the chain a greedy drafter runs.
    verifier_a / verifier_b: speculators-style (argmax of the verifier within the draft vocab) and
      EAGLE-style (verifier's full argmax, must be in vocab, over all masked) matches on our rows;
      with --target.
    spec_full / spec_cond / specforge: the trainers' own metrics with their own row conventions
      (`inspector.metrics.trainers`): speculators full_acc_k (cumulative) and cond_acc_k, SpecForge
      acc_k; with the verifier (--target).
    """

    step: int
    all_tok: Counts = field(default_factory=Counts)
    in_vocab: Counts = field(default_factory=Counts)
    coverage: Counts = field(default_factory=Counts)
    cond: Counts = field(default_factory=Counts)
    verifier_a: Counts | None = None
    verifier_b: Counts | None = None
    spec_full: Counts | None = None
    spec_cond: Counts | None = None
    specforge: Counts | None = None

    def __add__(self, other: StepMetrics) -> StepMetrics:
        def opt(a: Counts | None, b: Counts | None) -> Counts | None:
            if a is None:
                return b
            return a if b is None else a + b

        return StepMetrics(
            self.step,
            self.all_tok + other.all_tok,
            self.in_vocab + other.in_vocab,
            self.coverage + other.coverage,
            self.cond + other.cond,
            opt(self.verifier_a, other.verifier_a),
            opt(self.verifier_b, other.verifier_b),
            opt(self.spec_full, other.spec_full),
            opt(self.spec_cond, other.spec_cond),
            opt(self.specforge, other.specforge),
        )

    @property
    def has_trainer(self) -> bool:
        return self.spec_full is not None or self.specforge is not None

    def to_dict(self) -> dict:
        d = {
            "step": self.step,
            "all_tok": self.all_tok.to_dict(),
            "in_vocab": self.in_vocab.to_dict(),
            "coverage": self.coverage.acc,
            "coverage_counts": self.coverage.to_dict(),
            "cond_acc": self.cond.acc,
            "cond": self.cond.to_dict(),
        }
        if self.verifier_a is not None:
            d["verifier_match_speculators"] = self.verifier_a.to_dict()
        if self.verifier_b is not None:
            d["verifier_match_eagle"] = self.verifier_b.to_dict()
        if self.has_trainer:
            trainer: dict = {}
            if self.spec_full is not None and self.spec_cond is not None:
                trainer["speculators"] = {
                    "full_acc": self.spec_full.to_dict(),
                    "cond_acc": self.spec_cond.to_dict(),
                }
            if self.specforge is not None:
                trainer["specforge"] = {"acc": self.specforge.to_dict()}
            d["trainer"] = trainer
        return d


def sum_steps(per_sample: Iterable[Sequence[StepMetrics]]) -> list[StepMetrics]:
    total: list[StepMetrics] = []
    for steps in per_sample:
        for s in steps:
            # A sample shorter than K+2 tokens contributes to fewer steps.
            while len(total) <= s.step:
                total.append(StepMetrics(len(total)))
            total[s.step] = total[s.step] + s
    return total


def acceptance_length(steps: Sequence[StepMetrics]) -> float:
    """Expected accepted tokens per draft round for a greedy chain: 1 + sum_k prod_{m<=k} c_m."""
    total, chain = 1.0, 1.0
    for s in steps:
        c = s.cond.acc
        if c is None:
            break
        chain *= c
        total += chain
    return total
