"""The EAGLE-2/3 dynamic tree and its greedy verification, on a batch of independent rounds.

The selection is the EAGLE reference's `topK_genrate` (and SGLang's `draft_forward` +
`organize_draft_results`, which rank by products of probabilities: the same order):

1. level 0: the top-K tokens of the root's draft distribution, scored by their log-probability;
2. each further level: every beam node's top-K children, scored by cumulative log-probability;
   all K*K become candidates, and the global top-K of them (parent-major order) are the next beam;
3. the tree: the N-1 candidates with the highest scores, in candidate order (a parent always
   precedes its children: a child's score is at most its parent's, and earlier on a tie).

Equal scores go to the lower index everywhere (`stable_topk`); torch.topk leaves ties unordered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from inspector.model.heads import stable_topk
from inspector.serving.spec import DraftSpec

__all__ = [
    "Candidates",
    "Trees",
    "accepted_path",
    "beam_candidates",
    "build_trees",
    "stable_topk",
]


@dataclass
class Trees:
    """One draft tree per batch row (root excluded): M = draft_tokens - 1 nodes each.

    tokens: draft-vocab ids [R, M]; parent: index of each node's parent among the M, -1 for the
    root [R, M]; depth: 1 for the root's children [R, M]; score: cumulative log-prob [R, M].
    Nodes are in candidate order, so parents come before their children.
    """

    tokens: torch.Tensor
    parent: torch.Tensor
    depth: torch.Tensor
    score: torch.Tensor


# expand(level, parent, tokens) runs the forward of the current beam nodes (level >= 1: the nodes
# chosen at tree depth `level`; `parent[r, b]` is the beam index of node b's parent at the previous
# level, `tokens[r, b]` its draft id) and returns the top-K children of every node:
# (log-probs [R, K, K], draft ids [R, K, K]), each node's children by `stable_topk`.
Expand = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class Candidates:
    """Every node the beam proposed, per batch row, in candidate order: the root's top-K, then
    each level's K*K (parent-major). [R, C] each, C = topk + (steps - 1) * topk^2.

    tokens: draft ids; parent: candidate index of each node's parent, -1 for the root's
    children; depth: 1 for the root's children; score: cumulative log-prob.

    The beam's levels do not depend on how deep it goes, so the first topk + (s-1)*topk^2
    candidates are exactly those of an s-step beam, and any draft-token budget selects from
    them: one beam gives the tree of every (steps, draft_tokens) of its topk (`select`).
    """

    tokens: torch.Tensor
    parent: torch.Tensor
    depth: torch.Tensor
    score: torch.Tensor
    topk: int

    @property
    def steps(self) -> int:
        return 1 + (self.score.shape[1] - self.topk) // (self.topk * self.topk)

    def select(self, steps: int, draft_tokens: int) -> Trees:
        """The tree of `steps` steps and `draft_tokens` tokens (the root included): the N-1
        highest-scoring candidates of the first `steps` levels, in candidate order."""
        if not 1 <= steps <= self.steps:
            raise ValueError(f"steps {steps}: this beam has 1..{self.steps}")
        k = self.topk
        c = k + (steps - 1) * k * k
        m = draft_tokens - 1
        if not 1 <= m <= c:
            raise ValueError(f"draft_tokens {draft_tokens}: {steps} steps give 2..{c + 1}")
        # A prefix of the candidates is closed under parents (a parent precedes its children).
        scores = self.score[:, :c]
        r = scores.shape[0]
        _, chosen = stable_topk(scores, m)
        chosen, _ = chosen.sort(dim=1)
        # Candidate index -> position among the chosen (parents are always chosen with a child).
        where = torch.full_like(scores, -1, dtype=torch.long)
        where.scatter_(1, chosen, torch.arange(m, device=scores.device).expand(r, m))
        cand_par = self.parent[:, :c].gather(1, chosen)
        par = torch.where(cand_par < 0, cand_par, where.gather(1, cand_par.clamp(min=0)))
        return Trees(
            tokens=self.tokens[:, :c].gather(1, chosen),
            parent=par,
            depth=self.depth[:, :c].gather(1, chosen),
            score=scores.gather(1, chosen),
        )


def beam_candidates(
    root_logp: tuple[torch.Tensor, torch.Tensor], expand: Expand, topk: int, steps: int
) -> Candidates:
    """Every candidate of a `steps`-step beam of width `topk` from the root's top-K (log-probs
    [R, K], ids [R, K])."""
    k = topk
    beam_score, beam_tok = root_logp
    r = beam_score.shape[0]
    dev = beam_score.device
    cand_score = [beam_score]
    cand_tok = [beam_tok]
    cand_parent = [torch.full((r, k), -1, dtype=torch.long, device=dev)]
    cand_depth = [torch.ones((r, k), dtype=torch.long, device=dev)]
    beam_cand = torch.arange(k, device=dev).expand(r, k)  # candidate index of each beam node
    parent = torch.zeros((r, k), dtype=torch.long, device=dev)  # level 1's parent: the root
    offset = k
    for level in range(1, steps):
        child_logp, child_tok = expand(level, parent, beam_tok)
        cum = beam_score[:, :, None] + child_logp  # [R, K parents, K children]
        cand_score.append(cum.reshape(r, k * k))
        cand_tok.append(child_tok.reshape(r, k * k))
        cand_parent.append(beam_cand[:, :, None].expand(r, k, k).reshape(r, k * k))
        cand_depth.append(torch.full((r, k * k), level + 1, dtype=torch.long, device=dev))
        beam_score, top = stable_topk(cum.reshape(r, k * k), k)
        parent = top // k
        beam_tok = child_tok.reshape(r, k * k).gather(1, top)
        beam_cand = offset + top
        offset += k * k
    return Candidates(
        tokens=torch.cat(cand_tok, dim=1),
        parent=torch.cat(cand_parent, dim=1),
        depth=torch.cat(cand_depth, dim=1),
        score=torch.cat(cand_score, dim=1),
        topk=k,
    )


def build_trees(
    root_logp: tuple[torch.Tensor, torch.Tensor], expand: Expand, spec: DraftSpec
) -> Trees:
    """The tree of every row, from the root's top-K (log-probs [R, K], ids [R, K])."""
    cands = beam_candidates(root_logp, expand, spec.topk, spec.steps)
    assert spec.draft_tokens is not None  # DraftSpec sets it for a chain
    return cands.select(spec.steps, spec.draft_tokens)


