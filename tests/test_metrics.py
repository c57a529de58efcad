"""Aggregation and the chain (conditional) accuracy that feeds the acceptance-length estimate."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.evaluate import StepPredictions
from inspector.metrics import Counts, StepMetrics, acceptance_length, sum_steps


def _step(k, hit, masked, in_vocab=None):
    n = len(hit)
    z = np.zeros(n, dtype=np.int64)
    return StepPredictions(
        step=k,
        pos=np.arange(n),
        input=z,
        true=z,
        true_draft=z,
        pred_draft=z,
        pred_target=z,
        p_pred=z.astype(float),
        p_true=z.astype(float),
        rank_true=z,
        loss=z.astype(float),
        topk_target=z[:, None],
        topk_p=z[:, None].astype(float),
        masked=np.array(masked, bool),
        in_vocab=np.array(in_vocab if in_vocab is not None else [True] * n, bool),
        hit=np.array(hit, bool),
    )


def test_chain_conditional_accuracy():
    s0 = _step(0, [1, 1, 0, 1, 1], [1, 1, 1, 1, 0])
    s1 = _step(1, [1, 0, 1, 1], [1, 1, 1, 1])
    m0, chain0 = s0.metrics(None)
    m1, _ = s1.metrics(chain0)
    assert (m0.all_tok.hits, m0.all_tok.total) == (3, 4)
    assert (m0.cond.hits, m0.cond.total) == (3, 4)
    # step 1 counts rows whose step 0 hit (rows 0, 1, 3): hits at rows 0 and 3.
    assert (m1.cond.hits, m1.cond.total) == (2, 3)
    assert (m1.all_tok.hits, m1.all_tok.total) == (3, 4)
    assert acceptance_length([m0, m1]) == pytest.approx(1 + 0.75 + 0.75 * 2 / 3)


def test_in_vocab_and_coverage():
    s = _step(0, [1, 0, 0, 1], [1, 1, 1, 1], in_vocab=[1, 1, 0, 1])
    m, _ = s.metrics(None)
    assert (m.in_vocab.hits, m.in_vocab.total) == (2, 3)
    assert (m.coverage.hits, m.coverage.total) == (3, 4)
    assert m.to_dict()["coverage"] == 0.75


def test_formats_and_sums():
    assert Counts(386, 1235).fmt() == "386/1235 31.3%"
    assert Counts().acc is None and Counts().fmt() == "0/0 -"
    a = [StepMetrics(0, Counts(1, 2)), StepMetrics(1, Counts(1, 1))]
    b = [StepMetrics(0, Counts(2, 3))]  # a short sample reaches fewer steps
    total = sum_steps([a, b])
    assert total[0].all_tok == Counts(3, 5) and total[1].all_tok == Counts(1, 1)


def test_acceptance_length_reference_example():
    # The real case's chain c = (0.747, 0.70, 0.68): 1 + 0.747 + 0.523 + 0.356, about 2.63.
    steps = [
        StepMetrics(k, cond=Counts(int(c * 1000), 1000)) for k, c in enumerate((0.747, 0.70, 0.68))
    ]
    assert acceptance_length(steps) == pytest.approx(2.63, abs=0.01)


def _full(step, base):
    c = [Counts(base + i, 10 * (base + i) + 1) for i in range(9)]
    return StepMetrics(step, *c)


def test_step_metrics_sum_every_field():
    a, b = _full(1, 1), _full(1, 20)
    s = a + b
    assert s.step == 1
    for f in ("all_tok", "in_vocab", "coverage", "cond", "verifier_a", "verifier_b"):
        assert getattr(s, f) == getattr(a, f) + getattr(b, f), f
    for f in ("spec_full", "spec_cond", "specforge"):
        assert getattr(s, f) == getattr(a, f) + getattr(b, f), f
    # optional counts: one side missing keeps the other; both missing stays missing
    only_b = StepMetrics(1) + b
    assert only_b.verifier_a == b.verifier_a and only_b.specforge == b.specforge
    only_a = a + StepMetrics(1)
    assert only_a.spec_full == a.spec_full and only_a.verifier_b == a.verifier_b
    none = StepMetrics(1) + StepMetrics(1)
    assert none.verifier_a is None and none.spec_cond is None and not none.has_trainer


def test_step_metrics_json_contract():
    m = StepMetrics(2, Counts(1, 4), Counts(1, 2), Counts(2, 4), Counts(1, 3))
    assert m.to_dict() == {
        "step": 2,
        "all_tok": {"hits": 1, "total": 4, "acc": 0.25},
        "in_vocab": {"hits": 1, "total": 2, "acc": 0.5},
        "coverage": 0.5,
        "coverage_counts": {"hits": 2, "total": 4, "acc": 0.5},
        "cond_acc": 1 / 3,
        "cond": {"hits": 1, "total": 3, "acc": 1 / 3},
    }
    m.verifier_a, m.verifier_b = Counts(3, 4), Counts(2, 4)
    m.spec_full, m.spec_cond, m.specforge = Counts(5, 8), Counts(5, 6), Counts(4, 8)
    d = m.to_dict()
    assert d["verifier_match_speculators"] == {"hits": 3, "total": 4, "acc": 0.75}
    assert d["verifier_match_eagle"] == {"hits": 2, "total": 4, "acc": 0.5}
    assert d["trainer"] == {
        "speculators": {
            "full_acc": {"hits": 5, "total": 8, "acc": 0.625},
            "cond_acc": {"hits": 5, "total": 6, "acc": 5 / 6},
        },
        "specforge": {"acc": {"hits": 4, "total": 8, "acc": 0.5}},
    }
    m.spec_full = m.spec_cond = None  # SpecForge's alone
    assert m.has_trainer and set(m.to_dict()["trainer"]) == {"specforge"}
    m.specforge, m.spec_full, m.spec_cond = None, Counts(1, 2), Counts(1, 1)
    assert set(m.to_dict()["trainer"]) == {"speculators"}
    m.spec_cond = None  # half of speculators' pair: not shown as its metrics
    assert m.has_trainer and m.to_dict()["trainer"] == {}


def test_acceptance_length_stops_at_a_step_without_rows():
    steps = [StepMetrics(0, cond=Counts(1, 2)), StepMetrics(1), StepMetrics(2, cond=Counts(1, 1))]
    assert acceptance_length(steps) == 1.5
    assert acceptance_length([]) == 1.0
    assert sum_steps([]) == []
