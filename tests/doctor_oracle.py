"""The naive wiring search: the tests' oracle for `inspector.doctor.search_wirings` and the
baseline of bench/doctor_speed.py.

A full forward per wiring and sample, fc included, full-vocab logits for every row: none of the
search's shortcuts (cached projections, batching, scored rows only, pruning).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from inspector.evaluate import Evaluator
from inspector.metrics import Counts
from inspector.model import fc_input, fc_project, forward_steps


@torch.inference_mode()
def naive_search(
    ev: Evaluator, samples: Sequence[int], candidates: Sequence[tuple[int, ...]]
) -> list[tuple[tuple[int, ...], Counts, float]]:
    """A full forward per wiring and sample, fc included, full-vocab logits for every row.

    Sample-major, so each sample is read once. Returns (wiring, all_tok counts, mean log p(true))
    ranked like `WiringSearch.ranked`.
    """
    draft = ev.draft
    dev = ev.device
    d2t_abs = draft.vocab.draft_to_target.to(dev)
    t2d_map = draft.vocab.target_to_draft.to(dev)
    cands = [tuple(w) for w in candidates]
    hits = dict.fromkeys(cands, 0)
    total = dict.fromkeys(cands, 0)
    lp_sum = dict.fromkeys(cands, 0.0)
    lp_n = dict.fromkeys(cands, 0)
    for i in samples:
        sample = ev.samples[i]
        t = sample.length
        ids = sample.input_ids.to(dev)
        mask = sample.loss_mask.to(dev).bool()
        slots = [s.to(dev, draft.dtype) for s in sample.slots]
        rows = torch.arange(t - 2, device=dev)
        rows = rows[mask[rows + 1]]
        true = ids[rows + 2]
        td = t2d_map[true]
        ok = td >= 0
        for w in cands:
            h = fc_project(draft, fc_input(draft, [slots[s] for s in w]))[: t - 1]
            logits = forward_steps(draft, h, ids[1:], steps=1, position_offset=ev.position_offset)[
                0
            ]
            lg = logits[rows]
            hits[w] += int((d2t_abs[lg.argmax(-1)] == true).sum())
            total[w] += int(rows.numel())
            lp = torch.log_softmax(lg.float(), -1).gather(-1, td.clamp(min=0)[:, None])[:, 0]
            lp_sum[w] += float(lp[ok].double().sum())
            lp_n[w] += int(ok.sum())
    results = [
        (w, Counts(hits[w], total[w]), lp_sum[w] / lp_n[w] if lp_n[w] else -math.inf) for w in cands
    ]
    results.sort(key=lambda r: (r[1].hits, r[2]), reverse=True)
    return results
