"""The target_data check on hand-built measurements: no target run, so every branch of the finding
is checked in milliseconds (the doctor runs in test_doctor_identity cover the measurement)."""

from __future__ import annotations

from inspector.doctor.checks.target_data import LOW_AGREEMENT, DataFacts, target_data_finding
from inspector.doctor.checks.target_slots import TargetSlots
from inspector.metrics import Counts


def _measured(hits: int, total: int, samples=(0, 1)) -> TargetSlots:
    return TargetSlots("target", 6, tuple(samples), argmax_agree=(hits, total))


def test_no_measurement_no_finding():
    assert target_data_finding(None) is None
    assert target_data_finding(TargetSlots("target", 6, (0,))) is None  # argmax not measured


def test_low_agreement_warns_with_the_fix():
    f = target_data_finding(_measured(1, 10, samples=(3, 5)))
    assert f.kind == "target_data" and f.severity == "warning"
    assert f.summary.startswith("only 1/10 ") and "samples [3, 5]" in f.summary
    assert "regenerate the responses with the target" in f.fix
    assert f.facts == DataFacts(Counts(1, 10), (3, 5))
    assert f.evidence == {
        "target_argmax_tokens": {"hits": 1, "total": 10, "acc": 0.1},
        "samples": [3, 5],
    }


def test_agreement_at_the_floor_is_info():
    # LOW_AGREEMENT is 1/5: a share at the floor is not below it, one token less is.
    assert LOW_AGREEMENT == 1 / 5
    at = target_data_finding(_measured(20, 100))
    assert at.severity == "info" and at.fix == ""
    assert at.summary.startswith("20/100 ") and "are the target's own greedy choice" in at.summary
    assert target_data_finding(_measured(19, 100)).severity == "warning"
    assert target_data_finding(_measured(100, 100)).severity == "info"


def test_no_scored_tokens_counts_as_low():
    # total 0: no share to show agreement, so the finding warns rather than vouching for the data.
    f = target_data_finding(_measured(0, 0))
    assert f.severity == "warning" and f.evidence["target_argmax_tokens"]["acc"] is None
