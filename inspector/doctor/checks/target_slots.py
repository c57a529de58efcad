"""What each stored slot is, measured: the target run over a few samples' input ids, every slot
matched to the HF hidden state it equals.

HF index k is `output_hidden_states[k]`: 0 the embedding output, k the output of decoder layer
k-1, L the last layer's output *before* the final norm (what engines capture; transformers puts
the post-norm state at L, so L comes from a hook on the final norm, as capture does), plus the
post-norm state itself. A slot equals a state when their relative error (Frobenius norm of the
difference over the state's) is within the rounding of the slot's stored dtype: its machine
epsilon, at least `MIN_TOLERANCE` (a capture on another device or kernel differs by more than
float32's epsilon). Neighbouring layers of a trained model differ by tens of percent, so the
match is unambiguous; a slot that equals none was captured from another layer convention, another
model revision, or a quantized or rotated target.

Costs the target's forward over `n` samples (two by default) plus loading it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from inspector.errors import InputError
from inspector.evaluate import Evaluator

if TYPE_CHECKING:
    from inspector.capture.transformers_target import TargetModel

POST = "post-norm"
MIN_TOLERANCE = 1e-3
N_SAMPLES = 2


def tolerance(dtype: torch.dtype) -> float:
    """The relative error a stored copy of a state may have: the dtype's rounding."""
    return max(float(torch.finfo(dtype).eps), MIN_TOLERANCE)


def _name(k: int | str) -> str:
    return "post-norm" if k == POST else f"HF {k}"


@dataclass(frozen=True)
class SlotMatch:
    """One slot against every target state: the nearest, its relative error, the runner-up's."""

    slot: int
    nearest: int | str  # HF index, or POST
    error: float
    second: int | str | None
    second_error: float | None
    tolerance: float

    @property
    def equals(self) -> bool:
        return self.error <= self.tolerance

    @property
    def matched(self) -> int | str | None:
        """The state this slot is, None when it equals none."""
        return self.nearest if self.equals else None

    def to_dict(self) -> dict:
        return {
            "slot": self.slot,
            "matched": self.matched,
            "nearest": self.nearest,
            "relative_error": round(self.error, 6),
            "second": self.second,
            "second_relative_error": None
            if self.second_error is None
            else round(self.second_error, 6),
            "tolerance": self.tolerance,
        }


@dataclass(frozen=True)
class TargetSlots:
    """The measurement: the target's layer count, the samples run, one match per slot; or why it
    could not run (`skipped`)."""

    target: str
    num_layers: int | None
    samples: tuple[int, ...]
    matches: tuple[SlotMatch, ...] = ()
    skipped: str | None = None
    # Loss-masked tokens that are the target's own greedy choice at the previous position, of
    # how many (None: not measured): data the target did not write agrees far less.
    argmax_agree: tuple[int, int] | None = None

    @property
    def measured(self) -> bool:
        return self.skipped is None and bool(self.matches)

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "num_layers": self.num_layers,
            "samples": list(self.samples),
            "matches": [m.to_dict() for m in self.matches],
            "skipped": self.skipped,
            "target_argmax_tokens": None
            if self.argmax_agree is None
            else {"hits": self.argmax_agree[0], "total": self.argmax_agree[1]},
        }


def match_slot(
    slot: int, stored: Sequence[torch.Tensor], states: Sequence[dict[int | str, torch.Tensor]]
) -> SlotMatch:
    """Match one slot (its stored tensor per sample) against the target's states per sample: the
    error to each state is the mean over the samples."""
    keys = list(states[0])
    err: dict[int | str, float] = {}
    for k in keys:
        e = []
        for s, st in zip(stored, states, strict=True):
            ref = st[k].float()
            e.append(float((s.float() - ref).norm() / ref.norm().clamp_min(1e-12)))
        err[k] = sum(e) / len(e)
    ranked = sorted(keys, key=lambda k: err[k])
    second = ranked[1] if len(ranked) > 1 else None
    return SlotMatch(
        slot,
        ranked[0],
        err[ranked[0]],
        second,
        err[second] if second is not None else None,
        tolerance(stored[0].dtype),
    )


