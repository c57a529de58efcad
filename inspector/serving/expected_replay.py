"""Each replayed round's acceptance odds at a temperature, on saved samples, from the target.

The replay walks a sample's own tokens; for every round it took (start n: x_0..x_n committed), the
draft tree an engine drafts there (`tree_forward.RowTrees`, row n - 1: the draft on its own
tokens, never the sample's) is verified by the target in one batched forward, as the engines
verify: the sample's tokens as the prefix (one prefill, its KV cache kept), then chunks of rounds,
each tree's nodes at positions n + depth attending to x_0..x_n and to their own ancestors (a 4D
mask), the cache trimmed back to the prefix after each chunk. The target's distributions at the
root (the prefill's row n) and at every node give `sampling.node_reach`, hence each round's
RoundOdds under the rule.

What the two figures then mean on samples:
- the expected accept length is what the engine would log, in expectation over its sampling,
  from these round starts: the draft judged by the target's own distribution, whatever the
  samples' text;
- z holds the realised walk (the sample's tokens matched as the target's sampled continuation)
  to that expectation: it is about N(0, 1) only where the samples are the target's own sampled
  continuation at these settings (`capture --generate --temperature T`); a large |z| says the
  data is not what this target samples at T (greedy data, another model's, other settings).

A round whose start lies past the sample's tokens (in its continuation past the stop: a
request's last rounds, SGLang's round after the stop) has no draft tree here: its odds are its
realised count with no variance (it moves neither the expectation nor z by chance).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from inspector.serving.expectation import SampleOdds
from inspector.serving.sampling import RoundOdds, node_reach, target_probs
from inspector.serving.sampling_settings import Sampling, Verification
from inspector.serving.verify import trim_cache

if TYPE_CHECKING:
    from inspector.capture.transformers_target import TargetModel
    from inspector.evaluate import Evaluator
    from inspector.serving.replay import SampleReplay
    from inspector.serving.spec import DraftSpec
    from inspector.wiring import Wiring

CHUNK_TOKENS = 512  # tree tokens verified per target forward


def sample_odds(
    ev: Evaluator,
    target: TargetModel,
    rep: SampleReplay,
    wiring: Wiring,
    spec: DraftSpec,
    sampling: Sampling,
    verification: Verification,
) -> SampleOdds:
    """The odds of every round of `rep` (module docstring)."""
    from inspector.serving.tree_forward import RowTrees

    sample = ev.samples[rep.index]
    t = int(sample.length)
    ids = sample.input_ids.to(ev.device)
    starts = [int(s) for s in rep.starts]
    have = [1 <= s <= t - 2 for s in starts]  # a tree exists at row s - 1 (rows 0..T-3)
    rows = sorted({s - 1 for s, ok in zip(starts, have, strict=True) if ok})
    odds: dict[int, RoundOdds] = {}
    if rows:
        with torch.inference_mode():
            h = ev.fc_output(rep.index, wiring)
            rt = RowTrees(
                ev.draft,
                h[: t - 2],
                ids[1 : t - 1],
                spec,
                position_offset=ev.position_offset,
                chunking=ev.chunking,
            )
            tr = rt.trees()
            d2t = ev.draft.vocab.draft_to_target.to(tr.tokens.device)
            tokens = d2t[tr.tokens].cpu()
            parent, depth = tr.parent.cpu(), tr.depth.cpu()
            logits, _, cache = target.forward_cached(sample.input_ids.cpu(), ())
            root = logits.float().cpu()
            m = tokens.shape[1]
            per = max(1, CHUNK_TOKENS // m)
            for c in range(0, len(rows), per):
                chunk = rows[c : c + per]
                toks, pos, mask = _chunk(chunk, tokens, parent, depth, t)
                out, _, cache = target.forward_cached(
                    toks, (), cache=cache, positions=pos, mask=mask
                )
                trim_cache(cache, torch.arange(t))
                out = out.float().cpu()
                for k, r in enumerate(chunk):
                    n = r + 1
                    probs = target_probs(
                        torch.cat([root[n : n + 1], out[k * m : (k + 1) * m]]), sampling
                    )
                    reach = node_reach(probs, tokens[r].tolist(), parent[r].tolist(), verification)
                    odds[n] = RoundOdds.of(reach, depth[r].tolist(), spec.steps)
    rounds = []
    for s, a, ok in zip(starts, rep.accepted, have, strict=True):
        if ok:
            rounds.append(odds[s])
        else:
            rounds.append(
                RoundOdds(float(a), 0.0, tuple(float(a >= k) for k in range(1, spec.steps + 1)))
            )
    return SampleOdds.of(rounds, spec.steps)


def _chunk(
    rows: list[int], tokens: torch.Tensor, parent: torch.Tensor, depth: torch.Tensor, t: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chunk's tree tokens [Q], positions [Q] and mask [Q, T + Q]: round n = row + 1's
    nodes see x_0..x_n of the prefix, their own ancestors and themselves."""
    m = tokens.shape[1]
    q = len(rows) * m
    mask = torch.zeros(q, t + q, dtype=torch.bool)
    pos = torch.zeros(q, dtype=torch.long)
    toks = torch.zeros(q, dtype=torch.long)
    for k, r in enumerate(rows):
        n = r + 1
        base = k * m
        mask[base : base + m, : n + 1] = True
        anc = np.zeros((m, m), dtype=bool)
        for j in range(m):
            p = int(parent[r, j])
            if p >= 0:
                anc[j] = anc[p]
            anc[j, j] = True
        mask[base : base + m, t + base : t + base + m] = torch.from_numpy(anc)
        pos[base : base + m] = n + depth[r]
        toks[base : base + m] = tokens[r]
    return toks, pos, mask
