"""Verification at temperature > 0, per engine rule: the target's distribution as the engines
shape it, the probability that each drafted node is accepted, and the random process itself.

The target's distribution (both engines, as of vLLM 0.32-0.33 and SGLang 0.5):
softmax(logits / temperature), then top-k (the k largest logits, ties at the k-th kept), then
top-p over what top-k left (the smallest set from the top whose mass reaches p: a token is kept
when the mass strictly above it is below p), renormalised. vLLM applies both to the logits
(`apply_top_k_top_p`), SGLang to the probabilities (`top_k_renorm_prob`, `top_p_renorm_prob`):
the same kept set. Neither engine shapes the draft's distribution by the request's top-k/top-p.

The rules (`VerifyRule`), a node's children tried in node order (the draft's score order):

- `vllm-onehot` (vLLM's default, `draft_sample_method="greedy"`): drafts are the draft's argmax
  and count as q = 1: accept d with probability p(d) (`target_prob / 1 >= uniform`); a rejected
  d is removed from p and the recovered token is sampled from what is left. Chains only.
- `sglang-target-only` (SGLang's default, `TreeSpeculativeSamplingTargetOnly`): one uniform
  `coin` per node reached; over the node's children in order `prob_acc += p(child)` and the
  child is accepted if `coin <= prob_acc / threshold_acc or p(child) >= threshold_single`; the
  final token is sampled from relu(p - draft_probs), the rejected children's p in draft_probs
  (p with them removed). At the default thresholds 1.0 a child is accepted with probability
  p(child) exactly, as under vllm-onehot; lower thresholds accept more (lossy).
- `llamacpp-target-only` (llama.cpp's only rule, common/sampling.cpp): drafts are the
  draft's argmax; the target samples its own token from p under its sampler chain and the draft
  token is accepted while they are equal, the sampled token emitted at the first mismatch. In
  distribution that is vllm-onehot's: d accepted with probability p(d), else a token from p
  without d; it is drawn here as vllm-onehot draws it. Chains only.
- `vllm-probabilistic` (`draft_sample_method="probabilistic"`) and `sglang-rejection`
  (`--speculative-use-rejection-sampling`): the chain's tokens are sampled from the draft's q =
  softmax(draft logits / temperature) (the draft vocabulary's, mapped into the target's) and
  accepted with probability min(1, p(d) / q(d)); a rejection samples from relu(p - q).

In every rule the bonus after a fully accepted path is sampled from p at its last node.

The probability that node j lies on the accepted path, `reach[j]`, is the product along its
path of each step's acceptance probability given its parent was reached; a round accepts at
most one node per depth, so E[accepted] = sum(reach) and P(accepted >= k) = the reach of depth
k's nodes. For the sampled-draft rules `reach` is conditional on the chain that was drafted
(its q(d) known); averaged over the draws it is E[accepted] under the rule, and at depth 1 it
averages to sum_x min(p(x), q(x)).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from inspector.serving.sampling_settings import Sampling, Verification, VerifyRule


def target_probs(logits: torch.Tensor, s: Sampling) -> torch.Tensor:
    """The target's distribution [.., V] in float64 from its logits, shaped as the engines shape
    it (module docstring); greedy: one-hot at the argmax (the lowest id on a tie)."""
    x = logits.double()
    if s.greedy:
        out = torch.zeros_like(x)
        return out.scatter_(-1, x.argmax(-1, keepdim=True), 1.0)
    x = x / s.temperature
    if s.top_k and s.top_k < x.shape[-1]:
        kth = x.topk(s.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    p = torch.softmax(x, dim=-1)
    if s.top_p < 1:
        sp, order = p.sort(dim=-1, descending=True, stable=True)
        above = sp.cumsum(-1) - sp  # the mass strictly above each token
        keep = torch.zeros_like(p, dtype=torch.bool).scatter_(-1, order, above < s.top_p)
        p = torch.where(keep, p, 0.0)
        p = p / p.sum(-1, keepdim=True)
    return p


def children_odds(p_children: Sequence[float], v: Verification) -> list[float]:
    """Under target-only verification, P(child i is the one accepted | its parent reached), for
    the parent's children in order with target probabilities `p_children` (the coin rule)."""
    out: list[float] = []
    acc = 0.0
    below = 0.0  # P(coin <= the previous bound): an earlier child took those coins
    for p in p_children:
        acc += p
        if p >= v.threshold_single:  # accepted whatever the coin
            out.append(1.0 - below)
            out.extend(0.0 for _ in range(len(p_children) - len(out)))
            return out
        bound = min(1.0, acc / v.threshold_acc)
        out.append(max(0.0, bound - below))
        below = max(below, bound)
    return out


