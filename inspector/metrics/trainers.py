"""The accuracies the trainers themselves log, reproduced exactly from our per-row predictions.

A user arrives with a number from a training log. Each trainer counts differently, and none of them
counts what serving sees, so we compute theirs *beside* ours, with their row conventions. Positions:
tokens x_0..x_{T-1}, loss mask l_0..l_{T-1}; row j of TTT step k feeds x_{j+1+k} and predicts
x_{j+2+k}; `v(p)` is the verifier's (teacher's) argmax computed from its last hidden state at
position p (its prediction for x_{p+1}).

speculators (`full_acc_k`, `cond_acc_k`; offline v1/v2 training):
- target of row j at step k: the verifier's argmax *within the draft vocabulary* at p = j+1+k (the
  verifier logits are the rows of lm_head kept by t2d);
- rows j = 0..T-2-k, so one row per sample and step more than ours: the last one predicts the
  token after the sample's end (the verifier still has a prediction there);
- *cumulative*: the chain starts as the shifted loss mask (row j: l_{j+1}) and each step ANDs its
  match into it in place; full hits_k = chain rows with l_{j+1+k}; full total_k = rows with
  l_{j+1+k}; cond total_k = chain rows before the step (not masked by l_{j+1+k}); cond hits_k =
  full hits_k.
- speculators trains with Gaussian noise on the hidden states (v2 pipelines): a logged *training*
  accuracy was measured on noisy inputs; validation accuracy was not.

SpecForge (`acc_k`, offline and online):
- target: the teacher's *full-vocab* argmax at p = j+1+k (a draft id maps to a target id through
  d2t; a teacher token outside the draft vocab is a miss);
- per step, teacher forced (no chain); row j counts where l'_{j+k} = 1, with l' the loss mask
  whose last entry is forced to 0: the mask is not shifted, so the row after the last token counts
  and the first response row does not; total = the sum of that mask;
- `simulated_acc_len = sum_k prod_{m<=k} acc_m` (no +1).

P-EAGLE (docs/peagle.md section 4; step k is parallel depth k): both trainers log
`position_{k}_acc` over their COD-sampled slots, of which every row is the expectation:
- speculators: as above, but **not cumulative** (no chain): hits_k = rows whose match holds and
  l_{j+1+k}; `cond` is then the same count;
- SpecForge: as above, but rows whose teacher full-vocab argmax lies outside the draft vocab
  are dropped from the total (peagle/model.py l.168-175), not counted as misses.
- real SpecForge runs apply the teacher's lm_head in bf16; a bf16 teacher can flip near-ties, so
  a bf16 log may differ from our float32 teacher at a handful of rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from inspector.metrics.counts import Counts


def _check(pred_target: Sequence[np.ndarray], t: int) -> None:
    for k, pred in enumerate(pred_target):
        if len(pred) != t - 1 - k:
            raise ValueError(f"step {k}: {len(pred)} rows, expected T-1-k = {t - 1 - k}")


def speculators_counts(
    pred_target: Sequence[np.ndarray],
    verifier_in_vocab: np.ndarray,
    loss_mask: np.ndarray,
    *,
    chained: bool = True,
) -> list[tuple[Counts, Counts]]:
    """(full_acc, cond_acc) counts per step for one sample, as speculators computes them.

    pred_target[k]: predicted target id of rows j = 0..T-2-k of step k (the last row included);
    verifier_in_vocab: [T] the verifier's argmax within the draft vocab, as target ids;
    loss_mask: [T]. chained=False: P-EAGLE's per-depth `position_k_acc` (no chain).
    """
    mask = np.asarray(loss_mask).astype(bool)
    t = mask.size
    _check(pred_target, t)
    chain = mask[1:].copy()  # rows 0..T-2: the chain starts as the shifted loss mask
    out: list[tuple[Counts, Counts]] = []
    for k, pred in enumerate(pred_target):
        n = t - 1 - k
        match = np.asarray(pred) == verifier_in_vocab[1 + k : 1 + k + n]
        counted = mask[1 + k : 1 + k + n]
        if not chained:
            hits = int((match & counted).sum())
            out.append((Counts(hits, int(counted.sum())), Counts(hits, int(counted.sum()))))
            continue
        cond_total = int(chain[:n].sum())
        chain[:n] &= match
        hits = int((chain[:n] & counted).sum())
        out.append((Counts(hits, int(counted.sum())), Counts(hits, cond_total)))
    return out


def specforge_counts(
    pred_target: Sequence[np.ndarray],
    verifier_full: np.ndarray,
    loss_mask: np.ndarray,
    *,
    teacher_in_vocab: np.ndarray | None = None,
) -> list[Counts]:
    """acc counts per step for one sample, as SpecForge computes them (see the module docstring).

    pred_target[k]: as for `speculators_counts`; verifier_full: [T] the teacher's full-vocab argmax.
    teacher_in_vocab: [T] whether that argmax is in the draft vocab; given (P-EAGLE), the rows
    where it is not leave the total.
    """
    mask = np.asarray(loss_mask).astype(bool).copy()
    t = mask.size
    _check(pred_target, t)
    if t:
        mask[-1] = False
    out: list[Counts] = []
    for k, pred in enumerate(pred_target):
        n = t - 1 - k
        counted = mask[k : k + n]
        if teacher_in_vocab is not None:
            counted = counted & teacher_in_vocab[1 + k : 1 + k + n]
        hit = np.asarray(pred) == verifier_full[1 + k : 1 + k + n]
        out.append(Counts(int((hit & counted).sum()), int(counted.sum())))
    return out


def simulated_acc_len(accs: Sequence[float | None]) -> float | None:
    """SpecForge's `simulated_acc_len`: sum_k prod_{m<=k} acc_m (no +1); None without steps."""
    if not accs or any(a is None for a in accs):
        return None
    total, chain = 0.0, 1.0
    for a in accs:
        chain *= float(a)  # type: ignore[arg-type]
        total += chain
    return total