def measure_slots(
    ev: Evaluator,
    target: str | Path,
    samples: Sequence[int],
    n: int = N_SAMPLES,
    *,
    model: TargetModel | None = None,
) -> TargetSlots:
    """Run the target over the first `n` readable samples of `samples` and match every slot
    (`model`: the target already loaded, for a doctor that runs it again later).

    Never raises for an unusable target: the reason is in `skipped` (the doctor says it)."""
    if model is None:
        why = too_big(Path(target), ev.device)
        if why is not None:
            return TargetSlots(str(target), None, (), skipped=why)
        try:
            from inspector.capture.transformers_target import TargetModel

            model = TargetModel(target, device="cpu" if ev.device.type == "cpu" else "auto")
        except ImportError:
            return TargetSlots(str(target), None, (), skipped="transformers is not installed")
        except InputError as e:
            return TargetSlots(str(target), None, (), skipped=str(e))
    L = model.info.num_layers
    every: list[int | str] = [*range(L + 1), POST]
    stored: list[list[torch.Tensor]] = []
    states: list[dict[int | str, torch.Tensor]] = []
    head = model.model.get_output_embeddings()
    agree = [0, 0]
    ran: list[int] = []
    for i in samples:
        if len(ran) == n:
            break
        try:
            sample = ev.samples[i]
        except InputError:  # an unreadable sample is the samples finding's business
            continue
        ran.append(i)
        try:
            got = model.slots(sample.input_ids.tolist(), tuple(every), torch.float32)
        except (RuntimeError, IndexError, ValueError) as e:
            return TargetSlots(str(target), L, tuple(ran), skipped=f"sample {i}: {e}")
        states.append(dict(zip(every, got, strict=True)))
        stored.append(list(sample.slots))
        if head is not None:
            hits, total = argmax_agreement(got[-1], head.weight, sample.input_ids, sample.loss_mask)
            agree[0] += hits
            agree[1] += total
    if not stored:
        return TargetSlots(str(target), L, (), skipped="no sample to run")
    n_slots = len(stored[0])
    matches = tuple(match_slot(j, [s[j] for s in stored], states) for j in range(n_slots))
    agreement = (agree[0], agree[1]) if head is not None and agree[1] else None
    return TargetSlots(str(target), L, tuple(ran), matches, argmax_agree=agreement)


@torch.no_grad()
def argmax_agreement(
    post_norm: torch.Tensor, head: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor
) -> tuple[int, int]:
    """How many loss-masked tokens x_{j+1} are the target's argmax at position j (of how many):
    `post_norm` [T, H] is the target's final normed state, `head` its lm_head [V, H]."""
    j = torch.arange(ids.numel() - 1)
    j = j[mask[j + 1].bool()]
    if j.numel() == 0:
        return 0, 0
    pred = (post_norm[j].float() @ head.float().T).argmax(-1)
    return int((pred.cpu() == ids[j + 1].cpu()).sum()), int(j.numel())


def weight_bytes(folder: Path) -> int | None:
    """The bytes a model folder's weights declare (safetensors headers only; None otherwise)."""
    from inspector.formats.tensorfiles import find_weight_file, tensor_headers

    try:
        headers = tensor_headers(find_weight_file(folder))
    except InputError:
        return None
    return None if headers is None else sum(h.end - h.begin for h in headers.values())


def too_big(folder: Path, device: torch.device) -> str | None:
    """Why the target is not loaded: its weights exceed the memory now available (a 70B target
    on a CPU host), or None. Only the memory the weights need is checked, not the activations."""
    from inspector.memory import available_host_bytes, free_device_bytes

    need = weight_bytes(folder)
    if need is None:
        return None
    free = free_device_bytes(device) if device.type != "cpu" else available_host_bytes()
    if free is None or need <= free:
        return None
    return (
        f"its weights take {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB are free on "
        f"{device.type}: capture the samples on the target's machine and compare there"
    )


def describe(m: SlotMatch) -> str:
    """`slot 3 = HF 4 (rel. error 0.0017)`, or the nearest when it equals none."""
    if m.equals:
        return f"slot {m.slot} = {_name(m.nearest)} (rel. error {m.error:.2g})"
    return (
        f"slot {m.slot} equals no target state (nearest {_name(m.nearest)}, rel. error "
        f"{m.error:.2g} > {m.tolerance:.2g})"
    )
