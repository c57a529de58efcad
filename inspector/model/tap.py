"""An observer of the forward's intermediate values, for the train/serve trace.

The one forward (`forward.draft_step`, `decoder.layer`, `block.block_hidden`) calls a `Tap`, when
one is given, with a stage's name and its value: `embed`, `fc` / `context`, per layer
`layer{i}.attn_input`, `layer{i}.residual`, `layer{i}.attn_out`, `layer{i}.mlp_out`,
`layer{i}.out`, then `norm`. Without a tap nothing is recorded and nothing is copied, so the
trace reads the very code every other consumer runs, not a second copy of it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Tap = Callable[[str, torch.Tensor], None]


def tap_at(tap: Tap | None, name: str, x: torch.Tensor) -> None:
    """Hand `x` to `tap` under `name`, when there is a tap."""
    if tap is not None:
        tap(name, x)
