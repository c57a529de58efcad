"""The canonical training sample: tokens, captured hidden-state slots, loss mask."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


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


@dataclass
class Sample:
    input_ids: torch.Tensor  # int64 [T]
    slots: list[torch.Tensor]  # S x [T, Ht]
    loss_mask: torch.Tensor  # int64 / bool [T]
    slot_info: list[SlotInfo]
    path: str = ""
    format: str = "unknown"  # "speculators-v1", "specforge", ...
    warnings: list[str] = field(default_factory=list)

    @property
    def length(self) -> int:
        return int(self.input_ids.numel())

    @property
    def verifier_slot(self) -> int | None:
        for i, s in enumerate(self.slot_info):
            if s.verifier:
                return i
        return None