def accepted_path(
    tree_targets: torch.Tensor, parent: torch.Tensor, truth: torch.Tensor, limit: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy verification of every row's tree against the realised continuation.

    tree_targets: the nodes' tokens as target ids [R, M]; parent [R, M]; truth: x_{n+1}, x_{n+2},
    ... as target ids [R, S] (any value past `limit`); limit: how many of them may be matched [R].
    Returns (a [R], the node index of the last accepted node, -1 for none [R]): the length of
    the longest root-to-node path whose tokens equal truth's prefix. Siblings carry distinct
    tokens (top-K of one distribution), so at most one child matches at each depth.
    """
    r, m = tree_targets.shape
    dev = tree_targets.device
    a = torch.zeros(r, dtype=torch.long, device=dev)
    at = torch.full((r,), -1, dtype=torch.long, device=dev)
    nodes = torch.arange(m, device=dev)
    for d in range(truth.shape[1]):
        live = limit > d
        match = (parent == at[:, None]) & (tree_targets == truth[:, d : d + 1]) & live[:, None]
        found = match.any(1)
        if not bool(found.any()):
            break
        nxt = torch.where(match, nodes, m).amin(1)
        at = torch.where(found, nxt, at)
        a = a + found.long()
        # A row that missed at depth d is done: a deeper node on its path would need this one.
        limit = torch.where(found, limit, torch.zeros_like(limit))
    return a, at
