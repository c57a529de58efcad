"""The live loop's draft side: the KV of the committed rows (always from the target's features)
and the tree of a round, drafted one beam level at a time with each node's ancestor mask."""

from __future__ import annotations

from collections.abc import Callable

import torch

from inspector.draft import Draft
from inspector.model import (
    AttendSpec,
    LayerCache,
    draft_logits,
    draft_step,
    next_input,
    resolve_layers,
    topk_logprobs,
)
from inspector.model.parallel import refuse_parallel
from inspector.serving.beam import Trees, build_trees
from inspector.serving.spec import EXACT_KV, P_MIN_TOP_K, DraftSpec


class LiveDraft:
    """The draft's side of one sequence: the KV of its committed rows (always computed from the
    target's features), and the tree of a round drafted from the last committed row."""

    def __init__(self, draft: Draft, spec: DraftSpec, position_offset: int = 1) -> None:
        refuse_parallel(draft, "the live drafter")
        self.draft = draft
        self.spec = spec
        self.offset = position_offset
        self.rows = 0  # committed rows: row j pairs h_j with x_{j+1}
        cfg = draft.config
        self._k: list[torch.Tensor | None] = [None] * cfg.num_layers
        self._v: list[torch.Tensor | None] = [None] * cfg.num_layers
        self._z: torch.Tensor | None = None  # the last committed row's pre-norm output [1, 1, H]
        self._layers = resolve_layers(draft)
        self._d2t = draft.vocab.draft_to_target.to(draft.device)
        # llama.cpp's early stop: each chain step's top-1 probability, renormalised over the
        # draft's top P_MIN_TOP_K (its draft sampler's), in the order `tree` drafted them
        self.confidence: list[float] = []

    @property
    def d2t(self) -> torch.Tensor:
        return self._d2t

    def _run(
        self,
        hidden: torch.Tensor,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        extra: list[tuple[torch.Tensor, torch.Tensor]] | None,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Rows [Q, H] fed with target ids `tokens` [Q] at `positions` [Q], attending by `mask`
        [Q, committed + extra + Q] to the committed keys, `extra` keys per layer and their own.
        Returns the outputs [1, Q, H] and the rows' keys/values per layer."""
        caches = []
        for i in range(self.draft.config.num_layers):
            cache = LayerCache()
            k, v = self._k[i], self._v[i]
            if k is not None and v is not None:
                cache.append(k, v)
            if extra is not None:
                cache.append(*extra[i])
            caches.append(cache)
        spec = AttendSpec(mask=mask)
        x = draft_step(
            self.draft, self._layers, hidden[None], tokens[None], positions, caches, spec
        )
        return x, [c.last for c in caches]

    def extend(self, h: torch.Tensor, tokens: torch.Tensor) -> None:
        """Commit rows: h [m, H] the fc output of the target's features at the next m positions,
        tokens [m] the target ids that follow each (the accepted tokens and the bonus)."""
        m, c = h.shape[0], self.rows
        dev = h.device
        pos = torch.arange(c, c + m, device=dev) + self.offset
        mask = torch.ones(m, c + m, dtype=torch.bool, device=dev)
        mask[:, c:] = torch.ones(m, m, dtype=torch.bool, device=dev).tril()
        x, new = self._run(h, tokens, pos, None, mask)
        for i, (k, v) in enumerate(new):
            old_k, old_v = self._k[i], self._v[i]
            self._k[i] = k if old_k is None else torch.cat([old_k, k], dim=2)
            self._v[i] = v if old_v is None else torch.cat([old_v, v], dim=2)
        self._z = x[:, -1:]
        self.rows += m

    def _topk(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-K log-probs and draft ids of each output row z [1, Q, H]: [1, Q, K] each. Under
        llama.cpp's early stop (a chain's), also the row's top-1 probability among its top
        P_MIN_TOP_K, kept in `confidence`."""
        k = self.spec.topk
        if not self.spec.early_stop:
            return topk_logprobs(self.draft, z, k)
        wide = max(k, min(P_MIN_TOP_K, int(self._d2t.numel())))
        v, ids = topk_logprobs(self.draft, z, wide)
        self.confidence.append(float(torch.softmax(v[0, -1].double(), -1)[0]))
        return v[..., :k], ids[..., :k]

    def kept(self) -> int:
        """How many of the chain `tree` just drafted llama.cpp keeps: up to the first step whose
        top-1 probability is below p_min (that one dropped), none if fewer than n_min remain
        (common/speculative.cpp); every step without the early stop."""
        spec = self.spec
        if not spec.early_stop:
            return spec.steps
        n = next((i for i, c in enumerate(self.confidence) if c < spec.p_min), spec.steps)
        n = min(n, spec.steps)
        return 0 if n < spec.n_min else n

    def tree(self) -> Trees:
        """The round's tree (one row): `build_trees` over this row's beam, each level's K nodes
        run as one batch, every node seeing the committed rows, its ancestors and itself."""
        assert self._z is not None, "extend before drafting"
        k = self.spec.topk
        z = self._z
        dev = z.device
        self.confidence = []
        c = self.rows
        layers = self.draft.config.num_layers
        tree_kv: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(layers)]
        anc = torch.zeros(0, 0, dtype=torch.bool, device=dev)  # [nodes, nodes]: ancestors + self
        state: dict[str, torch.Tensor] = {}

        def expand(
            level: int, parent: torch.Tensor, tokens: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            nonlocal anc
            nodes = anc.shape[0]
            p = parent[0]
            if level == 1:
                hidden = z[0].expand(k, -1)
                par_anc = torch.zeros(k, nodes, dtype=torch.bool, device=dev)
            else:
                hidden = state["out"][p]
                # the keys a node reads: its true ancestors' (exact), or, as SGLang's topk > 1
                # draft decode does, those its own beam row wrote at earlier levels
                row = torch.arange(k, device=dev) if self.spec.kv != EXACT_KV else p
                par_anc = anc[state["nodes"][row]]
            hidden = next_input(self.draft, hidden)
            pos = torch.full((k,), c - 1 + level + self.offset, device=dev)
            own = torch.eye(k, dtype=torch.bool, device=dev)
            mask = torch.cat([torch.ones(k, c, dtype=torch.bool, device=dev), par_anc, own], 1)
            extra = None
            if nodes:
                extra = [
                    (torch.cat([kk for kk, _ in kv], dim=2), torch.cat([vv for _, vv in kv], 2))
                    for kv in tree_kv
                ]
            x, new = self._run(hidden, self._d2t[tokens[0]], pos, extra, mask)
            for i, kv in enumerate(new):
                tree_kv[i].append(kv)
            grown = torch.zeros(nodes + k, nodes + k, dtype=torch.bool, device=dev)
            grown[:nodes, :nodes] = anc
            grown[nodes:] = torch.cat([par_anc, own], 1)
            anc = grown
            state["out"] = x[0]
            state["nodes"] = torch.arange(nodes, nodes + k, device=dev)
            return self._topk(x)

        v, ids = self._topk(z)
        return build_trees((v[0], ids[0]), expand, self.spec)

    def sampled_chain(
        self, temperature: float, categorical: Callable[[torch.Tensor], int]
    ) -> tuple[Trees, torch.Tensor]:
        """A chain of `spec.steps` draft ids sampled from q = softmax(draft logits /
        temperature) (the sampled-draft rules: vLLM's probabilistic drafting, SGLang's
        rejection sampling), each node run as `tree` runs a topk-1 beam's. Returns the chain
        (one row, as `tree`) and the q each token was drawn from, [steps, draft vocab] float64."""
        assert self._z is not None, "extend before drafting"
        z, c = self._z, self.rows
        dev = z.device
        layers = self.draft.config.num_layers
        kv: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(layers)]
        ids: list[int] = []
        qs: list[torch.Tensor] = []
        for level in range(1, self.spec.steps + 1):
            q = torch.softmax(draft_logits(self.draft, z)[0, -1].double() / temperature, -1)
            ids.append(categorical(q.cpu()))
            qs.append(q.cpu())
            if level == self.spec.steps:
                break
            hidden = next_input(self.draft, z[0])
            pos = torch.full((1,), c - 1 + level + self.offset, device=dev)
            mask = torch.ones(1, c + level, dtype=torch.bool, device=dev)
            extra = None
            if level > 1:
                extra = [
                    (torch.cat([k for k, _ in x], dim=2), torch.cat([v for _, v in x], dim=2))
                    for x in kv
                ]
            tok = self._d2t[torch.tensor([ids[-1]], device=dev)]
            z, new = self._run(hidden, tok, pos, extra, mask)
            for i, x in enumerate(new):
                kv[i].append(x)
        s = self.spec.steps
        logq = torch.stack([q[i].log() for q, i in zip(qs, ids, strict=True)]).cumsum(0)
        chain = Trees(
            torch.tensor([ids], device=dev),
            torch.arange(-1, s - 1, device=dev)[None],
            torch.arange(1, s + 1, device=dev)[None],
            logq.float()[None].to(dev),
        )
        return chain, torch.stack(qs)
