"""Slot identity and engine defaults, unit by unit: the target match, the decision from each kind
of evidence, the finding's severity, and the engines' default feeds (no model runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inspector.doctor.checks.engine_default import engine_defaults
from inspector.doctor.checks.slot_identity import Mismatch, decide, identity_finding, relabel
from inspector.doctor.checks.target_slots import (
    POST,
    SlotMatch,
    TargetSlots,
    describe,
    match_slot,
    tolerance,
)
from inspector.draft import DraftConfig, RopeConfig
from inspector.formats.layer_convention import HF, LAYER_OUTPUT, LayerIdReading
from inspector.sample import SlotInfo


def _cfg(ids=None, convention=None) -> DraftConfig:
    return DraftConfig(
        hidden_size=8,
        target_hidden_size=8,
        num_heads=2,
        num_kv_heads=1,
        head_dim=4,
        intermediate_size=16,
        rms_norm_eps=1e-5,
        rope=RopeConfig(theta=10000.0),
        vocab_size=32,
        draft_vocab_size=16,
        aux_layer_ids=ids,
        aux_layer_convention=convention,
    )


def _slots(hf, verifier_last=True) -> list[SlotInfo]:
    out = [SlotInfo("embed" if k == 0 else f"L{k}", k) for k in hf]
    if verifier_last:
        out[-1] = SlotInfo(out[-1].label, out[-1].hf_index, verifier=True)
    return out


def _reading(ids, convention, decided_by=None, other=None, n_layers=None, conflict=None):
    return LayerIdReading(
        Path("data_config.json"),
        "hidden_states.layer_ids",
        tuple(ids),
        convention,
        decided_by,
        n_layers,
        "data_config.json num_hidden_layers" if n_layers else None,
        other,
        conflict,
    )


def _match(slot, nearest, error=0.001, tol=0.0078):
    return SlotMatch(slot, nearest, error, None, None, tol)


def _measured(*nearest, errors=None, n_layers=6):
    errors = errors or [0.001] * len(nearest)
    return TargetSlots(
        "T",
        n_layers,
        (0, 1),
        tuple(_match(i, k, e) for i, (k, e) in enumerate(zip(nearest, errors, strict=True))),
    )


# --- the target match --------------------------------------------------------------------------
def test_tolerance_is_the_dtype_rounding():
    assert tolerance(torch.bfloat16) == 2**-7
    assert tolerance(torch.float16) == 1e-3  # 2**-10 < the floor
    assert tolerance(torch.float32) == 1e-3


def test_match_slot_picks_the_equal_state():
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(5, 8, generator=g) for _ in range(3))
    states = [{0: a, 1: b, POST: c}, {0: a * 2, 1: b * 2, POST: c * 2}]
    m = match_slot(2, [a.to(torch.bfloat16), (a * 2).to(torch.bfloat16)], states)
    assert (m.slot, m.nearest, m.equals, m.matched) == (2, 0, True, 0)
    assert 0 < m.error < 2**-8 and m.tolerance == 2**-7
    assert m.second in (1, POST) and m.second_error > 0.5
    far = match_slot(0, [b * 1.05, b * 2 * 1.05], states)
    assert (far.nearest, far.matched, far.equals) == (1, None, False)
    assert far.error == pytest.approx(0.05, rel=1e-3)
    post = match_slot(0, [c, c * 2], states)
    assert post.matched == POST and post.error == 0.0
    one = match_slot(0, [a], [{0: a}])
    assert one.second is None and one.second_error is None


def test_match_descriptions_and_json():
    m = SlotMatch(1, 4, 0.0017, 5, 0.3, 2**-7)
    assert describe(m) == "slot 1 = HF 4 (rel. error 0.0017)"
    assert m.to_dict() == {
        "slot": 1,
        "matched": 4,
        "nearest": 4,
        "relative_error": 0.0017,
        "second": 5,
        "second_relative_error": 0.3,
        "tolerance": 2**-7,
    }
    far = SlotMatch(0, POST, 0.05, 3, None, 0.001)
    assert describe(far) == (
        "slot 0 equals no target state (nearest post-norm, rel. error 0.05 > 0.001)"
    )
    assert far.to_dict()["matched"] is None and far.to_dict()["second_relative_error"] is None
    skipped = TargetSlots("T", None, (), skipped="why")
    assert not skipped.measured and skipped.to_dict()["skipped"] == "why"
    assert not TargetSlots("T", 6, (0,)).measured  # no matches


# --- deciding ----------------------------------------------------------------------------------
def test_nothing_to_read():
    infos = [SlotInfo("s0"), SlotInfo("s1")]
    ident = decide(infos, _cfg(), 1)
    assert (ident.hf, ident.decided, ident.source, ident.known) == (
        (None, None),
        False,
        None,
        False,
    )
    assert identity_finding(ident) is None


def test_override_decides():
    infos = _slots([1, 3, 5, 7])
    ident = decide(infos, _cfg(), 3, override=[0, 2, 4, 6])
    assert (ident.hf, ident.decided_by, ident.readings) == (
        (0, 2, 4, 6),
        "--slot-layers",
        ((0, 2, 4, 6),),
    )
    f = identity_finding(ident)
    assert f.severity == "info" and "decided by --slot-layers" in f.summary


def test_a_decided_file():
    infos = _slots([0, 2, 4, 6])
    ident = decide(infos, _cfg(), 3, reading=_reading([0, 2, 4, 6], HF, "layer count", n_layers=6))
    assert (ident.hf, ident.decided_by, ident.num_layers, len(ident.readings)) == (
        (0, 2, 4, 6),
        "layer count",
        6,
        1,
    )
    assert ident.draft_fits == []  # only computed while undecided
    f = identity_finding(ident)
    assert f.severity == "info"
    assert "decided by the layer count (6 layers, data_config.json num_hidden_layers)" in f.summary
    prose = decide(infos, _cfg(), 3, reading=_reading([0, 2, 4, 6], HF, "layer_id_convention"))
    assert "decided by its layer_id_convention" in identity_finding(prose).summary


def test_a_conflict_is_a_warning():
    infos = _slots([0, 2, 4, 6])
    r = _reading([0, 2, 4, 6], HF, "layer count", n_layers=6, conflict="index_convention says X")
    ident = decide(infos, _cfg(), 3, reading=r)
    f = identity_finding(ident)
    assert f.severity == "warning" and "; index_convention says X" in f.summary
    assert ident.notes == ["index_convention says X"]


def test_the_readers_guess_uses_the_doctors_layer_count():
    """The reader assumed [1, 3, 5, 7]; the doctor's reading (with the target's count) says HF."""
    infos = _slots([1, 3, 5, 7])
    ident = decide(infos, _cfg(), 3, reading=_reading([0, 2, 4, 6], HF, "layer count", n_layers=6))
    assert ident.hf == (0, 2, 4, 6)
    specforge = [*_slots([1, 3, 5], verifier_last=False), SlotInfo("final", post_norm=True)]
    ident = decide(specforge, _cfg(), 3, reading=_reading([0, 2, 4], HF, "index_convention"))
    assert ident.hf == (0, 2, 4, None)  # three ids for the aux slots, none for the final one


def test_undecided_states_both_readings_and_what_the_draft_fits():
    infos = _slots([1, 3, 5, 7])
    r = _reading([0, 2, 4, 6], LAYER_OUTPUT, None, other=(0, 2, 4, 6))
    ident = decide(infos, _cfg((0, 2, 4), "hf"), 3, reading=r)
    assert not ident.decided and ident.readings == ((1, 3, 5, 7), (0, 2, 4, 6))
    assert ident.draft_fits == ["hf"]
    f = identity_finding(ident)
    assert f.severity == "warning"
    assert (
        "read as decoder-layer output ids (the speculators v1 default, HF index = id + 1) the "
        "slots are HF [1, 3, 5, 7]; read as HF indices the slots are HF [0, 2, 4, 6]" in f.summary
    )
    assert "read as HF indices (not decisive" in f.summary
    # SGLang ids [-1, 1, 3] are HF [0, 2, 4] as SpecForge writes them.
    assert decide(infos, _cfg((-1, 1, 3), "sglang"), 3, reading=r).draft_fits == ["hf"]
    assert decide(infos, _cfg((1, 3, 5), "hf"), 3, reading=r).draft_fits == ["layer_output"]
    assert decide(infos, _cfg((0, 2), "hf"), 3, reading=r).draft_fits == []  # too few ids
    assert decide(infos, _cfg(None, None), 3, reading=r).draft_fits == []
    assert decide(infos, _cfg((0, 9, 4), "hf"), 3, reading=r).draft_fits == []


def test_the_target_decides_and_flags():
    infos = _slots([0, 2, 4, 6])
    r = _reading([0, 2, 4, 6], HF, "index_convention")
    ok = decide(infos, _cfg(), 3, reading=r, measured=_measured(0, 2, 4, 6))
    assert (ok.decided_by, ok.hf, ok.mismatches, ok.settled) == (
        "the target",
        (0, 2, 4, 6),
        [],
        None,
    )
    assert identity_finding(ok).severity == "info"
    early = decide(infos, _cfg(), 3, reading=r, measured=_measured(0, 2, 4, 4))
    assert early.hf == (0, 2, 4, 4)
    assert early.mismatches == [Mismatch(3, 6, 4, True)]
    f = identity_finding(early)
    assert f.severity == "error" and "vLLM id 6, not 5" in f.fix
    none = decide(
        infos,
        _cfg(),
        3,
        reading=r,
        measured=_measured(0, 3, 4, 6, errors=[0.001, 0.2, 0.001, 0.001]),
    )
    assert none.hf == (0, 2, 4, 6)  # the slot that equals none keeps its claimed index
    assert none.mismatches == [Mismatch(1, 2, None, False)]
    post = [*_slots([0, 2, 4], verifier_last=False), SlotInfo("final", post_norm=True)]
    p = decide(post, _cfg(), 3, measured=_measured(0, 2, 4, POST))
    assert p.hf == (0, 2, 4, None) and p.mismatches == []
    wrong_post = decide(post, _cfg(), 3, measured=_measured(0, 2, 4, 6))
    assert wrong_post.mismatches == [Mismatch(3, None, 6, False)]


def test_the_target_settles_an_undecided_file():
    infos = _slots([1, 3, 5])
    r = _reading([0, 2, 4], LAYER_OUTPUT, None, other=(0, 2, 4))
    ident = decide(infos, _cfg(), 3, reading=r, measured=_measured(0, 2, 4))
    assert (ident.hf, ident.settled, ident.mismatches) == ((0, 2, 4), "hf", [])
    assert "holds HF indices" in identity_finding(ident).summary
    # The assumed reading was right: nothing to settle beyond it.
    same = decide(infos, _cfg(), 3, reading=r, measured=_measured(1, 3, 5))
    assert same.settled == "layer_output" and same.hf == (1, 3, 5)
    # Neither reading: mismatches against the closer one, nothing settled.
    odd = decide(infos, _cfg(), 3, reading=r, measured=_measured(0, 2, 5))
    assert odd.settled is None and [m.slot for m in odd.mismatches] == [2]


def test_a_target_that_did_not_run():
    infos = _slots([0, 2, 4, 6])
    skipped = TargetSlots("T", None, (), skipped="transformers is not installed")
    r = _reading([0, 2, 4, 6], HF, "index_convention")
    ident = decide(infos, _cfg(), 3, reading=r, measured=skipped)
    assert ident.decided_by == "index_convention" and ident.notes == []
    f = identity_finding(ident)
    assert (
        f.severity == "info"
        and "the target was not run (transformers is not installed)" in f.summary
    )
    short = TargetSlots("T", 6, (0,), (_match(0, 0),))  # fewer matches than slots: not used
    assert decide(infos, _cfg(), 3, reading=r, measured=short).decided_by == "index_convention"


def test_relabel():
    infos = [*_slots([1, 3]), SlotInfo("final", post_norm=True), SlotInfo("s3", 5)]
    out = relabel(infos, (0, 3, None, None))
    assert [(s.label, s.hf_index) for s in out] == [
        ("embed", 0),
        ("L3", 3),
        ("final", None),
        ("s3", None),
    ]
    assert out[1] is infos[1] and out[2] is infos[2]
    assert out[0].verifier is False and relabel(infos, (4, 3, None, 5))[0].label == "L4"


def test_identity_json():
    infos = _slots([0, 2, 4, 6])
    r = _reading([0, 2, 4, 6], HF, "index_convention")
    d = decide(infos, _cfg(), 3, reading=r, measured=_measured(0, 2, 4, 4)).to_dict()
    assert d["hf_indices"] == [0, 2, 4, 4] and d["decided_by"] == "the target"
    assert d["source"] == "data_config.json hidden_states.layer_ids [0, 2, 4, 6]"
    assert d["mismatches"] == [{"slot": 3, "claimed": 6, "actual": 4, "verifier": True}]
    assert d["data_config"]["convention"] == "hf" and d["target"]["num_layers"] == 6
    assert d["readings"] == [[0, 2, 4, 4]] and d["num_layers"] == 6


# --- engine defaults ---------------------------------------------------------------------------
def test_engine_defaults():
    assert engine_defaults(_slots([0, 2, 4, 6]), 3, None) == []
    (feed,) = engine_defaults(_slots([0, 2, 4, 6]), 3, 6)
    assert (feed.hf, feed.serves, feed.wiring, feed.missing) == ((2, 3), False, None, (3,))
    assert feed.engine_keys == ("vllm", "sglang-pre25454", "sglang")
    assert feed.names == "vLLM, SGLang before #25454, SGLang since #25454"
    (feed,) = engine_defaults(_slots([0, 2, 4, 5]), 3, 8)
    assert (feed.hf, feed.serves, feed.wiring, feed.missing) == ((2, 4, 5), True, (1, 2, 3), ())
    (feed,) = engine_defaults(_slots([0, 2, 4, 6]), 3, 8)
    assert (feed.wiring, feed.missing) == (None, (5,))
    post = [*_slots([2, 4], verifier_last=False), SlotInfo("final", 5, post_norm=True)]
    assert engine_defaults(post, 3, 8)[0].missing == (5,)  # a post-norm state is not HF 5
    assert feed.to_dict() == {
        "engines": ["vLLM", "SGLang before #25454", "SGLang since #25454"],
        "hf_indices": [2, 4, 5],
        "wiring": None,
        "missing": [5],
        "serves": True,
    }


# --- what the mutation run found untested --------------------------------------------------------
def test_match_slot_ranks_three_and_two_states():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4, 8, generator=g)
    states = [{0: a, 1: a * 1.5, 2: a * 3}]
    m = match_slot(0, [a * 1.1], states)
    assert (m.nearest, m.second) == (0, 1)  # the runner-up is the second nearest, not the third
    two = match_slot(0, [a], [{0: a, 1: a * 2}])
    assert two.second == 1 and two.second_error == pytest.approx(0.5)
    # Relative to the state's own norm, however small it is.
    small = match_slot(0, [a * 1e-3 * 1.1], [{0: a * 1e-3}])
    assert small.error == pytest.approx(0.1, rel=1e-3)


def test_json_rounds_to_six_places():
    m = SlotMatch(0, 1, 0.00123456789, 2, 0.98765432109, 0.0078)
    d = m.to_dict()
    assert (d["relative_error"], d["second_relative_error"]) == (0.001235, 0.987654)


def test_target_slots_json():
    t = TargetSlots("T", 6, (0, 1), (_match(0, 0),), argmax_agree=(3, 4))
    assert t.to_dict() == {
        "target": "T",
        "num_layers": 6,
        "samples": [0, 1],
        "matches": [_match(0, 0).to_dict()],
        "skipped": None,
        "target_argmax_tokens": {"hits": 3, "total": 4},
    }
    assert TargetSlots("T", None, ()).to_dict()["target_argmax_tokens"] is None


def test_identity_json_keys():
    infos = _slots([1, 3, 5, 7])
    r = _reading([0, 2, 4, 6], LAYER_OUTPUT, None, other=(0, 2, 4, 6), conflict=None)
    d = decide(infos, _cfg((0, 2, 4), "hf"), 3, reading=r).to_dict()
    assert d == {
        "hf_indices": [1, 3, 5, 7],
        "decided_by": None,
        "source": "data_config.json hidden_states.layer_ids [0, 2, 4, 6]",
        "readings": [[1, 3, 5, 7], [0, 2, 4, 6]],
        "num_layers": None,
        "data_config": r.to_dict(),
        "target": None,
        "mismatches": [],
        "draft_ids_fit": ["hf"],
        "notes": [],
        "settled": None,
    }
    bare = decide([SlotInfo("s0")], _cfg(), 1).to_dict()
    assert bare["data_config"] is None and bare["target"] is None


def test_reading_json():
    r = _reading([0, 2], LAYER_OUTPUT, None, other=(0, 2), n_layers=6, conflict="c")
    assert r.to_dict() == {
        "where": "data_config.json hidden_states.layer_ids",
        "ids": [0, 2],
        "convention": "layer_output",
        "decided_by": None,
        "num_layers": 6,
        "layers_from": "data_config.json num_hidden_layers",
        "other_hf_indices": [0, 2],
        "conflict": "c",
    }
    assert _reading([0, 2], HF, "index_convention").to_dict()["other_hf_indices"] is None


def test_the_draft_fits_exactly_the_captured_slots():
    infos = _slots([1, 3, 5])
    r = _reading([0, 2, 4], LAYER_OUTPUT, None, other=(0, 2, 4))
    assert decide(infos, _cfg((0, 2, 4), "hf"), 3, reading=r).draft_fits == ["hf"]


def test_relabel_needs_one_index_per_slot():
    with pytest.raises(ValueError):
        relabel(_slots([0, 2]), (0,))


def test_engine_default_json_and_conditions():
    (served,) = engine_defaults(_slots([0, 2, 4, 5]), 3, 8)
    assert served.to_dict()["wiring"] == [1, 2, 3]
    # Held layers but a state count the fc does not take: no wiring.
    (four,) = engine_defaults(_slots([2, 4, 5, 7]), 4, 8)
    assert (four.serves, four.missing, four.wiring) == (False, (), None)


def test_a_target_too_big_for_memory_is_not_loaded(monkeypatch):
    from inspector.demo_paths import demo_paths
    from inspector.doctor.checks import target_slots

    try:
        target = demo_paths().target
    except Exception:
        pytest.skip("bundled demo not built")
    need = target_slots.weight_bytes(target)
    assert need is not None and need > 1_000_000
    monkeypatch.setattr("inspector.memory.available_host_bytes", lambda: need - 1)
    why = target_slots.too_big(target, torch.device("cpu"))
    assert why is not None and "GiB are free on cpu" in why
    monkeypatch.setattr("inspector.memory.available_host_bytes", lambda: need)
    assert target_slots.too_big(target, torch.device("cpu")) is None
    assert target_slots.weight_bytes(Path("/nonexistent")) is None


def test_a_slot_measured_as_the_post_norm_state():
    infos = _slots([0, 2, 4, 6])
    r = _reading([0, 2, 4, 6], HF, "index_convention")
    ident = decide(infos, _cfg(), 3, reading=r, measured=_measured(0, 2, 4, POST))
    assert ident.hf == (0, 2, 4, None)  # the final state after the norm, which has no HF index
    assert ident.mismatches == [Mismatch(3, 6, POST, True)]
    f = identity_finding(ident)
    assert (f.kind, f.evidence) == ("slot_identity", ident.to_dict())
    assert "but equals the post-norm final state" in f.summary


def test_an_undecided_specforge_file_names_the_aux_slots():
    """SpecForge ids name the aux slots; the post-norm final slot after them has none."""
    infos = [*_slots([1, 3, 5], verifier_last=False), SlotInfo("final", post_norm=True)]
    r = _reading([0, 2, 4], LAYER_OUTPUT, None, other=(0, 2, 4))
    ident = decide(infos, _cfg(), 3, reading=r)
    assert ident.readings == ((1, 3, 5, None), (0, 2, 4, None))
    f = identity_finding(ident)
    assert f.severity == "warning" and "the slots are HF [0, 2, 4, post-norm]" in f.summary
    settled = decide(infos, _cfg(), 3, reading=r, measured=_measured(0, 2, 4, POST))
    assert (settled.hf, settled.settled, settled.mismatches) == ((0, 2, 4, None), "hf", [])
    # Ids that fit neither the slots nor the aux slots: the reader's labels stand, undecided
    # with one reading (no second one to state).
    odd = decide(infos, _cfg(), 3, reading=_reading([0, 2], LAYER_OUTPUT, None, other=(0, 2)))
    assert odd.readings == ((1, 3, 5, None),)
    f = identity_finding(odd)
    assert f.severity == "info" and "as the reader assumed" in f.summary
