"""Unit tests of the doctor's pure checks, without a forward pass: the stored vocab map analysis
and the layer-id conventions (fast: the mutation-testing selection for vocab.py and layer_ids.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from inspector.doctor.checks.layer_ids import (
    HF,
    LAYER_OUTPUT,
    SGLANG,
    IdSource,
    LayerIdFacts,
    configured_hf_ids,
    draft_source,
    hf_of,
    layer_id_facts,
    other_readings,
    slots_source,
)
from inspector.doctor.checks.vocab import VocabProblem, analyse_vocab
from inspector.doctor.report import VocabRepair
from inspector.draft import DraftConfig, RopeConfig
from inspector.sample import SlotInfo

V, D = 12, 4
CHOSEN = torch.tensor([1, 4, 6, 9])  # target ids of the draft vocab, ascending


def _t2d(ids) -> torch.Tensor:
    t = torch.zeros(V, dtype=torch.bool)
    t[torch.as_tensor(ids)] = True
    return t


OFFSETS = CHOSEN - torch.arange(D)


def _codes(a) -> list[tuple[str, str, int, int]]:
    return [(p.code, p.severity, p.count, p.of) for p in a.problems]


# --- vocab map -------------------------------------------------------------------------------------
def test_consistent_offsets():
    a = analyse_vocab(OFFSETS, _t2d(CHOSEN), D, V)
    assert (a.d2t, a.problems, a.fixable, a.repair) == ("offsets", [], False, None)
    assert a.first_entries == OFFSETS.tolist() and a.t2d_count == D
    assert a.out_of_range_as_offsets is None
    assert analyse_vocab(OFFSETS, None, D, V).problems == []  # t2d is optional


def test_no_d2t():
    assert analyse_vocab(None, None, V, V).problems == []
    assert _codes(analyse_vocab(None, None, D, V)) == [("no_d2t", "error", D, V)]
    a = analyse_vocab(None, _t2d(CHOSEN), D, V)
    assert _codes(a) == [("t2d_without_d2t", "error", 0, 0)] and a.d2t == "absent"


def test_d2t_of_the_wrong_size():
    a = analyse_vocab(OFFSETS[:3], _t2d(CHOSEN), D, V)
    assert _codes(a) == [("d2t_size", "error", 3, D)] and a.first_entries is None


def test_absolute_ids():
    # Absolute ids equal to nonzero(t2d), in range as offsets too: told apart by t2d.
    a = analyse_vocab(CHOSEN, _t2d(CHOSEN), D, V)
    assert a.d2t == "absolute" and a.repair == VocabRepair.OFFSETS
    assert _codes(a) == [("absolute_d2t", "error", 1, D)]  # 9 + 3 = 12 leaves [0, 12)
    assert a.out_of_range_as_offsets == 1
    inside = torch.tensor([0, 1, 2, 3])  # as offsets still in range: the wrong tokens
    a = analyse_vocab(inside, _t2d(inside), D, V)
    assert _codes(a) == [("absolute_d2t_in_range", "error", 0, D)]
    # Without t2d: out of range as offsets, valid as distinct ids.
    far = torch.tensor([2, 5, 10, 11])
    a = analyse_vocab(far, None, D, V)
    assert a.d2t == "absolute" and _codes(a) == [("absolute_d2t", "error", 2, D)]
    assert a.fixable and a.t2d_count is None


def test_absolute_ids_need_a_valid_id_set():
    dup = torch.tensor([2, 5, 11, 11])  # out of range as offsets, not distinct ids
    a = analyse_vocab(dup, None, D, V)
    assert a.d2t == "offsets" and _codes(a) == [("out_of_range", "error", 2, D)]
    assert not a.fixable
    one = torch.tensor([5])  # a single id equal to nonzero(t2d) stays offsets
    assert analyse_vocab(one, _t2d([5]), 1, V).d2t == "offsets"
    negative = torch.tensor([-1, 4, 5, 6])
    assert _codes(analyse_vocab(negative, None, D, V)) == [("out_of_range", "error", 1, D)]


def test_duplicates_and_t2d_faults():
    dup = torch.tensor([1, 0, 4, 3])  # targets 1, 1, 6, 6
    a = analyse_vocab(dup, _t2d([1, 6, 7, 8]), D, V)
    assert _codes(a)[0] == ("duplicates", "error", 2, D)
    assert _codes(a)[1][0] == "t2d_disagrees" and not a.fixable  # duplicates: not repairable
    a = analyse_vocab(OFFSETS, _t2d([1, 4, 6]), D, V)
    assert _codes(a) == [("t2d_count", "error", 3, D)] and a.repair == VocabRepair.T2D_FROM_D2T
    a = analyse_vocab(OFFSETS, _t2d([1, 4, 6, 10]), D, V)
    assert _codes(a) == [("t2d_disagrees", "error", 1, D)] and a.fixable
    a = analyse_vocab(OFFSETS, torch.ones(V + 1, dtype=torch.bool), D, V)
    assert _codes(a) == [("t2d_size", "error", V + 1, V)] and a.t2d_count is None
    a = analyse_vocab(dup, _t2d([1, 6, 8]), D, V)  # a count fault with duplicates
    assert ("t2d_count", "error", 3, D) in _codes(a) and not a.fixable


def test_unsorted_d2t_is_a_warning():
    order = torch.tensor([1, 0, 2, 3])
    a = analyse_vocab(CHOSEN[order] - torch.arange(D), _t2d(CHOSEN), D, V)
    assert _codes(a) == [("unsorted", "warning", 0, 0)] and not a.fixable


def test_absolute_with_a_bad_t2d():
    # Absolute ids whose t2d is off too: repaired from d2t, unless ids repeat.
    a = analyse_vocab(torch.tensor([2, 5, 10, 11]), _t2d([2, 5, 10]), D, V)
    assert a.repair == VocabRepair.OFFSETS and ("t2d_count", "error", 3, D) in _codes(a)
    a = analyse_vocab(torch.tensor([2, 5, 10, 10]), _t2d([2, 5, 10]), D, V)
    assert a.d2t == "offsets"  # repeated ids are not a valid absolute map


def test_vocab_problem_to_dict():
    p = VocabProblem("t2d_count", "error", 3, 4)
    assert p.to_dict() == {"problem": "t2d_count", "severity": "error", "count": 3, "of": 4}


# --- layer-id conventions --------------------------------------------------------------------------
def _cfg(ids, convention) -> DraftConfig:
    return DraftConfig(
        hidden_size=64,
        target_hidden_size=64,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=128,
        rms_norm_eps=1e-5,
        rope=RopeConfig(theta=10000.0),
        vocab_size=V,
        draft_vocab_size=D,
        aux_layer_ids=ids,
        aux_layer_convention=convention,
    )


def _slots(hf) -> list[SlotInfo]:
    return [SlotInfo("s" if k is None else f"L{k}", k) for k in hf]


def _data_config(folder: Path, ids, convention=None, nested=True) -> Path:
    hs: dict = {"layer_ids": ids}
    if convention is not None:
        hs["index_convention"] = convention
    path = folder / "data_config.json"
    path.write_text(json.dumps({"hidden_states": hs} if nested else hs))
    return path


def test_id_arithmetic():
    assert hf_of([0, 2, 4], HF) == (0, 2, 4) and hf_of([0, 2, 4], LAYER_OUTPUT) == (1, 3, 5)
    assert configured_hf_ids(None, HF) == [] and configured_hf_ids([], SGLANG) == []
    assert configured_hf_ids([0, 2, 4], "hf") == [[0, 2, 4]]
    assert configured_hf_ids([1, 29, 57], "sglang") == [[2, 30, 58]]
    assert configured_hf_ids([-1, 2, 30], "sglang") == [[0, 3, 31], [-1, 2, 30]]


def test_draft_source():
    assert draft_source(_cfg(None, None)) is None and draft_source(_cfg((), HF)) is None
    s = draft_source(_cfg((0, 2, 4), "hf"))
    assert s == IdSource(
        "config.json eagle_aux_hidden_state_layer_ids", (0, 2, 4), HF, False, ((0, 2, 4),)
    )
    s = draft_source(_cfg((-1, 1, 3), "sglang"))
    assert s.where == "config.json eagle_config.eagle_aux_hidden_state_layer_ids"
    assert s.hf == ((0, 2, 4), (-1, 1, 3))
    assert draft_source(_cfg((0, 2, 4), None)).convention == HF
    assert s.to_dict() == {
        "where": s.where,
        "ids": [-1, 1, 3],
        "convention": "sglang",
        "stated": False,
        "hf_indices": [[0, 2, 4], [-1, 1, 3]],
    }


def test_slots_source(tmp_path):
    infos = _slots([1, 3, 5, 7])
    s = slots_source(infos, [0, 2, 4, 6], None)
    assert s == IdSource("--slot-layers", (0, 2, 4, 6), HF, True, ((0, 2, 4, 6),))
    assert slots_source(infos, None, None) is None
    path = _data_config(tmp_path, [0, 2, 4, 6])
    s = slots_source(infos, None, path)
    assert s == IdSource(
        "data_config.json hidden_states.layer_ids",
        (0, 2, 4, 6),
        LAYER_OUTPUT,
        False,
        ((1, 3, 5, 7),),
    )
    s = slots_source(_slots([0, 2, 4, 6]), None, _data_config(tmp_path, [0, 2, 4, 6], "hf"))
    assert (s.convention, s.stated, s.hf) == (HF, True, ((0, 2, 4, 6),))
    s = slots_source(infos, None, _data_config(tmp_path, [0, 2], "speculators", nested=False))
    assert (s.convention, s.stated, s.ids) == (LAYER_OUTPUT, True, (0, 2))
    (tmp_path / "bad.json").write_text("{")
    assert slots_source(infos, None, tmp_path / "bad.json") is None
    for ids in ([0, "2"], [0, True], "0,2", None):
        assert slots_source(infos, None, _data_config(tmp_path, ids)) is None
    path.write_text(json.dumps({"hidden_states": {"layer_ids": [0, 2]}, "index_convention": "hf"}))
    assert slots_source(infos, None, path).stated  # stated at the top level
    path.write_text(json.dumps({"hidden_states": {"layer_ids": [0, 2], "index_convention": 1}}))
    assert not slots_source(infos, None, path).stated  # not a convention name


def test_configured_wiring_as_assumed(tmp_path):
    infos = _slots([0, 2, 4, 6])
    facts = layer_id_facts(_cfg((2, 4, 0), HF), infos, 3)  # engines feed ascending order
    assert (facts.configured, facts.configured_hf) == ((0, 1, 2), (0, 2, 4))
    assert facts.slot_hf == (0, 2, 4, 6) and facts.slots is None
    sglang = layer_id_facts(_cfg((1, 3, 5), SGLANG), infos, 3)
    assert sglang.configured == (1, 2, 3)  # +1 since the first id is 1, in either version
    since = layer_id_facts(_cfg((0, 2, 4), SGLANG), infos, 3)  # [1, 3, 5] before, [0, 2, 4] since
    assert since.configured == (0, 1, 2) and since.configured_hf == (0, 2, 4)
    assert layer_id_facts(_cfg((0, 2), HF), infos, 3).configured is None  # too few ids
    assert layer_id_facts(_cfg(None, None), infos, 3).configured is None
    post = [*infos[:3], SlotInfo("final(post-norm)", 6, post_norm=True)]
    assert layer_id_facts(_cfg((2, 4, 6), HF), post, 3).configured is None  # never captured
    facts = layer_id_facts(_cfg((0, 2, 4), HF), infos, 3, override=[0, 2, 4, 6])
    assert facts.slots.where == "--slot-layers"
    d = facts.to_dict()
    assert d["configured"] == [0, 1, 2] and d["configured_hf_indices"] == [0, 2, 4]
    assert d["other_readings"] == [] and d["draft"]["ids"] == [0, 2, 4]


def test_other_readings_of_unstated_ids(tmp_path):
    infos = _slots([1, 3, 5, 7])  # data_config.json [0, 2, 4, 6] read as layer outputs
    path = _data_config(tmp_path, [0, 2, 4, 6])
    facts = layer_id_facts(_cfg((0, 2, 4), HF), infos, 3, data_config=path)
    assert facts.configured is None
    readings = other_readings(facts, infos, (0, 1, 2))
    got = {(r.draft_convention, r.slots_convention): r for r in readings}
    assert set(got) == {(HF, HF), (LAYER_OUTPUT, LAYER_OUTPUT)}
    rr = got[(HF, HF)]
    assert (rr.wiring, rr.label, rr.is_best, rr.rereads_slots) == (
        (0, 1, 2),
        "[embed, L2, L4]",
        True,
        True,
    )
    assert rr.slot_hf == (0, 2, 4, 6) and rr.config_hf == (0, 2, 4)
    rd = got[(LAYER_OUTPUT, LAYER_OUTPUT)]
    assert (rd.wiring, rd.label, rd.rereads_slots) == ((0, 1, 2), "[L1, L3, L5]", False)
    assert rd.config_hf == (1, 3, 5) and rd.slot_hf == (1, 3, 5, 7)
    assert [r.is_best for r in other_readings(facts, infos, (1, 2, 3))] == [False, False]
    assert (
        rr.to_dict()["slot_hf_indices"] == [0, 2, 4, 6]
        and rr.to_dict()["label"] == "[embed, L2, L4]"
    )
    # Where a reading selects nothing it is left out; fc's size must match.
    facts = layer_id_facts(_cfg((0, 8, 9), HF), infos, 3, data_config=path)
    assert other_readings(facts, infos, (0, 1, 2)) == []
    facts = layer_id_facts(_cfg((0, 2, 4, 6), HF), infos, 4, data_config=path)
    assert other_readings(facts, infos, (0, 1, 2)) == []


def test_stated_or_absent_sources_have_no_other_reading(tmp_path):
    infos = _slots([0, 2, 4, 6])
    stated = _data_config(tmp_path, [0, 2, 4, 6], "hf")
    facts = layer_id_facts(_cfg((1, 3, 5), HF), infos, 3, data_config=stated)
    readings = other_readings(facts, infos, (0, 1, 2))
    assert [(r.draft_convention, r.slots_convention, r.wiring) for r in readings] == [
        (LAYER_OUTPUT, HF, (1, 2, 3))
    ]
    assert other_readings(LayerIdFacts(None, None, (0, 2)), infos, (0, 1)) == []
    # Without any data_config.json, only the draft's ids are read another way.
    none = layer_id_facts(_cfg((-1, 1, 3), HF), _slots([0, 2, 4, None]), 3)
    readings = other_readings(none, _slots([0, 2, 4, None]), (0, 1, 2))
    assert [(r.draft_convention, r.slots_convention) for r in readings] == [(LAYER_OUTPUT, "")]
    # SGLang ids are read both ways already: the HF reading is no other reading.
    sg = layer_id_facts(_cfg((0, 2, 4), SGLANG), infos, 3, data_config=stated)
    assert other_readings(sg, infos, (0, 1, 2)) == []


def test_vocab_boundaries():
    # Target id 0 and V - 1 are in range; V is not.
    edge = torch.tensor([0, 3, 8, 8])  # targets 0, 4, 10, 11
    assert analyse_vocab(edge, _t2d([0, 4, 10, 11]), D, V).problems == []
    over = torch.tensor([5, 5, 8, 9])  # the last maps to V; not valid as ids either
    assert _codes(analyse_vocab(over, None, D, V)) == [("out_of_range", "error", 1, D)]
    absolute = torch.tensor([0, 5, 10, 11])  # offsets leave the vocab; ids are valid
    assert analyse_vocab(absolute, None, D, V).d2t == "absolute"
    too_far = torch.tensor([1, 5, 10, 12])  # 12 is no target id either
    assert analyse_vocab(too_far, None, D, V).d2t == "offsets"
    two = torch.tensor([4, 9])  # two ids equal to nonzero(t2d): absolute
    assert analyse_vocab(two, _t2d([4, 9]), 2, V).d2t == "absolute"
    long = torch.zeros(8, dtype=torch.long)
    assert analyse_vocab(long, None, 8, V).first_entries == [0] * 6


def test_layer_id_facts_to_dict(tmp_path):
    infos = _slots([1, 3, 5, 7])
    path = _data_config(tmp_path, [0, 2, 4, 6])
    facts = layer_id_facts(_cfg((0, 2, 4), HF), infos, 3, data_config=path)
    facts.readings = other_readings(facts, infos, (0, 1, 2))
    d = facts.to_dict()
    assert d["draft"] == facts.draft.to_dict() and d["slots"] == facts.slots.to_dict()
    assert d["slot_hf_indices"] == [1, 3, 5, 7]
    assert d["configured"] is None and d["configured_hf_indices"] is None
    assert d["other_readings"][0] == {
        "draft_convention": "hf",
        "slots_convention": "hf",
        "slot_hf_indices": [0, 2, 4, 6],
        "config_hf_indices": [0, 2, 4],
        "wiring": [0, 1, 2],
        "label": "[embed, L2, L4]",
        "is_best": True,
    }
    empty = LayerIdFacts(None, None, (None, None)).to_dict()
    assert (empty["draft"], empty["slots"], empty["slot_hf_indices"]) == (None, None, [None, None])


def test_other_conventions_read_as_hf_ids(tmp_path):
    cfg = _cfg((0, 2, 4), "speculators<=0.4")
    assert draft_source(cfg).where == "config.json eagle_aux_hidden_state_layer_ids"
    assert layer_id_facts(cfg, _slots([0, 2, 4, 6]), 3).configured == (0, 1, 2)


def test_readings_keep_going_past_one_that_selects_nothing(tmp_path):
    infos = _slots([1, 3, 5, 7])
    path = _data_config(tmp_path, [0, 2, 4, 6])
    facts = layer_id_facts(_cfg((1, 3, 5), HF), infos, 3, data_config=path)
    assert facts.configured == (0, 1, 2)
    readings = other_readings(facts, infos, (0, 1, 2))
    assert [(r.draft_convention, r.slots_convention, r.wiring) for r in readings] == [
        (LAYER_OUTPUT, HF, (1, 2, 3))
    ]
    assert readings[0].label == "[L2, L4, L6]"


def test_reading_labels_keep_the_slot_names_they_do_not_change(tmp_path):
    infos = [SlotInfo("emb", 0), SlotInfo("mid", 2), SlotInfo("top", 4), SlotInfo("last", 6)]
    facts = layer_id_facts(_cfg((-1, 1, 3), HF), infos, 3)
    (r,) = other_readings(facts, infos, (0, 1, 2))
    assert (r.draft_convention, r.label) == (LAYER_OUTPUT, "[emb, mid, top]")


def test_readings_with_a_slot_of_unknown_index(tmp_path):
    # SpecForge-style: the aux slots from data_config.json, then the post-norm final state.
    infos = [*_slots([1, 3, 5]), SlotInfo("final(post-norm)", None, post_norm=True, verifier=True)]
    path = _data_config(tmp_path, [0, 2, 4])
    facts = layer_id_facts(_cfg((0, 2, 4), HF), infos, 3, data_config=path)
    readings = other_readings(facts, infos, (0, 1, 2))
    reread = next(r for r in readings if r.rereads_slots)
    assert reread.slot_hf == (0, 2, 4, None) and reread.wiring == (0, 1, 2)


# --- the vocab check on a checkpoint ------------------------------------------------------------------
@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    from inspector.synthetic import SyntheticSpec, write_synthetic

    return write_synthetic(
        tmp_path_factory.mktemp("vocab"), SyntheticSpec(size="tiny", n_samples=2, seq_len=40)
    )


def _draft_copy(src: Path, dst: Path, tensors=None, drop=(), config=None) -> Path:
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    w = load_file(str(dst / "model.safetensors"))
    w.update(tensors or {})
    save_file({k: v for k, v in w.items() if k not in drop}, str(dst / "model.safetensors"))
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(config or {})
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_raw_vocab_tensors(syn, tmp_path):
    from dataclasses import replace

    from safetensors.torch import load_file

    from inspector.doctor.checks.vocab import raw_vocab_tensors
    from inspector.formats import load_draft

    w = load_file(str(syn[0] / "model.safetensors"))
    absolute = torch.arange(w["d2t"].numel()) + w["d2t"]
    bad = _draft_copy(syn[0], tmp_path / "abs", {"d2t": absolute})
    draft = load_draft(bad, strict=False)
    d2t, t2d = raw_vocab_tensors(draft)
    assert torch.equal(d2t, absolute) and torch.equal(t2d, w["t2d"])  # as stored
    d2t, t2d = raw_vocab_tensors(replace(draft, stored_vocab=None))  # not from files: as loaded
    assert torch.equal(d2t, w["d2t"]) and torch.equal(t2d, draft.vocab.t2d)
    from inspector.draft import StoredVocab

    assert raw_vocab_tensors(replace(draft, stored_vocab=StoredVocab(None, None))) == (None, None)


def test_vocab_check(syn, tmp_path):
    from inspector.doctor.checks.vocab import coverage, vocab_check
    from inspector.evaluate import Evaluator
    from inspector.formats import SampleSet, load_draft

    ev = Evaluator(load_draft(syn[0]), SampleSet(syn[1]))
    t2d = ev.draft.vocab.t2d
    want_in = want_total = 0
    for i in (0, 1):
        s = ev.samples[i]
        rows = torch.arange(s.length - 2)
        rows = rows[s.loss_mask[rows + 1].bool()]
        want_in += int(t2d[s.input_ids[rows + 2]].sum())
        want_total += int(rows.numel())
    cov = coverage(ev, [0, 1])
    assert (cov.hits, cov.total) == (want_in, want_total) and cov.total > 0
    import shutil

    broken = tmp_path / "samples"
    shutil.copytree(syn[1], broken)
    (broken / "data_1.pt").write_bytes(b"not a pickle")
    bev = Evaluator(ev.draft, SampleSet(broken))
    assert coverage(bev, [1, 0]) == coverage(ev, [0])  # an unreadable sample is left out
    f = vocab_check(ev, [0, 1])  # random tokens: about D/V of them are in the draft vocab
    assert f.kind == "vocab_map" and f.severity == "warning" and f.vocab_repair is None
    assert f.summary.startswith(f"the draft vocab covers only {100 * cov.acc:.1f}%")
    assert f.evidence["coverage"] == cov.to_dict() and f.evidence["d2t"] == "offsets"
    assert f.evidence["problems"] == [] and f.evidence["t2d_count"] == 96
    assert f.evidence["draft_vocab_size"] == 96 and f.evidence["vocab_size"] == 256
    assert f.evidence["first_entries"] == ev.draft.vocab.d2t[:6].tolist()
    assert "out_of_range_as_offsets" not in f.evidence and f.evidence["notes"] == []
    # The full vocab: no map, every true token coverable.
    g = torch.Generator().manual_seed(0)
    full = _draft_copy(
        syn[0],
        tmp_path / "full",
        {"lm_head.weight": torch.randn(256, 64, generator=g) * 0.1},
        drop=("d2t", "t2d"),
        config={"draft_vocab_size": 256},
    )
    fev = Evaluator(load_draft(full), SampleSet(syn[1]))
    f = vocab_check(fev, [0])
    assert f.severity == "info" and f.fix == ""
    assert (
        f.summary
        == "vocab map consistent (absent d2t, D=256 of V=256); covers 100.0% of the samples' true tokens"
    )
    # A fault: an error with its repair and the loader's note.
    w = ev.draft.vocab
    bad = _draft_copy(syn[0], tmp_path / "abs", {"d2t": torch.arange(96) + w.d2t})
    f = vocab_check(Evaluator(load_draft(bad, strict=False), SampleSet(syn[1])), [0])
    assert f.severity == "error" and f.vocab_repair == VocabRepair.OFFSETS
    assert f.summary.startswith("vocab map: d2t holds absolute target ids")
    assert f.evidence["out_of_range_as_offsets"] >= 0 and f.evidence["notes"]
    assert "--write-fixed OUT does this" in f.fix
    # A warning-only problem (unsorted d2t, full coverage) is no error and repairs nothing.
    perm = torch.arange(256)
    perm[:2] = torch.tensor([1, 0])
    unsorted = _draft_copy(
        full,
        tmp_path / "unsorted",
        {"d2t": perm - torch.arange(256), "t2d": torch.ones(256, dtype=torch.bool)},
    )
    f = vocab_check(Evaluator(load_draft(unsorted, strict=False), SampleSet(syn[1])), [0])
    assert f.severity == "warning" and f.vocab_repair is None
    assert f.fix == "sort the draft vocab by target id" and "ascending" in f.summary
    # Coverage counts token 0 and leaves ids outside the vocab out of the hits.
    odd = tmp_path / "odd"
    odd.mkdir()
    s = torch.load(syn[1] / "data_0.pt", weights_only=True)
    s["input_ids"][-2:] = torch.tensor([0, 256])
    torch.save(s, odd / "data_0.pt")
    (odd / "data_config.json").write_bytes((syn[1] / "data_config.json").read_bytes())
    cov = coverage(Evaluator(fev.draft, SampleSet(odd)), [0])
    assert cov.total == coverage(fev, [0]).total and cov.hits == cov.total - 1
