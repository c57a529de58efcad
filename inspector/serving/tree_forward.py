"""Draft trees for every possible round start of a sample, in one batched pass over its rows.

Every engine recomputes the draft's KV of committed positions from the target's features (the
"extend" over accepted tokens each round) and throws away the KV written while drafting. So a
round after committed x_0..x_n sees exactly the step-0 context of row n-1 (feature h_{n-1}
paired with embed(x_n)), whatever earlier rounds did: the trees of all rounds are independent,
and one pass computes the tree of every row.

A tree node at depth l >= 1 that the beam expands runs one draft forward: its parent's pre-norm
output (the row's step-0 output for depth 1) and its own token's embedding, at position
row + l, attending causally to the step-0 keys and to its ancestors' keys and its own (the
EAGLE reference's tree mask). That is the TTT geometry with K branches per level: the K beam
nodes of every row run as a batch of K, the step-0 keys shared, each node's ancestor keys
gathered from the level that wrote them. Memory is linear in rows x K.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from inspector.draft import Draft
from inspector.model import (
    DEFAULT_CHUNKING,
    AttendSpec,
    Chunking,
    LayerCache,
    Step0Shared,
    draft_step,
    next_input,
    resolve_layers,
    step0_at_rows,
    topk_logprobs,
)
from inspector.model.parallel import refuse_parallel
from inspector.serving.beam import Candidates, Trees, accepted_path, beam_candidates, build_trees
from inspector.serving.spec import EXACT_KV, DraftSpec


class RowTrees:
    """The draft side of a round at every row of one sample.

    h: fc output [R, H], row j built from the slots at position j; tokens: x_{j+1} per row [R]
    (target ids). Row j drafts for a round that starts after committed x_0..x_{j+1}.
    rows: the rows whose trees are wanted (ascending), None for all. Every row's step-0 keys are
    still computed (they are every node's context), but on a single-layer Llama draft the rest
    of the work (queries, MLP, head, the tree levels) runs on these rows only: a replay needs
    the rows where rounds start, not the prompt before them. Other drafts run every row.
    """

    def __init__(
        self,
        draft: Draft,
        h: torch.Tensor,
        tokens: torch.Tensor,
        spec: DraftSpec,
        *,
        position_offset: int = 1,
        chunking: Chunking = DEFAULT_CHUNKING,
        rows: torch.Tensor | None = None,
    ) -> None:
        refuse_parallel(draft, "the tree replay (--topk > 1)")
        self.draft = draft
        self.spec = spec
        self.chunking = chunking
        cfg = draft.config
        self._layers = resolve_layers(draft)
        self.d2t = draft.vocab.draft_to_target.to(h.device)
        self._k0: list[tuple[torch.Tensor, torch.Tensor]] = []
        if rows is not None and not Step0Shared.supports(draft):
            rows = None
        self.row_index = rows  # the step-0 row of each tree (None: tree j is row j)
        if rows is not None:
            # Step 0 at the wanted rows; every row's keys.
            shared = Step0Shared(draft, tokens, position_offset)
            z, k, v = step0_at_rows(draft, shared, h[None], rows, chunking)
            self._k0.append((k, v))
            self.rows = int(rows.numel())
            self.base_pos = rows + position_offset
            self.z0 = z  # [1, R', H]
        else:
            self.rows = h.shape[0]
            self.base_pos = torch.arange(self.rows, device=h.device) + position_offset
            # Step 0: the extend over every row; its keys are every node's causal context.
            caches = [LayerCache(cfg.sliding_window(i)) for i in range(cfg.num_layers)]
            self.z0 = draft_step(
                draft, self._layers, h[None], tokens[None], self.base_pos, caches, None, chunking
            )  # [1, R, H]
            self._k0 = [c.last for c in caches]
        # per layer, per depth >= 1: the keys/values each beam node wrote, [K, kvh, R, hd]
        self._kv: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in self._k0]
        self._lineage: list[torch.Tensor] = []  # [depth-1]: ancestor beam index [K, R]
        self._out: torch.Tensor | None = None  # the last level's outputs [K, R, H]

    def _topk_children(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-K draft ids and log-probs of the nodes' outputs z [B, R, H]: [B, R, K] each."""
        rows = max(1, self.chunking.logit_rows(self.draft.config.draft_vocab_size) // z.shape[0])
        return topk_logprobs(self.draft, z, self.spec.topk, rows)

    def root(self) -> tuple[torch.Tensor, torch.Tensor]:
        v, i = self._topk_children(self.z0)
        return v[0], i[0]

    def expand(
        self, level: int, parent: torch.Tensor, tokens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the depth-`level` beam nodes ([R, K] parents and draft ids) and return their
        children's top-K ([R, K, K] log-probs and draft ids)."""
        cfg = self.draft.config
        k = self.spec.topk
        p = parent.T  # [K, R]: beam-major, the batch dim of the forward
        if level == 1:
            hidden = self.z0.expand(k, -1, -1)
        else:
            assert self._out is not None
            hidden = self._out.gather(0, p[:, :, None].expand(-1, -1, self._out.shape[-1]))
            if self.spec.kv != EXACT_KV:
                # SGLang's draft decode for topk > 1: beam row b reads the KV that row b wrote at
                # every earlier level, whichever node its true parent was (the hidden state
                # still comes from the true parent).
                own = torch.arange(k, device=p.device)[:, None].expand_as(p)
                self._lineage = [own] * (len(self._lineage) + 1)
            else:
                # the ancestors of the new nodes: their parents' lineage and the parents
                self._lineage = [lin.gather(0, p) for lin in self._lineage] + [p]
        caches = [self._cache(i) for i in range(cfg.num_layers)]
        x = draft_step(
            self.draft,
            self._layers,
            next_input(self.draft, hidden),
            self.d2t[tokens.T],
            self.base_pos + level,
            caches,
            AttendSpec(rows=self.row_index),
            self.chunking,
        )
        for i, cache in enumerate(caches):
            self._kv[i].append(cache.last)
        self._out = x
        v, ids = self._topk_children(x)  # [K, R, K]
        return v.permute(1, 0, 2), ids.permute(1, 0, 2)

    def _cache(self, layer: int) -> LayerCache:
        """Layer `layer`'s keys for the next level: every row's step-0 keys, then the keys each
        node's ancestors wrote at depths 1.. (its lineage), one entry per depth."""
        k0, v0 = self._k0[layer]
        kv = self._kv[layer]
        lineage = self._lineage
        return LayerCache(
            self.draft.config.sliding_window(layer),
            [k0] + [self._gather(kk, lin) for (kk, _), lin in zip(kv, lineage, strict=True)],
            [v0] + [self._gather(vv, lin) for (_, vv), lin in zip(kv, lineage, strict=True)],
        )

    @staticmethod
    def _gather(t: torch.Tensor, lineage: torch.Tensor) -> torch.Tensor:
        """t [K, kvh, R, hd] at each node's ancestor: out[b, :, r] = t[lineage[b, r], :, r]."""
        idx = lineage[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3])
        return t.gather(0, idx)

    def trees(self) -> Trees:
        return build_trees(self.root(), self.expand, self.spec)

    def candidates(self) -> Candidates:
        """Every candidate of the spec's beam: the trees of any shallower steps and any smaller
        draft-token budget of the same topk select from them (`Candidates.select`)."""
        return beam_candidates(self.root(), self.expand, self.spec.topk, self.spec.steps)


def deepest(specs: Sequence[DraftSpec]) -> DraftSpec:
    """The one beam that holds the trees of every setting in `specs` (one topk, one kv mode):
    the most steps, every candidate verified (the budget only matters to `select`)."""
    if not specs:
        raise ValueError("no settings")
    k, kv = specs[0].topk, specs[0].kv
    if any(s.topk != k or s.kv != kv for s in specs):
        raise ValueError("one beam serves settings of one topk and kv mode only")
    steps = max(s.steps for s in specs)
    return DraftSpec(steps, k, None if k == 1 else k + (steps - 1) * k * k + 1, kv=kv)


def tree_accepts(
    draft: Draft,
    h: torch.Tensor,
    ids: torch.Tensor,
    spec: DraftSpec,
    *,
    position_offset: int = 1,
    chunking: Chunking = DEFAULT_CHUNKING,
    starts: torch.Tensor | None = None,
) -> torch.Tensor:
    """a_by_start [T] for one sample: how many drafted tokens of a round after committed x_0..x_n
    match x_{n+1}, x_{n+2}, ... (uncapped by runs; a_by_start[0] = 0, no round starts there).

    h: fc output [T-1, H] (rows 0..T-2); ids: x_0..x_{T-1} [T].
    starts: the n whose rounds are wanted (ascending, 1 <= n <= T-1); a_by_start is 0 at every
      other n. None: every n.
    """
    return tree_accepts_many(
        draft, h, ids, [spec], position_offset=position_offset, chunking=chunking, starts=starts
    )[0]


def tree_accepts_many(
    draft: Draft,
    h: torch.Tensor,
    ids: torch.Tensor,
    specs: Sequence[DraftSpec],
    *,
    position_offset: int = 1,
    chunking: Chunking = DEFAULT_CHUNKING,
    starts: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """`tree_accepts` of every setting in `specs` (one topk and kv mode), from one beam: the
    deepest setting's forwards, each setting's tree selected from its candidates."""
    t = ids.shape[0]
    with torch.inference_mode():
        want = None if starts is None else starts.to(ids.device) - 1  # row n-1 drafts after x_n
        big = deepest(specs)
        rt = RowTrees(
            draft,
            h[: t - 1],
            ids[1:t],
            big,
            position_offset=position_offset,
            chunking=chunking,
            rows=want,
        )
        cands = rt.candidates()
        d2t = rt.d2t
        rows = torch.arange(t - 1, device=ids.device) if rt.row_index is None else rt.row_index
        # row r: the round after x_0..x_{r+1}; its truth is x_{r+2}, ..., at most T-2-r tokens
        pos = (rows[:, None] + 2 + torch.arange(big.steps, device=ids.device)).clamp(max=t - 1)
        truth = ids[pos]
        limit = (t - 2 - rows).clamp(min=0)
        outs = []
        for spec in specs:
            assert spec.draft_tokens is not None
            tr = cands.select(spec.steps, spec.draft_tokens)
            a, _ = accepted_path(d2t[tr.tokens], tr.parent, truth[:, : spec.steps], limit)
            out = torch.zeros(t, dtype=torch.long, device=ids.device)
            out[rows + 1] = a
            outs.append(out)
    return outs


def chain_accepts_forward(
    draft: Draft,
    h: torch.Tensor,
    ids: torch.Tensor,
    specs: Sequence[DraftSpec],
    *,
    position_offset: int = 1,
    chunking: Chunking = DEFAULT_CHUNKING,
) -> list[torch.Tensor]:
    """a_by_start [T] of each chain setting in `specs` from teacher-forced TTT over `h` (fc
    output, row j from position j) and `ids` (x_0..x_T-1): round after x_n drafts from row n-1
    and accepts the leading steps whose argmax is the true token. For a draft whose steps read
    no other step's draft (P-EAGLE's depths) this is the served chain exactly; the tree pass
    (`RowTrees`) refuses such a draft."""
    from inspector.metrics.rounds import chain_accepts
    from inspector.model import iter_steps
    from inspector.model.heads import draft_logits

    t = ids.shape[0]
    steps = max(s.steps for s in specs)
    steps = min(steps, max(t - 2, 0))
    d2t = draft.vocab.draft_to_target.to(ids.device)
    hits = []
    with torch.inference_mode():
        if steps > 0:
            for k, z in iter_steps(
                draft, h[: t - 1], ids[1:t], steps, position_offset, chunking=chunking
            ):
                n = t - 2 - k  # rows 0..n-1 have a true token x_{j+2+k}
                pred = (
                    torch.cat(
                        [
                            draft_logits(draft, z[a : min(n, a + 256)]).argmax(-1)
                            for a in range(0, n, 256)
                        ]
                    )
                    if n > 0
                    else torch.zeros(0, dtype=torch.long, device=ids.device)
                )
                hits.append((d2t[pred] == ids[2 + k : 2 + k + n]).cpu().numpy())
    outs = []
    for spec in specs:
        outs.append(torch.from_numpy(chain_accepts(hits[: spec.steps], t)))
    return outs
