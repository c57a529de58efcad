"""Check: which stored slot is the target's final state, from the target's head alone.

When the whole target cannot be run (too big for this host: a 70B target on a CPU box) but its
final norm and lm_head can be read (`--target`, the head only), one fact still holds: only the
final pre-norm state, through that norm and head, reproduces the target's next-token
predictions; an earlier layer through the same head predicts far fewer of the tokens (a
post-norm state goes through the head without the norm). So every slot is scored on the first
samples' loss-masked positions: how often argmax(head(norm(slot_j))) is token x_{j+1}.

The slot the file names as the final state (HF L of an L-layer target, the post-norm state, or
the verifier slot) must predict clearly more of them than every other slot (a paired test on the
same positions). A slot named final that another slot matches or beats is not the final state:
a "last hidden state" captured from another layer, or a copy of an earlier one; every score that
uses it, the trainers' metrics included, is of another state than the file says.

Evidence: per slot, the hits and the positions; which slot is named final and why; the best.
Costs one head matmul per slot over at most MAX_ROWS positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.stats import Z_CLEAR, paired_hits_z
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.metrics import Counts
from inspector.sample import SlotInfo

N_SAMPLES = 2
MAX_ROWS = 256  # positions scored per slot: a 128K-vocabulary head costs ~1 GMAC per row


@dataclass
class FinalState:
    """Per slot, which of the scored positions its state predicts through the target's head."""

    hits: list[np.ndarray]  # per slot, bool [M]
    named: int | None  # the slot the file names as the final state
    why: str  # how it is named: "HF L", "post-norm", "verifier"
    samples: list[int]

    @property
    def best(self) -> int:
        return int(np.argmax([h.sum() for h in self.hits]))

    def rivals(self) -> list[int]:
        """The slots that predict as many of the tokens as the named one, or more."""
        if self.named is None:
            return []
        mine = int(self.hits[self.named].sum())
        return [s for s, h in enumerate(self.hits) if s != self.named and int(h.sum()) >= mine]

    def runner_up_z(self) -> float | None:
        """Paired z of the named slot over the next best (how clearly it is the final state)."""
        if self.named is None or len(self.hits) < 2:
            return None
        others = [s for s in range(len(self.hits)) if s != self.named]
        nxt = max(others, key=lambda s: int(self.hits[s].sum()))
        return paired_hits_z(self.hits[self.named], self.hits[nxt])

    def to_dict(self) -> dict:
        return {
            "slots": [Counts(int(h.sum()), int(h.size)).to_dict() for h in self.hits],
            "named_final": self.named,
            "named_by": self.why,
            "best": self.best,
            "rivals": self.rivals(),
            "z_over_runner_up": None if (z := self.runner_up_z()) is None else round(z, 2),
            "samples": list(self.samples),
        }


def named_final(infos: Sequence[SlotInfo], num_layers: int | None) -> tuple[int | None, str]:
    """The slot the file names as the target's final state, and what names it."""
    for s, info in enumerate(infos):
        if info.post_norm:
            return s, "post-norm"
    if num_layers is not None:
        for s, info in enumerate(infos):
            if info.hf_index == num_layers:
                return s, f"HF {num_layers}"
    for s, info in enumerate(infos):
        if info.verifier:
            return s, "verifier"
    return None, ""


@torch.inference_mode()
def measure_final_state(
    ev: Evaluator, infos: Sequence[SlotInfo], samples: Sequence[int], num_layers: int | None
) -> FinalState | None:
    """Score every slot through the target's head (None without a head or a scored position)."""
    th = ev.target_head
    if th is None:
        return None
    named, why = named_final(infos, num_layers)
    per_slot: list[list[torch.Tensor]] = [[] for _ in infos]
    used: list[int] = []
    budget = MAX_ROWS
    for i in samples:
        if len(used) == N_SAMPLES or budget <= 0:
            break
        try:
            sample = ev.samples[i]
        except InputError:
            continue
        t = sample.length
        j = torch.arange(max(0, t - 1))
        j = j[sample.loss_mask[j + 1].bool()][:budget]
        if j.numel() == 0:
            continue
        used.append(i)
        budget -= int(j.numel())
        nxt = sample.input_ids[j + 1].to(ev.device)
        for s, info in enumerate(infos):
            y = sample.slots[s][j].to(ev.device, th.lm_head.dtype)
            # The target's own norm (Gemma's 1 + w included) and head (its soft-cap too).
            pred = th.logits(y if info.post_norm else th.normed(y)).argmax(-1)
            per_slot[s].append((pred == nxt).cpu())
    if not used:
        return None
    hits = [torch.cat(h).numpy() for h in per_slot]
    return FinalState(hits, named, why, used)


def final_state_finding(fs: FinalState | None, infos: Sequence[SlotInfo]) -> Finding | None:
    """error: the slot named final is matched or beaten by another slot; info otherwise."""
    if fs is None:
        return None

    def rate(s: int) -> str:
        return f"slot {s} ({infos[s].label}) {Counts(int(fs.hits[s].sum()), fs.hits[s].size).fmt()}"

    every = ", ".join(rate(s) for s in range(len(infos)))
    head = "through the target's norm and head, the slots predict the next token at: " + every
    if fs.named is None:
        return Finding(
            Kind.FINAL_STATE,
            Severity.INFO,
            f"{head}; no slot is named the final state, slot {fs.best} behaves most like it",
            None,
            fs,
        )
    rivals = fs.rivals()
    if not rivals:
        z = fs.runner_up_z()
        weak = ""
        if z is not None and z < Z_CLEAR:
            weak = f" (by a paired z of only {z:.1f} over the next slot: few positions)"
        return Finding(
            Kind.FINAL_STATE,
            Severity.INFO,
            f"{head}: slot {fs.named} ({fs.why}) predicts the most, as the target's final state "
            f"should{weak}",
            None,
            fs,
        )
    others = ", ".join(rate(s) for s in rivals)
    return Finding(
        Kind.FINAL_STATE,
        Severity.ERROR,
        f"slot {fs.named}, named the final state ({fs.why}), predicts the target's next tokens "
        f"no better than {others}: {rate(fs.named)}. It is not the target's final state "
        "(captured from another layer, or a copy of an earlier one), so every score on it is of "
        f"another state than the file says ({head})",
        "recapture the last slot from the input of the target's final norm (eagle-inspect "
        "capture does), or pass --target on a host that can load the whole target to see which "
        "layer each slot is",
        fs,
    )
