"""What τ replays: the engine's drafting settings and, at a temperature, the requests' sampling
and the engine's verification rule. No Textual, no torch, no numpy.

Greedy (no sampling) τ is the replay's count, 1 + accepted / rounds over the rounds the sample's
own tokens take. At a temperature τ is that figure in expectation: every round's accepted count
replaced by its expectation under the rule, from the target's distributions at the drafted
nodes (`serving.expected_replay`), on the same round starts. The two keys differ, so the app
caches and pools each apart and switching back is immediate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inspector.serving.sampling_settings import SamplingSettings
    from inspector.serving.spec import DraftSpec


def spec_label(spec: DraftSpec) -> str:
    """'chain of 3 steps' or 'tree of 5 steps, topk 4, 8 tokens' (the engine flags' values)."""
    if spec.is_chain:
        return f"chain of {spec.steps} step{'s' if spec.steps > 1 else ''}"
    return f"tree of {spec.steps} steps, topk {spec.topk}, {spec.draft_tokens} tokens"


@dataclass(frozen=True)
class Serving:
    """The settings τ replays under (hashable: the key of its caches and pools)."""

    spec: DraftSpec
    sampling: SamplingSettings | None = None  # None: greedy

    def __post_init__(self) -> None:
        if self.sampling is not None and self.sampling.sampling.greedy:
            object.__setattr__(self, "sampling", None)  # temperature 0 is greedy, one key

    @property
    def greedy(self) -> bool:
        return self.sampling is None

    def with_spec(self, spec: DraftSpec) -> Serving:
        """Other drafting settings, the same sampling."""
        return Serving(spec, self.sampling)

    def label(self) -> str:
        """'chain of 3 steps' or 'chain of 3 steps at temperature 0.7, vllm-onehot
        verification'."""
        if self.sampling is None:
            return spec_label(self.spec)
        return f"{spec_label(self.spec)} at {self.sampling.label()}"
