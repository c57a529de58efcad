"""Check: the draft's vocabulary map against the target's real, unpadded vocabulary.

The draft's head has D rows (draft_vocab_size); d2t, when stored, maps each to a target id. The
target's tokenizer produces ids in [0, R) (R: its real vocabulary, `formats.real_vocab`), while
its config's vocab_size P counts the padded rows too (P >= R). Two faults of the contract between
draft and engine follow, neither visible to the trainer's metrics:

- a needless map: the head covers the real vocabulary (D >= R) with no map or an identity one,
  but D != P, and an engine that compares D with the padded P builds a draft-to-target map the
  draft does not have (the engine facts on topic "vocab_map" name the releases that do);
- a missing map: D < R and no d2t: an engine reads the head's D rows as target ids 0..D-1, so
  R - D real tokens can never be drafted, and unless the draft vocabulary was the first D ids
  every drafted id is another token.

A stored map that sends draft ids past R is named too (those rows draft padding). Without a
tokenizer (beside the draft, or in --target's folder) R is unknown and the check is silent: P
alone cannot tell padding from real tokens; a map that fits is silent as well.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.draft import Draft
from inspector.engines import all_engines
from inspector.errors import InputError
from inspector.formats.layer_convention import target_model_type
from inspector.formats.real_vocab import RealVocab, padded_vocab_size, read_real_vocab
from inspector.formats.tokenizer import find_tokenizer

__all__ = ["ContractFacts", "contract_facts", "target_vocabulary", "vocab_contract_finding"]


@dataclass(frozen=True)
class EngineVocabFact:
    engine: str  # the engine's display name
    since: str
    words: str

    def to_dict(self) -> dict:
        return {"engine": self.engine, "since": self.since, "words": self.words}


@dataclass
class ContractFacts:
    """The draft's vocabulary (D, its map) against the target's real (R) and padded (P) sizes.

    map: "absent" (no d2t stored), "identity" (d2t all zeros), "map" (any other).
    verdict: "needless", "missing", "into_padding" (a stored map sends ids past R),
    "consistent".
    """

    draft_vocab_size: int
    vocab_size: int  # the draft config's (its t2d and embedding size)
    padded: int  # the target config's vocab_size, else the draft config's
    padded_source: str  # "target config" | "draft config"
    real: int
    real_tokens: int
    tokenizer: str
    map: str
    verdict: str
    uncovered: int = 0  # real ids the head can never draft (missing), or ids sent past R
    engines: list[EngineVocabFact] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "draft_vocab_size": self.draft_vocab_size,
            "vocab_size": self.vocab_size,
            "padded_vocab_size": self.padded,
            "padded_from": self.padded_source,
            "real_vocab_size": self.real,
            "real_tokens": self.real_tokens,
            "tokenizer": self.tokenizer,
            "map": self.map,
            "verdict": self.verdict,
            "uncovered": self.uncovered,
            "engines": [e.to_dict() for e in self.engines],
        }


def target_vocabulary(
    checkpoint: str | Path | None, target: str | Path | None
) -> tuple[RealVocab | None, int | None]:
    """The real vocabulary (the tokenizer.json beside the draft, else in the target's folder;
    None where none is found or it cannot be read) and the target config's padded vocab_size."""
    padded = padded_vocab_size(target) if target is not None else None
    try:
        path = find_tokenizer(None, checkpoint, target)
        return (read_real_vocab(path) if path is not None else None), padded
    except InputError:  # an unreadable tokenizer: R unknown, the check stays silent
        return None, padded


def _map_kind(draft: Draft) -> tuple[str, torch.Tensor | None]:
    stored = draft.stored_vocab
    d2t = stored.d2t if stored is not None else draft.vocab.d2t.cpu()
    if d2t is None:
        return "absent", None
    d2t = d2t.long().flatten()
    return ("identity" if not bool(d2t.any()) else "map"), d2t


def contract_facts(
    draft: Draft,
    real: RealVocab,
    padded: int | None = None,
    model_type: str | None = None,
) -> ContractFacts:
    """The contract of `draft` against a target of real vocabulary `real` and config vocab_size
    `padded` (None: the draft config's vocab_size stands for it)."""
    cfg = draft.config
    d, r = cfg.draft_vocab_size, real.size
    p = padded if padded is not None else cfg.vocab_size
    kind, d2t = _map_kind(draft)
    facts = ContractFacts(
        draft_vocab_size=d,
        vocab_size=cfg.vocab_size,
        padded=p,
        padded_source="target config" if padded is not None else "draft config",
        real=r,
        real_tokens=real.tokens,
        tokenizer=real.source,
        map=kind,
        verdict="consistent",
    )
    if kind == "map":
        assert d2t is not None
        past = int(((torch.arange(d2t.numel()) + d2t) >= r).sum())
        if past:
            facts.verdict, facts.uncovered = "into_padding", past
        return facts
    if d < r:
        facts.verdict, facts.uncovered = "missing", r - d
    elif d != p:
        facts.verdict = "needless"
        facts.engines = [
            EngineVocabFact(e.display, f.since, f.words)
            for e in all_engines()
            for f in e.facts_for(model_type, "eagle3", topic="vocab_map")
        ]
    return facts


def vocab_contract_finding(
    draft: Draft, real: RealVocab | None, padded: int | None, target: str | Path | None = None
) -> Finding | None:
    """The finding (None without a real vocabulary to compare with, or when the map fits it)."""
    if real is None:
        return None
    model_type = target_model_type(target) if target is not None else None
    facts = contract_facts(draft, real, padded, model_type)
    d, r, p = facts.draft_vocab_size, facts.real, facts.padded
    where = f"draft_vocab_size {d}, the target's real vocabulary {r} ({facts.tokenizer})"
    padded_words = f"its {facts.padded_source} vocab_size {p}"
    no_map = "no d2t" if facts.map == "absent" else "an identity d2t"
    if facts.verdict == "missing":
        return Finding(
            Kind.VOCAB_CONTRACT,
            Severity.ERROR,
            f"a missing vocabulary map: {where}, and {no_map}: an engine reads the head's {d} "
            f"rows as target ids 0..{d - 1}, so {r - d} real tokens can never be drafted, and "
            f"unless the draft vocabulary was the first {d} ids every drafted id is another token",
            "ship the d2t (offsets) and t2d the draft vocabulary was trained with",
            facts,
        )
    if facts.verdict == "needless":
        said = "; ".join(f"{e.engine} ({e.since}): {e.words}" for e in facts.engines)
        return Finding(
            Kind.VOCAB_CONTRACT,
            Severity.WARNING,
            f"a needless vocabulary map: {where}: the head covers every real token with "
            f"{no_map}, but draft_vocab_size differs from {padded_words} (padding), and an "
            "engine that compares the two builds a draft-to-target map the draft does not have"
            + (f". {said}" if said else ""),
            (
                "serve it on an engine release that compares the draft with the real "
                "vocabulary ("
                + ", ".join(f"{e.engine} since {e.since}" for e in facts.engines)
                + ")"
            )
            if facts.engines
            else "",
            facts,
        )
    if facts.verdict == "into_padding":
        return Finding(
            Kind.VOCAB_CONTRACT,
            Severity.WARNING,
            f"the vocabulary map sends {facts.uncovered} of {d} draft ids past the target's real "
            f"vocabulary ({where}): those rows draft padding ids no text holds",
            "rebuild d2t from the tokens of the training data",
            facts,
        )
    return None  # consistent: nothing to say (the vocab_map finding reports the map)