def node_reach(
    probs: torch.Tensor,
    tokens: Sequence[int],
    parent: Sequence[int],
    v: Verification,
    q_drafted: Sequence[float] | None = None,
) -> np.ndarray:
    """P(node j is on the accepted path), [M], from the target's distribution at the root and at
    each node (`probs` [M + 1, V], row 0 the root's), the nodes' target ids and their parents
    (-1: the root; parents before children). `q_drafted[j]`: q(token j) of a sampled chain
    (the sampled-draft rules)."""
    m = len(tokens)
    reach = np.zeros(m, dtype=np.float64)
    if v.rule.samples_drafts:
        if q_drafted is None or len(q_drafted) != m:
            raise ValueError("the sampled-draft rules need q(d) at every drafted node")
        prev = 1.0
        for j in range(m):
            if parent[j] != j - 1:
                raise ValueError(f"{v.rule.value} verifies chains: node {j} is not a chain's")
            p = float(probs[j, tokens[j]])
            q = float(q_drafted[j])
            prev *= min(1.0, p / q) if q > 0 else 0.0  # vLLM: q = 0 rejects
            reach[j] = prev
        return reach
    kids: dict[int, list[int]] = {}
    for j, par in enumerate(parent):
        kids.setdefault(par, []).append(j)
    for par, js in kids.items():
        row = probs[par + 1]
        odds = children_odds([float(row[tokens[j]]) for j in js], v)
        base = 1.0 if par < 0 else reach[par]
        for j, o in zip(js, odds, strict=True):
            reach[j] = base * o
    return reach


@dataclass(frozen=True)
class RoundOdds:
    """One round's acceptance under the rule, given its start: E[accepted], Var[accepted], and
    P(accepted >= k) for k = 1..depth."""

    expected: float
    variance: float
    at_least: tuple[float, ...]

    @classmethod
    def of(cls, reach: np.ndarray, node_depth: Sequence[int], depth: int) -> RoundOdds:
        at = np.zeros(depth, dtype=np.float64)
        for r, d in zip(reach, node_depth, strict=True):
            at[int(d) - 1] += r
        at = np.clip(at, 0.0, 1.0)
        e = float(at.sum())
        # accepted = sum_k [accepted >= k], so E[a^2] = sum_k (2k - 1) P(a >= k)
        e2 = float(((2 * np.arange(1, depth + 1) - 1) * at).sum())
        return cls(e, max(0.0, e2 - e * e), tuple(float(x) for x in at))


Uniform = Callable[[], float]
Categorical = Callable[[torch.Tensor], int]


def torch_draws(gen: torch.Generator | None) -> tuple[Uniform, Categorical]:
    """The live loop's draws: uniforms and categorical samples from a CPU generator."""

    def uniform() -> float:
        return float(torch.rand((), generator=gen, dtype=torch.float64))

    def categorical(p: torch.Tensor) -> int:
        return int(torch.multinomial(p.float(), 1, generator=gen))

    return uniform, categorical


def _residual(p: torch.Tensor, taken: torch.Tensor) -> torch.Tensor:
    """relu(p - taken), renormalised (p itself if nothing is left: a float-rounding corner)."""
    r = (p - taken).clamp_min(0.0)
    s = float(r.sum())
    return r / s if s > 0 else p


def sample_verify(
    probs: torch.Tensor,
    tokens: Sequence[int],
    parent: Sequence[int],
    v: Verification,
    uniform: Uniform,
    categorical: Categorical,
    q: torch.Tensor | None = None,
) -> tuple[list[int], int]:
    """The random verification itself, as the rule's engine runs it: (the accepted nodes, root
    to leaf; the emitted token after them: the recovered token, or the bonus). `probs` as for
    `node_reach`; `q` [M, V]: the draft's distribution each sampled chain token was drawn from."""
    path: list[int] = []
    if v.rule.samples_drafts:
        if q is None:
            raise ValueError("the sampled-draft rules need the draft's distributions q")
        for j, t in enumerate(tokens):
            p, qj = probs[j], q[j]
            qt = float(qj[t])
            if qt > 0 and uniform() <= float(p[t]) / qt:
                path.append(j)
                continue
            return path, categorical(_residual(p, qj))
        return path, categorical(probs[len(tokens)])
    kids: dict[int, list[int]] = {}
    for j, par in enumerate(parent):
        kids.setdefault(par, []).append(j)
    cur = -1
    while True:
        p = probs[cur + 1]
        taken = torch.zeros_like(p)
        coin = uniform() if v.rule is VerifyRule.SGLANG_TARGET_ONLY else 0.0
        acc = 0.0
        nxt = None
        for j in kids.get(cur, []):
            t = tokens[j]
            pt = float(p[t])
            if v.rule is VerifyRule.SGLANG_TARGET_ONLY:
                acc += pt
                ok = coin <= acc / v.threshold_acc or pt >= v.threshold_single
            else:  # vLLM, llama.cpp: one uniform per draft token, q = 1
                ok = uniform() <= pt
            if ok:
                nxt = j
                break
            taken[t] = p[t]
        if nxt is None:
            return path, categorical(_residual(p, taken))
        path.append(nxt)
        cur = nxt
