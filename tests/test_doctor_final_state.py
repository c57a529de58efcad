"""The head-only verifier check (`final_state`): with the target too big to run, its final norm
and lm_head still tell whether the slot named final is the target's final state."""

from __future__ import annotations

import numpy as np
import pytest
from test_doctor_identity import _prose, _samples

from inspector.doctor import diagnose
from inspector.doctor import target_slots as target_slots_module
from inspector.doctor.final_state import FinalState, final_state_finding, named_final
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft
from inspector.formats.target import read_target_head
from inspector.sample import SlotInfo


@pytest.fixture
def too_big(monkeypatch):
    """Every target is too big for this host: only its head is read."""
    monkeypatch.setattr(
        target_slots_module, "too_big", lambda folder, device: "its weights take 140 GiB"
    )


def _run(demo, samples, target=None, n=2):
    draft = load_draft(demo.draft, strict=False)
    head = read_target_head(demo.target)
    ev = Evaluator(draft, SampleSet(samples), target_head=head)
    return diagnose(ev, n, target=target)


def test_the_named_final_slot_predicts_most(demo, too_big):
    report = _run(demo, demo.train_samples, target=demo.target)
    assert report.finding("slot_identity").evidence["target"]["skipped"]
    f = report.finding("final_state")
    assert f.severity == "info", f.summary
    ev = f.evidence
    assert ev["named_final"] == 3 and ev["best"] == 3 and ev["rivals"] == []
    hits = [s["hits"] / s["total"] for s in ev["slots"]]
    # Sampled at T=0.7: 45% of the tokens are the final state's argmax, 31% L4's, 3% embed's.
    assert hits[3] > max(hits[:3]) + 0.1
    assert ev["z_over_runner_up"] >= 3


def test_a_last_slot_copied_from_an_earlier_layer(demo, tmp_path, too_big):
    # TorchSpec#87's class with a target too big to run: the "last hidden state" is HF 4.
    samples = _samples(
        demo, tmp_path / "early", _prose, slots=lambda hs: [hs[0], hs[1], hs[2], hs[2].clone()]
    )
    report = _run(demo, samples, target=demo.target)
    f = report.finding("final_state")
    assert f.severity == "error", f.summary
    assert f.evidence["rivals"] == [2]
    assert "slot 3, named the final state (HF 6)" in f.summary
    assert "recapture the last slot" in f.fix


def test_no_head_no_finding(demo):
    ev = Evaluator(load_draft(demo.draft), SampleSet(demo.train_samples))
    assert diagnose(ev, 1, max_tokens=64).finding("final_state") is None


def test_the_whole_target_makes_the_head_check_unneeded(demo):
    # With the target run, slot_identity already matched every slot.
    report = _run(demo, demo.train_samples, target=demo.target, n=1)
    assert report.finding("final_state") is None


def test_named_final():
    a = [SlotInfo("embed", 0), SlotInfo("L2", 2), SlotInfo("L6", 6, verifier=True)]
    assert named_final(a, 6) == (2, "HF 6")
    assert named_final(a, None) == (2, "verifier")
    assert named_final(a, 8) == (2, "verifier")
    b = [SlotInfo("L1", 1), SlotInfo("final(post-norm)", None, post_norm=True)]
    assert named_final(b, 6) == (1, "post-norm")
    assert named_final([SlotInfo("L1", 1), SlotInfo("L2", 2)], 6) == (None, "")


def _fs(hits: list[list[int]], named: int | None) -> FinalState:
    return FinalState([np.array(h, bool) for h in hits], named, "HF 6", [0])


def test_rivals_and_severity():
    infos = [SlotInfo("L2", 2), SlotInfo("L4", 4), SlotInfo("L6", 6)]
    ok = _fs([[0] * 20, [1] * 5 + [0] * 15, [1] * 20], 2)
    assert ok.rivals() == [] and ok.best == 2
    assert final_state_finding(ok, infos).severity == "info"
    tied = _fs([[0] * 20, [1] * 10 + [0] * 10, [1] * 10 + [0] * 10], 2)
    assert tied.rivals() == [1]
    assert final_state_finding(tied, infos).severity == "error"
    beaten = _fs([[1] * 12 + [0] * 8, [0] * 20, [1] * 11 + [0] * 9], 2)
    assert beaten.rivals() == [0] and beaten.best == 0
    # Named best by one position: not an error, but said to be weak.
    close = _fs([[0] * 20, [1] * 10 + [0] * 10, [1] * 11 + [0] * 9], 2)
    f = final_state_finding(close, infos)
    assert f.severity == "info" and "only" in f.summary
    unnamed = final_state_finding(_fs([[0, 0], [1, 1], [1, 0]], None), infos)
    assert unnamed.severity == "info" and "slot 1 behaves most like it" in unnamed.summary
    assert final_state_finding(None, infos) is None
