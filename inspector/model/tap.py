"""An observer of the forward's intermediate values, for the train/serve trace.

The one forward (`forward.draft_step` and `decoder.layer`, `block.anchored_block_hidden`, and
`heads.draft_logits`) calls a `Tap`, when one is given, with a stage's name and its value:
`embed` (a block draft's `context` first), per layer `layer{i}.attn_input`, `layer{i}.residual`,
`layer{i}.attn_out`, `layer{i}.mlp_out`, `layer{i}.out`, then `norm`. (The trace records fc's
output itself: it is computed before the forward.) Without a tap nothing is recorded and nothing is copied, so the
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
