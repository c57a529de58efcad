"""How much of the samples the doctor reads: a compute budget, not a sample count.

Every check reruns the draft: the wiring search (every ordered choice of slots, most dropped
after the first sample), the re-pairing, each config alternative over the leading wirings, the
norm flags; the accept-length replay runs ACCEPT_STEPS forwards per wiring where rounds start. A
4096-wide draft with a 14336-wide MLP and a 16K draft vocabulary costs ~0.36 GMAC per token and
forward, so the doctor over 8 samples of 2K tokens is hundreds of TMAC: many minutes on a CPU,
for findings that a few hundred scored positions settle (a wrong wiring moves accuracy by tens
of points; the paired tests need a few hundred positions).

So, for a draft that costly, the doctor reads each sample up to its first `scored` scored
positions (loss-masked, with a label), the same count for every sample; when even the smallest
count over-runs the budget (long prompts cost their context), it reads fewer samples; and it
replays the accept length only on the samples the replay's share of the budget allows (none:
the report says so and `eagle-inspect accept` gives it). A causal draft's outputs at the kept
positions equal those of the whole sample (positions count from its start): nothing is
approximated, fewer positions are scored. Small drafts read everything; `--max-tokens N` cuts
every sample to N tokens instead, `--max-tokens 0` reads whole samples, both without a budget.

The constants are the cost model, in draft forwards per token, calibrated on the doctor's own
`seconds` on a 4096-wide draft (`bench/wide_doctor.py --synthetic 4k`): a read token costs the fc projections of
every block and slot and each wiring's keys and values (`READ_FORWARDS`); a scored token the
checks' forwards (`SCORED_FORWARDS`); the replay ACCEPT_STEPS forwards per wiring where a round
starts, and a row of context its step-0 keys and values (`ACCEPT_READ_FORWARDS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from inspector.draft import DraftConfig
from inspector.errors import InputError, setting_field
from inspector.serving.spec import DEFAULT_STEPS

# The chain the wiring finding quotes engines' accept length for: the engines' common default
# (`eagle-inspect accept` takes any).
ACCEPT_STEPS = DEFAULT_STEPS
# Tokens of the doctor's samples that replay covers (the first samples up to this many, one at
# least): its cost is ACCEPT_STEPS draft forwards per token and wiring.
ACCEPT_TOKENS = 4096
DOCTOR_MACS = 4.0e12  # about a minute on two CPU cores at the stored dtype; seconds on a GPU
ACCEPT_SHARE = 0.3  # of DOCTOR_MACS, for the accept-length replay
READ_FORWARDS = 2.0
SCORED_FORWARDS = 24.0
ACCEPT_READ_FORWARDS = 0.15  # a replayed context row: its step-0 keys and values only
SCORED_LADDER = (4096, 2048, 1024, 512, 256, 128, 64, 32)


def token_macs(cfg: DraftConfig) -> int:
    """Multiply-accumulates of one draft forward per token: fc, the layers, the head."""
    h, ht = cfg.hidden_size, cfg.target_hidden_size
    q = cfg.num_heads * cfg.head_dim
    kv = 2 * cfg.num_kv_heads * cfg.head_dim
    fc = cfg.num_fc_blocks * ht * h
    first = 2 * h * (q + kv)  # layer 0 takes [embedding, fc output]
    later = h * (q + kv)
    attn_out = q * h
    mlp = 3 * h * cfg.intermediate_size
    layers = first + (cfg.num_layers - 1) * later + cfg.num_layers * (attn_out + mlp)
    return int(fc + layers + h * cfg.draft_vocab_size)


@dataclass(frozen=True)
class SampleShape:
    """What the plan needs of one sample: its length and its scored positions. Row j (the
    slots at j, token x_{j+1}) predicts x_{j+2} and counts when loss_mask[j+1] is set, so the
    mask position p = j+1 is scored for 1 <= p <= T-2, and reading it takes p+2 tokens."""

    index: int
    length: int
    scored: np.ndarray  # int positions, ascending

    @classmethod
    def of(cls, index: int, loss_mask: np.ndarray) -> SampleShape:
        m = np.asarray(loss_mask).astype(bool)
        pos = np.flatnonzero(m)
        return cls(index, int(m.size), pos[(pos >= 1) & (pos <= m.size - 2)])

    def prefix(self, scored: int | None) -> int:
        """Tokens to read for the first `scored` scored positions (None: all)."""
        if scored is None or scored >= self.scored.size:
            return self.length
        return int(self.scored[scored - 1]) + 2 if scored > 0 else 0


@dataclass
class DoctorPlan:
    """What the doctor reads: per sample index, the tokens kept (absent: whole), the samples it
    runs on, and the samples the accept length is replayed on (None: the first ones up to
    ACCEPT_TOKENS, as without a budget; empty: not replayed)."""

    decided_by: str  # "whole" | "budget" | "--max-tokens"
    token_macs: int
    samples: list[int]
    cuts: dict[int, int] = field(default_factory=dict)
    scored_per_sample: int | None = None
    accept_samples: list[int] | None = None
    dropped_samples: list[int] = field(default_factory=list)  # asked for, over the budget

    @property
    def cut(self) -> bool:
        return bool(self.cuts) or bool(self.dropped_samples)

    @property
    def accept_skipped(self) -> bool:
        return self.accept_samples is not None and not self.accept_samples

    def summary(self) -> str:
        """How much was read, in words; empty when everything was."""
        if not self.cut and self.accept_samples is None:
            return ""
        parts = []
        if self.decided_by == "--max-tokens" and self.cuts:
            parts.append(f"each cut to its first {max(self.cuts.values())} tokens (--max-tokens)")
        elif self.cut:
            parts.append(
                f"up to {self.scored_per_sample} scored positions each, within the doctor's "
                "compute budget (--max-tokens 0 reads everything)"
            )
        if self.dropped_samples:
            parts.append(f"{len(self.dropped_samples)} more samples over the budget")
        if self.accept_skipped:
            parts.append("accept length not replayed here: run `eagle-inspect accept`")
        elif self.accept_samples is not None:
            parts.append(f"accept length replayed on {len(self.accept_samples)} of the samples")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        return {
            "decided_by": self.decided_by,
            "draft_macs_per_token": self.token_macs,
            "tokens_read": {str(i): n for i, n in self.cuts.items()},
            "scored_per_sample": self.scored_per_sample,
            "samples_over_budget": list(self.dropped_samples),
            "accept_samples": None if self.accept_samples is None else list(self.accept_samples),
        }


def _whole(decided_by: str, macs: int, shapes: Sequence[SampleShape]) -> DoctorPlan:
    return DoctorPlan(decided_by, macs, [s.index for s in shapes])


def plan(
    cfg: DraftConfig,
    shapes: Sequence[SampleShape],
    *,
    max_tokens: int | None = None,
    budget_macs: float = DOCTOR_MACS,
    accept_steps: int = ACCEPT_STEPS,
    accept_wirings: int = 3,
) -> DoctorPlan:
    """The doctor's reading of `shapes` (the readable samples asked for, in order).

    max_tokens: None = fit the budget; 0 = whole samples; n = every sample's first n tokens."""
    macs = token_macs(cfg)
    if max_tokens is not None:
        if max_tokens < 0:
            raise InputError(
                None, setting_field("max-tokens"), "must be 0 (whole samples) or positive"
            )
        if max_tokens == 0:
            return _whole("whole", macs, shapes)
        if max_tokens < 3:
            raise InputError(
                None, setting_field("max-tokens"), "at least 3 tokens score a position"
            )
        out = _whole("--max-tokens", macs, shapes)
        out.cuts = {s.index: max_tokens for s in shapes if s.length > max_tokens}
        return out

    def cost(shape: SampleShape, scored: int | None) -> float:
        n = shape.scored.size if scored is None else min(scored, shape.scored.size)
        return macs * (READ_FORWARDS * shape.prefix(scored) + SCORED_FORWARDS * n)

    checks = budget_macs * (1 - ACCEPT_SHARE)
    if sum(cost(s, None) for s in shapes) <= checks:
        out = _whole("whole", macs, shapes)
    else:
        out = DoctorPlan("budget", macs, [])
        for q in SCORED_LADDER:
            if sum(cost(s, q) for s in shapes) <= checks or q == SCORED_LADDER[-1]:
                break
        out.scored_per_sample = q
        spent = 0.0
        for s in shapes:
            c = cost(s, q)
            if out.samples and spent + c > checks:
                out.dropped_samples.append(s.index)
                continue
            spent += c
            out.samples.append(s.index)
            if s.prefix(q) < s.length:
                out.cuts[s.index] = s.prefix(q)

    # The replay drafts where rounds start (ACCEPT_STEPS forwards per wiring there); on a
    # single-layer Llama draft every other read row costs its step-0 keys and values, on
    # other drafts (MLA, several layers) the replay runs every row.
    context = ACCEPT_READ_FORWARDS if cfg.num_layers == 1 and cfg.mla is None else accept_steps

    def replay(shape: SampleShape) -> float:
        q = out.scored_per_sample
        read = out.cuts.get(shape.index, shape.length)
        starts = shape.scored.size if q is None else min(q, shape.scored.size)
        return macs * accept_wirings * (context * read + accept_steps * starts)

    kept = [s for s in shapes if s.index in out.samples]
    if sum(replay(s) for s in kept) > budget_macs * ACCEPT_SHARE:
        out.accept_samples, spent = [], 0.0
        for s in kept:
            if spent + replay(s) > budget_macs * ACCEPT_SHARE:
                break
            spent += replay(s)
            out.accept_samples.append(s.index)
    return out
