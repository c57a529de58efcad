"""The one per-position scoring the evaluator and the doctor share, against its definition."""

from __future__ import annotations

import torch

from inspector.draft import VocabMap
from inspector.evaluate.scoring import Vocab, score_logits


def test_labels_place_the_true_tokens_in_the_draft_vocab():
    # draft ids 0, 1, 2 are target ids 1, 3, 4 (d2t offsets)
    vm = VocabMap(d2t=torch.tensor([1, 2, 2]), t2d=torch.tensor([0, 1, 0, 1, 1], dtype=torch.bool))
    vocab = Vocab.of(vm, "cpu")
    assert vocab.to_target.tolist() == [1, 3, 4]
    lab = vocab.labels(torch.tensor([3, 0, 4, 2, 1]))
    assert lab.draft.tolist() == [1, -1, 2, -1, 0]
    assert lab.in_vocab.tolist() == [True, False, True, False, True]  # draft id 0 is in it
    assert lab.safe.tolist() == [1, 0, 2, 0, 0]
    kept = lab.keep(lab.in_vocab)
    assert kept.true.tolist() == [3, 4, 1] and kept.draft.tolist() == [1, 2, 0]
    assert kept.in_vocab.tolist() == [True, True, True]


def test_score_logits_is_the_definition():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
    true = torch.tensor([0, 3, 6, 2, 5])
    sc = score_logits(logits, true, 3, rank=True)
    logp = logits.log_softmax(-1)
    for b in range(2):
        for r in range(5):
            order = logp[b, r].argsort(descending=True)
            assert sc.top_ids[b, r].tolist() == order[:3].tolist()
            torch.testing.assert_close(sc.top_logp[b, r], logp[b, r, order[:3]])
            torch.testing.assert_close(sc.true_logp[b, r], logp[b, r, true[r]])
            assert int(sc.rank[b, r]) == int((order == true[r]).nonzero()) + 1
    assert sc.pred.tolist() == logits.argmax(-1).tolist()
    assert score_logits(logits, true, 99, rank=False).rank is None
    assert score_logits(logits, true, 99, rank=False).top_ids.shape == (2, 5, 7)
