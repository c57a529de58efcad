"""Serving acceptance: the accept length a speculative-decoding engine reports, replayed exactly
from saved samples (`replay`), and measured by a live loop against the target (`live`).

- `spec`: the engine settings (steps, topk, draft tokens) and their engine flag names;
- `beam`: the EAGLE-2/3 dynamic-tree selection and the greedy verification walk, on any batch;
- `tree_forward`: the draft forwards of every tree node for every possible round start at once;
- `walk`: generation runs, the rounds an engine would take through them, the pooled statistics;
- `replay`: the above over an `Evaluator`'s samples, per wiring;
- `live`: real speculative decoding against the transformers target, reported like the replay,
  its realised sequences written as samples the replay must reproduce round by round
  (`live_draft`: its draft side; `verify`: the target's verification of a tree).
"""

from inspector.serving.spec import DraftSpec

__all__ = ["DraftSpec"]
