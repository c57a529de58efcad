"""Check: do the samples hold real hidden states, slot by slot?

Samples can lie. vLLM's `extract_hidden_states` capture saved all-zero hidden states for hybrid
(Mamba/attention) targets until vLLM PR #46301 (it rebuilt its read slots with the wrong block
size); drafts trained on them "converged" with good validation figures and served at an accept
length of 1.17-1.34. Nothing downstream notices: a slot of zeros is a valid tensor. This check
reads every slot of the samples the doctor reads, before any wiring is scored:

- all zeros (a row whose norm is exactly 0), in most of a sample's positions;
- NaN or Inf anywhere;
- constant (every position the same state) in a sample of more than one position;
- vanishing: a median norm below a thousandth of the other slots' median (a scale no layer of a
  real target has beside the others).

Evidence: per slot, the positions read, the rows of zeros, non-finite and the median norm, and
the samples where it is at fault. A slot at fault is an error (whatever the wiring, a draft fed
it learns or serves nothing from it); the fix is the capture. `slots_at_fault` gives `eval` and
`accept` the same answer on their first samples, so neither reports an accept length over such a
slot without saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.engines import Engine
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.sample import SlotInfo

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_VLLM = Engine.VLLM.display

ZERO_SHARE = 0.5  # a sample whose slot is zero in more than this share of positions
VANISHING = 1e-3  # a slot's median norm against the other slots' median

__all__ = [
    "IntegrityFacts",
    "SlotHealth",
    "integrity_finding",
    "measure_integrity",
    "slots_at_fault",
]


@dataclass
class SlotHealth:
    slot: int
    label: str
    positions: int = 0
    zero_rows: int = 0
    nonfinite_rows: int = 0
    median_norm: float = 0.0
    zero_samples: list[int] = field(default_factory=list)
    nonfinite_samples: list[int] = field(default_factory=list)
    constant_samples: list[int] = field(default_factory=list)
    vanishing: bool = False

    @property
    def faults(self) -> list[str]:
        out = []
        if self.zero_samples:
            out.append("zeros")
        if self.nonfinite_samples:
            out.append("non-finite")
        if self.constant_samples:
            out.append("constant")
        if self.vanishing:
            out.append("vanishing")
        return out

    @property
    def bad_samples(self) -> list[int]:
        return sorted(set(self.zero_samples + self.nonfinite_samples + self.constant_samples))

    def to_dict(self) -> dict:
        return {
            "slot": self.slot,
            "label": self.label,
            "positions": self.positions,
            "zero_rows": self.zero_rows,
            "nonfinite_rows": self.nonfinite_rows,
            "median_norm": self.median_norm,
            "zero_samples": self.zero_samples,
            "nonfinite_samples": self.nonfinite_samples,
            "constant_samples": self.constant_samples,
            "vanishing": self.vanishing,
            "faults": self.faults,
        }


@dataclass
class IntegrityFacts:
    slots: list[SlotHealth]
    samples: list[int]

    @property
    def at_fault(self) -> list[SlotHealth]:
        return [s for s in self.slots if s.faults]

    def to_dict(self) -> dict:
        return {"samples": self.samples, "slots": [s.to_dict() for s in self.slots]}


def measure_integrity(
    ev: Evaluator, samples: Sequence[int], infos: Sequence[SlotInfo] | None = None
) -> IntegrityFacts:
    """Every slot of these samples, read as stored (float32 for the arithmetic)."""
    infos = list(infos if infos is not None else ev.slot_info)
    health = [
        SlotHealth(j, infos[j].label if j < len(infos) else f"s{j}") for j in range(len(infos))
    ]
    norms: list[list[torch.Tensor]] = [[] for _ in health]
    read: list[int] = []
    for i in samples:
        try:
            s = ev.samples[i]
        except InputError:  # an unreadable sample: the samples finding names it
            continue
        read.append(i)
        for j, t in enumerate(s.slots[: len(health)]):
            h = health[j]
            n, finite = _row_norms(t)
            rows = t.shape[0]
            zero = int((n == 0).sum())
            h.positions += rows
            h.zero_rows += zero
            h.nonfinite_rows += int((~finite).sum())
            if rows and zero > ZERO_SHARE * rows:
                h.zero_samples.append(i)
            if not bool(finite.all()):
                h.nonfinite_samples.append(i)
            elif rows > 1 and zero < rows and _constant(t, n):
                h.constant_samples.append(i)
            norms[j].append(n[finite & (n > 0)])
    for h, ns in zip(health, norms, strict=True):
        every = torch.cat(ns) if ns else torch.zeros(0)
        h.median_norm = float(every.median()) if every.numel() else 0.0
    for h in health:
        others = [o.median_norm for o in health if o is not h and o.median_norm > 0]
        if others and h.median_norm > 0:
            h.vanishing = h.median_norm < VANISHING * float(torch.tensor(others).median())
    return IntegrityFacts(health, read)


CHUNK = 4096  # rows per step: a 32K-token sample of a 7168-wide target is never copied whole


def _row_norms(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(L2 norm per row in float32, whether the row is finite), a chunk of rows at a time."""
    norms, finite = [], []
    for a in range(0, t.shape[0], CHUNK):
        x = t[a : a + CHUNK].float()
        norms.append(x.norm(dim=-1))
        finite.append(torch.isfinite(x).all(dim=-1))
    if not norms:
        return torch.zeros(0), torch.ones(0, dtype=torch.bool)
    return torch.cat(norms), torch.cat(finite)


