"""An independent, slow implementation of one speculative-decoding round: the draft run node by
node with explicit attention lists (no batching over rows, no shared caches, no fused kernels),
the beam and the tree selection in plain Python. The replay must equal it on every round."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from inspector.draft import Draft, DraftConfig, RopeConfig, VocabMap
from inspector.model import apply_rope, rms_norm, rope_cos_sin


def random_draft(
    *,
    hidden: int = 32,
    heads: int = 4,
    kv_heads: int = 2,
    layers: int = 1,
    vocab: int = 97,
    draft_vocab: int = 41,
    norm_output: bool = False,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> Draft:
    """A random draft (every layer after the first takes H, as multi-layer drafts do)."""
    g = torch.Generator().manual_seed(seed)
    hd = hidden // heads

    def rnd(*shape: int, scale: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * scale).to(dtype)

    def nw(n: int) -> torch.Tensor:
        return (0.5 + torch.rand(n, generator=g)).to(dtype)

    w = {
        "fc.weight": rnd(hidden, 3 * hidden, scale=(3 * hidden) ** -0.5),
        "norm.weight": nw(hidden),
        "lm_head.weight": rnd(draft_vocab, hidden, scale=3 * hidden**-0.5),
        "embed_tokens.weight": rnd(vocab, hidden, scale=1.0),
    }
    for i in range(layers):
        p, inp = f"layers.{i}.", (2 * hidden if i == 0 else hidden)
        w |= {
            p + "self_attn.q_proj.weight": rnd(heads * hd, inp, scale=2 * inp**-0.5),
            p + "self_attn.k_proj.weight": rnd(kv_heads * hd, inp, scale=2 * inp**-0.5),
            p + "self_attn.v_proj.weight": rnd(kv_heads * hd, inp, scale=inp**-0.5),
            p + "self_attn.o_proj.weight": rnd(hidden, heads * hd, scale=(heads * hd) ** -0.5),
            p + "mlp.gate_proj.weight": rnd(2 * hidden, hidden, scale=hidden**-0.5),
            p + "mlp.up_proj.weight": rnd(2 * hidden, hidden, scale=hidden**-0.5),
            p + "mlp.down_proj.weight": rnd(hidden, 2 * hidden, scale=(2 * hidden) ** -0.5),
            p + "input_layernorm.weight": nw(inp // (2 if i == 0 else 1)),
            p + "post_attention_layernorm.weight": nw(hidden),
        }
        if i == 0:
            w[p + "hidden_norm.weight"] = nw(hidden)
    chosen = torch.randperm(vocab, generator=g)[:draft_vocab].sort().values
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[chosen] = True
    cfg = DraftConfig(
        hidden_size=hidden,
        target_hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=hd,
        intermediate_size=2 * hidden,
        rms_norm_eps=1e-6,
        rope=RopeConfig(theta=10000.0),
        vocab_size=vocab,
        draft_vocab_size=draft_vocab,
        num_layers=layers,
        norm_output=norm_output,
    )
    return Draft(cfg, w, VocabMap(d2t=chosen - torch.arange(draft_vocab), t2d=t2d))


class NodeForward:
    """The draft over an explicit list of nodes, one at a time; node i attends to `sees[i]`."""

    def __init__(self, draft: Draft) -> None:
        self.d = draft
        self.kv: list[list[tuple[torch.Tensor, torch.Tensor]]] = [
            [] for _ in range(draft.config.num_layers)
        ]

    def run(self, hidden: torch.Tensor, token: int, pos: int, sees: list[int]) -> torch.Tensor:
        """The pre-norm output of a new node (its index: the count of earlier nodes)."""
        cfg: DraftConfig = self.d.config
        w = self.d.weights
        eps = cfg.rms_norm_eps
        cos, sin = rope_cos_sin(cfg, torch.tensor([pos]), hidden.device)
        x = hidden
        for i in range(cfg.num_layers):
            p = f"layers.{i}."
            if i == 0:
                e = w["embed_tokens.weight"][token]
                nh = rms_norm(x, w[p + "hidden_norm.weight"], eps)
                a = torch.cat([rms_norm(e, w[p + "input_layernorm.weight"], eps), nh])
                res = nh if cfg.norm_before_residual else x
            else:
                a = rms_norm(x, w[p + "input_layernorm.weight"], eps)
                res = x
            hd = cfg.head_dim
            q = (w[p + "self_attn.q_proj.weight"] @ a).view(cfg.num_heads, 1, hd)
            k = (w[p + "self_attn.k_proj.weight"] @ a).view(cfg.num_kv_heads, 1, hd)
            v = (w[p + "self_attn.v_proj.weight"] @ a).view(cfg.num_kv_heads, 1, hd)
            q = apply_rope(q, cos, sin)[:, 0]
            k = apply_rope(k, cos, sin)[:, 0]
            self.kv[i].append((k, v[:, 0]))
            keys = torch.stack([self.kv[i][j][0] for j in sees], 1)  # [kvh, n, hd]
            vals = torch.stack([self.kv[i][j][1] for j in sees], 1)
            rep = cfg.num_heads // cfg.num_kv_heads
            keys, vals = keys.repeat_interleave(rep, 0), vals.repeat_interleave(rep, 0)
            s = (q[:, None, :].double() * keys.double()).sum(-1) / math.sqrt(hd)  # [h, n]
            o = (torch.softmax(s, -1)[:, :, None] * vals.double()).sum(1).to(x.dtype)
            u = res + w[p + "self_attn.o_proj.weight"] @ o.reshape(-1)
            m = rms_norm(u, w[p + "post_attention_layernorm.weight"], eps)
            gate, up = w[p + "mlp.gate_proj.weight"] @ m, w[p + "mlp.up_proj.weight"] @ m
            x = u + w[p + "mlp.down_proj.weight"] @ (F.silu(gate) * up)
        return x

    def logp(self, z: torch.Tensor) -> torch.Tensor:
        cfg = self.d.config
        n = rms_norm(z, self.d.weights["norm.weight"], cfg.rms_norm_eps)
        logits = (self.d.weights["lm_head.weight"] @ n).float()
        return logits - torch.logsumexp(logits, -1)


def _top(scores: list[float], k: int) -> list[int]:
    """Indices of the k largest, descending, ties to the lower index."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]


