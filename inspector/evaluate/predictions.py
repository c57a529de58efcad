"""Per-position predictions of one sample under one wiring, and the counts made from them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inspector.metrics import (
    Counts,
    StepMetrics,
    acceptance_length,
    specforge_counts,
    speculators_counts,
)
from inspector.metrics.rounds import AcceptStats, chain_accepts, generation_runs, walk
from inspector.wiring import Wiring

TOP_K = 10


@dataclass
class StepPredictions:
    """Per-position results of one TTT step on one sample (numpy arrays, one entry per row j).

    Row j of step k feeds token x_{j+1+k} and predicts x_{j+2+k}; token ids are target ids unless
    the name says draft. OOV true tokens have true_draft == -1, p_true == 0, rank_true == -1 and
    loss == nan. The arrays cover the rows with a true token (j <= T-3-k); `tail_pred_target` is
    the prediction of the one row more that the trainers count (j = T-2-k, which predicts the
    token after the sample's end).
    """

    step: int
    pos: np.ndarray
    input: np.ndarray
    true: np.ndarray
    true_draft: np.ndarray
    pred_draft: np.ndarray
    pred_target: np.ndarray
    p_pred: np.ndarray
    p_true: np.ndarray
    rank_true: np.ndarray
    loss: np.ndarray
    topk_target: np.ndarray  # [P, k]
    topk_p: np.ndarray  # [P, k]
    masked: np.ndarray
    in_vocab: np.ndarray
    hit: np.ndarray
    verifier_target: np.ndarray | None = None  # verifier full-vocab argmax (target id)
    verifier_in_vocab_target: np.ndarray | None = None  # verifier argmax within the draft vocab
    tail_pred_target: int | None = None

    def __len__(self) -> int:
        return int(self.pos.size)

    def metrics(self, prev_chain: np.ndarray | None) -> tuple[StepMetrics, np.ndarray]:
        """Counts for this step; prev_chain[j] says steps < k all hit at row j (None at step 0)."""
        m = self.masked
        chain_in = m if prev_chain is None else (m & prev_chain[: len(self)])
        chain = chain_in & self.hit
        sm = StepMetrics(
            self.step,
            all_tok=Counts(int((self.hit & m).sum()), int(m.sum())),
            in_vocab=Counts(
                int((self.hit & m & self.in_vocab).sum()), int((m & self.in_vocab).sum())
            ),
            coverage=Counts(int((m & self.in_vocab).sum()), int(m.sum())),
            cond=Counts(int(chain.sum()), int(chain_in.sum())),
        )
        if self.verifier_target is not None and self.verifier_in_vocab_target is not None:
            a = self.pred_target == self.verifier_in_vocab_target
            b = self.pred_target == self.verifier_target  # only possible when in vocab
            sm.verifier_a = Counts(int((a & m).sum()), int(m.sum()))
            sm.verifier_b = Counts(int((b & m).sum()), int(m.sum()))
        return sm, chain

    def position_dict(self, r: int, sample: int) -> dict:
        """The JSON contract for one position (see `eagle-inspect eval --positions`); NaN/Inf stay
        floats here (the writer turns them into null and names the sample)."""
        in_vocab = bool(self.in_vocab[r])
        return {
            "sample": sample,
            "step": self.step,
            "pos": int(self.pos[r]),
            "input": int(self.input[r]),
            "true": int(self.true[r]),
            "true_draft": int(self.true_draft[r]) if in_vocab else None,
            "pred_draft": int(self.pred_draft[r]),
            "pred_target": int(self.pred_target[r]),
            "p_pred": float(self.p_pred[r]),
            "p_true": float(self.p_true[r]),
            "rank_true": int(self.rank_true[r]) if in_vocab else None,
            "loss": float(self.loss[r]) if in_vocab else None,
            "masked": bool(self.masked[r]),
            "in_vocab": in_vocab,
            "hit": bool(self.hit[r]),
            "topk": [
                [int(t), float(p)] for t, p in zip(self.topk_target[r], self.topk_p[r], strict=True)
            ],
        }


@dataclass
class SamplePredictions:
    index: int
    path: str
    wiring: Wiring
    steps: list[StepPredictions]
    metrics: list[StepMetrics]
    # The rounds a greedy chain of len(steps) drafts takes through the sample's generations
    # (the serving replay; a chain needs nothing but the TTT hits).
    accept: AcceptStats | None = None

    @property
    def acceptance_length(self) -> float | None:
        """1 + accepted / rounds of a chain engine (the replayed walk); None without rounds."""
        return self.accept.accept_length if self.accept is not None else None

    @property
    def acceptance_length_estimate(self) -> float:
        """The closed form 1 + sum_k prod_m<=k cond_m over every row (not the engines' walk)."""
        return acceptance_length(self.metrics)


def chain_accept_stats(
    steps: list[StepPredictions], loss_mask: np.ndarray, depth: int
) -> AcceptStats:
    """The replayed chain of `depth` steps through the sample's generation runs, counted as the
    engines count (1 + accepted / rounds). It reads the sample's own tokens only: a last round
    whose drafts reach past them is a lower bound here (`AcceptStats.is_bound`); `accept`
    drafts it over the continuation a capture writes past the stop."""
    a = chain_accepts([sp.hit for sp in steps], int(loss_mask.size))
    return AcceptStats.of(walk(a, generation_runs(loss_mask), depth=depth), depth)


def step_metrics(
    steps: list[StepPredictions],
    loss_mask: np.ndarray,
    verifier: tuple[np.ndarray, np.ndarray] | None,
    *,
    parallel: bool = False,
) -> list[StepMetrics]:
    """Our counts per step (the chain feeding `cond`), plus the trainers' own counts when the
    verifier's argmax is known (full-vocab, within-draft-vocab, one per position); `parallel`:
    a P-EAGLE draft, whose trainers count each depth on its own (inspector.metrics.trainers)."""
    out: list[StepMetrics] = []
    chain: np.ndarray | None = None
    for sp in steps:
        sm, chain = sp.metrics(chain)
        out.append(sm)
    if verifier is None or not steps or any(sp.tail_pred_target is None for sp in steps):
        return out
    preds = [np.append(sp.pred_target, sp.tail_pred_target) for sp in steps]
    v_full, v_in = verifier
    for sm, (full, cond), sf in zip(
        out,
        speculators_counts(preds, v_in, loss_mask, chained=not parallel),
        # the full-vocab argmax is in the draft vocab exactly where it equals the in-vocab one
        specforge_counts(
            preds, v_full, loss_mask, teacher_in_vocab=(v_full == v_in) if parallel else None
        ),
        strict=True,
    ):
        sm.spec_full, sm.spec_cond, sm.specforge = full, cond, sf
    return out
