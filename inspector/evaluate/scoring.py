"""The per-position scoring both the evaluator and the doctor's wiring search reduce logits with:
the true token in the draft's vocabulary (or not), the draft's prediction as a target id, the
true token's log-probability and rank. One definition, so that eval's hits and the doctor's
ranking of the same wiring can never count differently."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inspector.draft import VocabMap


@dataclass(frozen=True)
class Labels:
    """The true target ids of some rows and where they sit in the draft vocabulary."""

    true: torch.Tensor  # target ids [R]
    draft: torch.Tensor  # their draft ids, -1 outside the draft vocabulary [R]
    in_vocab: torch.Tensor  # bool [R]

    @property
    def safe(self) -> torch.Tensor:
        """Draft ids with -1 replaced by 0: gather-able (rows outside the vocab are masked later)."""
        return self.draft.clamp(min=0)

    def keep(self, rows: torch.Tensor) -> Labels:
        return Labels(self.true[rows], self.draft[rows], self.in_vocab[rows])


@dataclass(frozen=True)
class Vocab:
    """The draft <-> target maps on one device, built once per evaluator or scorer."""

    to_draft: torch.Tensor  # [V]: draft id of each target id, -1 outside
    to_target: torch.Tensor  # [D]: target id of each draft id

    @classmethod
    def of(cls, vocab: VocabMap, device: torch.device | str) -> Vocab:
        return cls(vocab.target_to_draft.to(device), vocab.draft_to_target.to(device))

    def labels(self, true: torch.Tensor) -> Labels:
        draft = self.to_draft[true]
        return Labels(true, draft, draft >= 0)


@dataclass(frozen=True)
class RowScores:
    """Logits [.., R, D] reduced per row: the top-k draft ids and log-probs (the first is the
    prediction), the true token's log-prob (meaningless outside the vocab) and rank (1 = top)."""

    top_ids: torch.Tensor  # [.., R, k]
    top_logp: torch.Tensor  # [.., R, k]
    true_logp: torch.Tensor  # [.., R]
    rank: torch.Tensor | None  # [.., R], None unless asked for

    @property
    def pred(self) -> torch.Tensor:
        return self.top_ids[..., 0]


def score_logits(logits: torch.Tensor, safe_true: torch.Tensor, k: int, rank: bool) -> RowScores:
    """Few passes over the [.., R, D] logits: logsumexp, top-k (its first entry is the argmax),
    one gather for the true token, one comparison for its rank. safe_true: draft ids [R] or
    [.., R] (`Labels.safe`)."""
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    top_logit, top_i = logits.topk(min(k, logits.shape[-1]), dim=-1)
    idx = safe_true.expand(logits.shape[:-1])[..., None]
    true_logit = logits.gather(-1, idx)
    ranks = (logits > true_logit).sum(-1) + 1 if rank else None
    return RowScores(top_i, top_logit - lse, (true_logit - lse)[..., 0], ranks)