def direct_round(
    draft: Draft,
    h: torch.Tensor,
    ids: torch.Tensor,
    n: int,
    steps: int,
    topk: int,
    draft_tokens: int,
    *,
    offset: int = 1,
    end: int | None = None,
    kv: str = "exact",
    window: int | None = None,
    scores_out: list[float] | None = None,
) -> tuple[int, list[int]]:
    """(a, the tree's target ids in candidate order) of the round after committed x_0..x_n.

    h: fc output [T, H]; the prefix rows 0..n-1 pair h_j with x_{j+1}; the realised output is
    x_{n+1}..x_end (end: the sample's last index by default). window: the layer's sliding
    window (a row sees the committed rows at most window-1 back; its ancestors always).
    scores_out: receives the chosen nodes' cumulative log-probs, in the same order."""
    cfg = draft.config
    d2t = draft.vocab.draft_to_target
    end = ids.shape[0] - 1 if end is None else end
    f = NodeForward(draft)
    z = None
    w = window or n + 1
    for j in range(n):  # the extend over the committed rows
        z = f.run(h[j], int(ids[j + 1]), j + offset, list(range(max(0, j + 1 - w), j + 1)))
    assert z is not None
    # candidates: (score, draft id, parent candidate, depth); beam: (candidate, node, output)
    lp = f.logp(z).tolist()
    cands: list[tuple[float, int, int, int]] = []
    beam = []
    for c in _top(lp, topk):
        cands.append((lp[c], c, -1, 1))
        beam.append((len(cands) - 1, None, z))
    rows: list[list[int]] = [[] for _ in range(topk)]  # per beam row: the nodes it ran, by level
    prefix = list(range(max(0, n - w), n))
    ancestors: dict[int | None, list[int]] = {None: []}
    for level in range(1, steps):
        children = []
        for b, (cand, parent_node, parent_out) in enumerate(beam):
            score, tok, _, _ = cands[cand]
            node = len(f.kv[0])
            ancestors[node] = ancestors[parent_node] + [node]
            if kv == "sglang":  # beam row b reads what row b ran at earlier levels
                ancestors[node] = rows[b] + [node]
            rows[b] = rows[b] + [node]
            fed = parent_out
            if cfg.norm_output:  # Eagle 3.1: the next step is fed the normed output
                fed = rms_norm(parent_out, draft.weights["norm.weight"], cfg.rms_norm_eps)
            out = f.run(fed, int(d2t[tok]), n - 1 + offset + level, prefix + ancestors[node])
            clp = f.logp(out).tolist()
            for c in _top(clp, topk):
                children.append((score + clp[c], c, cand, level + 1, node, out))
        base = len(cands)
        for sc, tok, parent, depth, _, _ in children:
            cands.append((sc, tok, parent, depth))
        beam = [
            (base + i, children[i][4], children[i][5]) for i in _top([c[0] for c in children], topk)
        ]
    chosen = sorted(_top([c[0] for c in cands], draft_tokens - 1))
    if scores_out is not None:
        scores_out.extend(cands[c][0] for c in chosen)
    # the greedy walk: the child of the current node whose token is the next realised token
    at, a = -1, 0
    for d in range(steps):
        if n + 1 + d > end:
            break
        want = int(ids[n + 1 + d])
        nxt = [c for c in chosen if cands[c][2] == at and int(d2t[cands[c][1]]) == want]
        if not nxt:
            break
        at, a = nxt[0], a + 1
    return a, [int(d2t[cands[c][1]]) for c in chosen]
