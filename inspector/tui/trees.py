"""The draft tree of every row of a sample, for the app's tree panel (device thread only).

`serving.tree_forward.RowTrees` builds the tree an engine drafts at every row in one batched pass;
this turns it into plain numpy (`events.SampleTrees`): each node's target token, parent, depth and
cumulative probability, and the realised path, the nodes whose tokens are the sample's own
continuation (what greedy verification accepts). No Textual here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inspector.tui.events import SampleTrees

if TYPE_CHECKING:
    from inspector.evaluate import Evaluator
    from inspector.serving.spec import DraftSpec
    from inspector.wiring import Wiring, WiringKey


def sample_trees(
    ev: Evaluator, index: int, wiring: WiringKey, fed: Wiring, spec: DraftSpec
) -> SampleTrees:
    """Row j's tree is the round after committed x_0..x_{j+1} (its first drafted token is
    x_{j+2}, the token the strip's cursor sits on at row j); `ev` is the draft `wiring` (the
    app's key) feeds, `fed` its slots."""
    import numpy as np
    import torch

    from inspector.serving.beam import accepted_path
    from inspector.serving.tree_forward import RowTrees

    sample = ev.samples[index]
    t = int(sample.length)
    m = spec.draft_tokens - 1
    if t < 3:
        empty = np.zeros((0, m), dtype=np.int64)
        return SampleTrees(
            index, tuple(wiring), spec, empty, empty, empty, empty.astype(np.float32),
            empty.astype(bool), np.zeros(0, dtype=np.int64),
        )  # fmt: skip
    with torch.inference_mode():
        h = ev.fc_output(index, fed)
        ids = sample.input_ids.to(ev.device)
        rt = RowTrees(
            ev.draft, h[: t - 2], ids[1 : t - 1], spec,
            position_offset=ev.position_offset, chunking=ev.chunking,
        )  # fmt: skip
        tr = rt.trees()
        d2t = ev.draft.vocab.draft_to_target.to(ids.device)
        tokens = d2t[tr.tokens]
        r = t - 2  # rows 0..T-3: each has at least its first token x_{j+2} to match
        rows = torch.arange(r, device=ids.device)
        pos = (rows[:, None] + 2 + torch.arange(spec.steps, device=ids.device)).clamp(max=t - 1)
        limit = t - 2 - rows
        a, at = accepted_path(tokens, tr.parent, ids[pos], limit)
        # The realised path: the last accepted node and its ancestors.
        on_path = torch.zeros_like(tr.parent, dtype=torch.bool)
        node = at.clone()
        for _ in range(spec.steps):
            live = node >= 0
            on_path[rows[live], node[live]] = True
            node = torch.where(live, tr.parent.gather(1, node.clamp(min=0)[:, None])[:, 0], node)
    return SampleTrees(
        index=index,
        wiring=tuple(wiring),
        spec=spec,
        tokens=tokens.cpu().numpy(),
        parent=tr.parent.cpu().numpy(),
        depth=tr.depth.cpu().numpy(),
        prob=tr.score.float().exp().cpu().numpy(),
        on_path=on_path.cpu().numpy(),
        accepted=a.cpu().numpy(),
    )
