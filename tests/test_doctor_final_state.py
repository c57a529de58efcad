"""The head-only verifier check (`final_state`): with the target too big to run, its final norm
and lm_head still tell whether the slot named final is the target's final state."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_doctor_identity import _prose, _samples

from inspector.doctor import DiagnoseSettings, diagnose
from inspector.doctor.checks import target_slots as target_slots_module
from inspector.doctor.checks.final_state import (
    FinalState,
    final_state_finding,
    measure_final_state,
    named_final,
)
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft
from inspector.formats.target_tensors import read_target_head
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
    return diagnose(ev, DiagnoseSettings(n, target=target))


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
    assert diagnose(ev, DiagnoseSettings(1, max_tokens=64)).finding("final_state") is None


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


def test_to_dict_and_runner_up():
    fs = _fs([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]], 2)
    # slot 2 over slot 1 on the same positions: 2 positions only slot 2 hits, none only slot 1
    assert fs.runner_up_z() == pytest.approx(2 / np.sqrt(2))
    assert fs.to_dict() == {
        "slots": [
            {"hits": 1, "total": 4, "acc": 0.25},
            {"hits": 2, "total": 4, "acc": 0.5},
            {"hits": 4, "total": 4, "acc": 1.0},
        ],
        "named_final": 2,
        "named_by": "HF 6",
        "best": 2,
        "rivals": [],
        "z_over_runner_up": 1.41,
        "samples": [0],
    }
    unnamed = _fs([[1, 0], [0, 0]], None)
    assert unnamed.runner_up_z() is None and unnamed.rivals() == []
    assert unnamed.to_dict()["z_over_runner_up"] is None
    assert _fs([[1, 1]], 0).runner_up_z() is None  # no other slot


def test_finding_words():
    infos = [SlotInfo("L2", 2), SlotInfo("L4", 4), SlotInfo("L6", 6)]
    tied = final_state_finding(_fs([[0, 0], [1, 0], [1, 0]], 2), infos)
    assert tied.kind == "final_state" and tied.wiring is None
    assert tied.summary.startswith(
        "slot 2, named the final state (HF 6), predicts the target's next tokens no better "
        "than slot 1 (L4) 1/2 50.0%: slot 2 (L6) 1/2 50.0%. It is not the target's final state"
    )
    assert tied.summary.endswith(
        "(through the target's norm and head, the slots predict the next token at: slot 0 (L2) "
        "0/2 0.0%, slot 1 (L4) 1/2 50.0%, slot 2 (L6) 1/2 50.0%)"
    )
    assert tied.fix.startswith("recapture the last slot from the input of the target's final")
    ok = final_state_finding(_fs([[0] * 20, [0] * 20, [1] * 20], 2), infos)
    assert ok.summary.endswith(
        ": slot 2 (HF 6) predicts the most, as the target's final state should"
    )
    assert ok.fix is None and ok.evidence["best"] == 2


def test_measure_final_state_against_a_hand_computed_head(demo):
    # The demo target's Llama head: w * x / rms(x), then lm_head; the next token is x_{j+1}.
    draft = load_draft(demo.draft)
    head = read_target_head(demo.target)
    ev = Evaluator(draft, SampleSet(demo.train_samples), target_head=head)
    infos = ev.slot_info
    fs = measure_final_state(ev, infos, [0, 1, 2], 6)
    assert fs.samples == [0, 1] and fs.named == 3 and fs.why == "HF 6"
    want: list[list[bool]] = [[] for _ in infos]
    budget = 256
    for i in (0, 1):
        s = ev.samples[i]
        j = torch.arange(s.length - 1)
        j = j[s.loss_mask[j + 1].bool()][:budget]
        budget -= j.numel()
        for k in range(len(infos)):
            y = s.slots[k][j].float()
            y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + head.rms_norm_eps)
            pred = ((head.norm_weight.float() * y) @ head.lm_head.float().T).argmax(-1)
            want[k] += (pred == s.input_ids[j + 1]).tolist()
    assert [h.tolist() for h in fs.hits] == want
    # A post-norm slot goes through the head without the norm: the normed slot 3 stored as
    # post-norm predicts what its raw logits say.
    post = [*infos[:3], SlotInfo("final(post-norm)", None, post_norm=True)]
    fp = measure_final_state(ev, post, [0, 1], 6)
    assert fp.named == 3 and fp.why == "post-norm" and fp.samples == [0, 1]
    s = ev.samples[0]
    j = torch.arange(s.length - 1)
    j = j[s.loss_mask[j + 1].bool()]
    raw = (s.slots[3][j].float() @ head.lm_head.float().T).argmax(-1) == s.input_ids[j + 1]
    assert fp.hits[3][: j.numel()].tolist() == raw.tolist()


def test_measure_final_state_caps_the_rows(demo, monkeypatch):
    from inspector.doctor.checks import final_state

    monkeypatch.setattr(final_state, "MAX_ROWS", 50)
    ev = Evaluator(
        load_draft(demo.draft),
        SampleSet(demo.train_samples),
        target_head=read_target_head(demo.target),
    )
    fs = measure_final_state(ev, ev.slot_info, [0, 1, 2], 6)
    assert fs.samples == [0] and all(h.size == 50 for h in fs.hits)
    none = Evaluator(load_draft(demo.draft), SampleSet(demo.train_samples))
    assert measure_final_state(none, none.slot_info, [0], 6) is None


def test_runner_up_is_the_next_best_slot_and_two_slots_suffice():
    # Two slots: the runner-up is the other one.
    assert _fs([[1, 1, 0], [1, 1, 1]], 1).runner_up_z() == pytest.approx(1.0)
    # The next best is slot 2 (3 hits), not the first other slot (1 hit): z over slot 2 is 0.
    fs = _fs([[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]], 1)
    assert fs.runner_up_z() == 0.0
    fs = _fs([[0, 0, 0, 1], [1, 1, 1, 0], [1, 0, 0, 0]], 1)
    assert fs.runner_up_z() == pytest.approx(2 / np.sqrt(4))


def test_every_branch_is_a_final_state_finding_with_its_evidence():
    infos = [SlotInfo("L2", 2), SlotInfo("L4", 4), SlotInfo("L6", 6)]
    cases = [
        _fs([[0, 0], [1, 1], [1, 0]], None),  # unnamed
        _fs([[0] * 20, [0] * 20, [1] * 20], 2),  # named and best
        _fs([[1, 0], [1, 0], [1, 0]], 2),  # tied with two rivals
    ]
    for fs in cases:
        f = final_state_finding(fs, infos)
        assert f.kind == "final_state" and f.evidence == fs.to_dict()
    tied = final_state_finding(cases[2], infos)
    assert "no better than slot 0 (L2) 1/2 50.0%, slot 1 (L4) 1/2 50.0%: " in tied.summary
    assert (
        "It is not the target's final state (captured from another layer, or a copy of an "
        "earlier one), so every score on it is of another state than the file says" in tied.summary
    )
    assert tied.fix == (
        "recapture the last slot from the input of the target's final norm (eagle-inspect "
        "capture does), or pass --target on a host that can load the whole target to see which "
        "layer each slot is"
    )


def test_a_runner_up_z_of_exactly_z_clear_is_clear():
    from inspector.doctor.stats import Z_CLEAR

    infos = [SlotInfo("L4", 4), SlotInfo("L6", 6)]
    # 9 positions only slot 1 hits, none only slot 0: z = 9 / sqrt(9) = 3 = Z_CLEAR.
    fs = _fs([[0] * 9 + [1] * 5, [1] * 14], 1)
    assert fs.runner_up_z() == Z_CLEAR
    assert "only" not in final_state_finding(fs, infos).summary
    weaker = _fs([[0] * 8 + [1] * 6, [1] * 14], 1)
    assert "paired z of only 2.8" in final_state_finding(weaker, infos).summary