def _constant(t: torch.Tensor, n: torch.Tensor) -> bool:
    """Every row the same state: equal norms, and the first, middle and last rows equal."""
    if float(n.max() - n.min()) > 1e-6 * float(n.max()):
        return False
    first = t[0].float()
    tol = 1e-6 * (float(first.abs().max()) + 1e-12)
    return all(float((t[k].float() - first).abs().max()) <= tol for k in (t.shape[0] // 2, -1))


def slots_at_fault(ev: Evaluator, n_samples: int = 8) -> dict[int, str]:
    """slot -> its faults in words, over the first `n_samples` samples (what `eval` and
    `accept` check before they report)."""
    n = min(n_samples, len(ev.samples))
    facts = measure_integrity(ev, range(n))
    return {h.slot: _fault_words(h, len(facts.samples)) for h in facts.at_fault}


def _fault_words(h: SlotHealth, n: int) -> str:
    parts = []
    if h.zero_samples:
        parts.append(f"all zeros in {len(h.zero_samples)} of {n} samples read")
    if h.nonfinite_samples:
        parts.append(f"NaN or Inf in {len(h.nonfinite_samples)} of {n}")
    if h.constant_samples:
        parts.append(f"one constant state in {len(h.constant_samples)} of {n}")
    if h.vanishing:
        parts.append(f"median norm {h.median_norm:.3g}, a thousandth of the other slots' or less")
    return ", ".join(parts)


def integrity_finding(facts: IntegrityFacts) -> Finding:
    bad = facts.at_fault
    norms = ", ".join(f"{h.label} {h.median_norm:.3g}" for h in facts.slots)
    if not bad:
        return Finding(
            Kind.SAMPLE_INTEGRITY,
            Severity.INFO,
            f"every slot of samples {facts.samples} holds finite, varying hidden states (median "
            f"norms: {norms})",
            "",
            facts,
        )
    n = len(facts.samples)
    which = "; ".join(
        f"slot {h.slot} ({h.label}): {_fault_words(h, n)}"
        + (f", samples {h.bad_samples}" if h.bad_samples else "")
        for h in bad
    )
    summary = (
        f"the samples do not hold real hidden states in {len(bad)} slot"
        f"{'s' if len(bad) > 1 else ''}: {which}. The capture wrote no state there ({_VLLM}'s "
        f"extract_hidden_states did so for hybrid targets before {_VLLM} PR #46301): a draft "
        "trained on them learns nothing from that slot and serves far below its validation "
        "figures, and every figure over that slot measures the capture, not the draft"
    )
    fix = (
        "capture the samples again with a capture that writes every state (eagle-inspect "
        f"capture TARGET PROMPTS --draft CKPT, or {_VLLM} with PR #46301), check them with this "
        "doctor, and retrain the draft on them"
    )
    return Finding(Kind.SAMPLE_INTEGRITY, Severity.ERROR, summary, fix, facts)
