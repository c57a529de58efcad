"""The canonical training sample: tokens, captured hidden-state slots, loss mask."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from inspector.errors import InputError, setting_field


@dataclass(frozen=True)
class SlotInfo:
    """What one captured hidden state is."""

    label: str  # "embed", "L3", "s2", "final(post-norm)"
    hf_index: int | None = None  # index into HF output_hidden_states, when known
    post_norm: bool = False  # the target's final state after its norm (SpecForge hidden_state)
    # The verifier's last state (the teacher's source), not an fc input in training.
    verifier: bool = False

    def to_dict(self, index: int) -> dict:
        return {
            "index": index,
            "label": self.label,
            "hf_index": self.hf_index,
            "verifier": self.verifier,
            "post_norm": self.post_norm,
        }


FINISH_REASONS = ("length", "stop")


@dataclass
class Continuation:
    """The target's own greedy continuation past the request's stop, outside the request.

    Engines count, in a request's last round, every drafted token that matched the target's
    continuation, also past EOS or max tokens; a capture writes these tokens (and their slots,
    for SGLang's round after the stop) so that the replay counts them too. They are never part
    of the sample's tokens, loss mask or metrics."""

    ids: torch.Tensor  # int64 [C]: x_T, x_T+1, ...
    slots: list[torch.Tensor]  # S x [C, Ht], the same slots as the sample's
    finish: str = "length"  # how the request stopped: "length" (max tokens) or "stop" (EOS)

    @property
    def length(self) -> int:
        return int(self.ids.numel())


@dataclass
class Sample:
    input_ids: torch.Tensor  # int64 [T]
    slots: list[torch.Tensor]  # S x [T, Ht]
    loss_mask: torch.Tensor  # int64 / bool [T]
    slot_info: list[SlotInfo]
    path: str = ""
    format: str = "unknown"  # "speculators-v1", "specforge", ...
    warnings: list[str] = field(default_factory=list)
    continuation: Continuation | None = None  # the target's tokens past the request's stop
    category: str | None = None  # the request's category (SPEED-Bench style), where it has one

    @property
    def length(self) -> int:
        return int(self.input_ids.numel())

    def prefix(self, n: int) -> Sample:
        """The sample's first n tokens (views, no copy). A causal model's outputs there equal
        those of the whole sample: positions count from the sample's start either way."""
        if n >= self.length:
            return self
        return replace(
            self,
            input_ids=self.input_ids[:n],
            slots=[t[:n] for t in self.slots],
            loss_mask=self.loss_mask[:n],
            continuation=None,  # a prefix stops nowhere the target stopped
        )

    @property
    def verifier_slot(self) -> int | None:
        for i, s in enumerate(self.slot_info):
            if s.verifier:
                return i
        return None


def with_layer_ids(infos: list[SlotInfo], layer_ids: Sequence[int]) -> list[SlotInfo]:
    """The slots with the given HF index each (the `--slot-layers` override of data_config.json).

    HF index k is `output_hidden_states[k]` of the target: 0 the embedding output, k the output of
    decoder layer k-1. A slot whose index changes is relabelled "embed" (0) or "L{k}".
    """
    if len(layer_ids) != len(infos):
        raise InputError(
            None,
            setting_field("slot-layers"),
            f"{len(layer_ids)} ids given, the samples have {len(infos)} slots",
        )
    out = []
    for s, k in zip(infos, layer_ids, strict=True):
        k = int(k)
        label = s.label if s.hf_index == k else ("embed" if k == 0 else f"L{k}")
        out.append(replace(s, hf_index=k, label=label))
    return out


MAX_CATEGORY = 100


def check_category(v: object, where: object, field: str) -> str:
    """A sample's category: a short one-line string (it names a table row)."""
    if not isinstance(v, str) or not v.strip():
        raise InputError(where, field, f"expected a non-empty string, got {type(v).__name__}")
    if len(v) > MAX_CATEGORY or not v.isprintable():
        raise InputError(where, field, f"at most {MAX_CATEGORY} printable characters on one line")
    return v.strip()
