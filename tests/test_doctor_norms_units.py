"""The norm-flag checks called directly on the demo draft edited in memory, over a few samples and
the trained wiring: each flag/tensor combination's severity and evidence, the config readings,
and the missing-tensor findings from folders, without a doctor run."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from support import edited_copy

from inspector.doctor.checks.draft_shape import config_flag, raw_config, stated_flags
from inspector.doctor.checks.norm_flags import (
    draft_hits,
    missing_norm_findings,
    norm_flag_checks,
    norm_flag_text,
)
from inspector.doctor.stats import MARGIN_CLEAR, MARGIN_ERROR, counts_of, severity_for_gain
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft

SAMPLES = (0, 1)
WIRING = (0, 1, 2)  # the demo draft's trained slots


@pytest.fixture(scope="module")
def ev(demo):
    return Evaluator(load_draft(demo.draft), SampleSet(demo.train_samples))


def _weight(seed: int, n: int) -> torch.Tensor:
    return (0.5 + torch.rand(n, generator=torch.Generator().manual_seed(seed))).float()


def _with(draft, flags: dict, tensors: dict, *, stated: bool = False):
    """The draft with `tensors` added and `flags` set in its config; stated=False detaches it
    from its folder, so the config object (not config.json) states the flags."""
    out = replace(
        draft, config=replace(draft.config, **flags), weights={**draft.weights, **tensors}
    )
    return out if stated else replace(out, path="")


def test_a_plain_draft_has_no_findings(ev):
    assert norm_flag_checks(ev, SAMPLES, WIRING) == []
    assert norm_flag_checks(ev, SAMPLES, WIRING, draft=_with(ev.draft, {}, {})) == []


def test_a_stored_tensor_without_its_flag_scores_both_settings(ev):
    w = _weight(0, 3 * ev.draft.config.hidden_size)
    draft = _with(ev.draft, {}, {"input_norm.weight": w})
    (f,) = norm_flag_checks(ev, SAMPLES, WIRING, draft=draft)
    assert f.kind == "norm_before_fc" and f.severity == "warning"
    facts = f.facts
    assert (facts.flag, facts.configured, facts.stored) == (
        "norm_before_fc",
        False,
        ("input_norm.weight",),
    )
    # As configured: the flag off; flipped: the norm applied.
    off = draft_hits(ev, SAMPLES, replace(draft, config=replace(draft.config)), WIRING, 0)
    on_cfg = replace(draft.config, norm_before_fc=True)
    on = draft_hits(ev, SAMPLES, replace(draft, config=on_cfg), WIRING, 0)
    assert facts.as_configured == counts_of(off) and facts.flipped == counts_of(on)
    assert facts.as_configured != facts.flipped and not facts.flipped_better
    assert f.evidence == {
        "flag": "norm_before_fc",
        "configured": False,
        "tensors": ["input_norm.weight"],
        "stored": ["input_norm.weight"],
        "as_configured": facts.as_configured.to_dict(),
        "flipped": facts.flipped.to_dict(),
        "flipped_clearly_better": False,
    }
    text = norm_flag_text(facts)
    assert (f.summary, f.fix) == (text.summary, text.fix) and f.fix


def test_engines_read_config_json_not_the_loaders_flag(ev):
    # The loader turns norm_before_fc on when input_norm.weight is stored; config.json (the
    # demo's, which says false) is what engines read, so "as configured" is the flag off.
    w = _weight(0, 3 * ev.draft.config.hidden_size)
    loaded = _with(ev.draft, {"norm_before_fc": True}, {"input_norm.weight": w}, stated=True)
    (f,) = norm_flag_checks(ev, SAMPLES, WIRING, draft=loaded)
    off = replace(loaded, config=replace(loaded.config, norm_before_fc=False))
    assert not f.facts.configured and f.severity == "warning"
    assert f.facts.as_configured == counts_of(draft_hits(ev, SAMPLES, off, WIRING, 0))
    assert f.facts.flipped == counts_of(draft_hits(ev, SAMPLES, loaded, WIRING, 0))


def test_a_flag_the_draft_was_not_trained_with(ev):
    n = ev.draft.config.hidden_size
    tensors = {f"fc_norm.{i}.weight": _weight(i, n) * 3 for i in range(3)}
    draft = _with(ev.draft, {"fc_norm": True}, tensors)
    (f,) = norm_flag_checks(ev, SAMPLES, WIRING, draft=draft)
    facts = f.facts
    assert f.kind == "fc_norm" and facts.configured and facts.flipped_better
    gain = facts.flipped.acc - facts.as_configured.acc
    assert f.severity == severity_for_gain(gain) == "error"


def test_without_scored_positions_nothing_is_clearly_better(ev):
    # No positions: neither setting wins; a set flag is then as configured (info), a stored
    # tensor without its flag still one no engine reads (warning).
    n = ev.draft.config.hidden_size
    tensors = {f"fc_norm.{i}.weight": _weight(i, n) * 3 for i in range(3)}
    (on,) = norm_flag_checks(ev, (), WIRING, draft=_with(ev.draft, {"fc_norm": True}, tensors))
    assert on.severity == "info" and not on.facts.flipped_better
    assert on.facts.as_configured.total == on.facts.flipped.total == 0
    (off,) = norm_flag_checks(ev, (), WIRING, draft=_with(ev.draft, {}, tensors))
    assert off.severity == "warning" and not off.facts.configured


def test_a_flag_without_its_tensors_is_an_error_without_scores(ev):
    draft = _with(ev.draft, {"norm_before_fc": True}, {})
    (f,) = norm_flag_checks(ev, SAMPLES, WIRING, draft=draft)
    assert (f.kind, f.severity) == ("norm_before_fc", "error")
    assert f.facts.missing == ("input_norm.weight",) and f.facts.as_configured is None
    assert f.evidence == {
        "flag": "norm_before_fc",
        "configured": True,
        "tensors": ["input_norm.weight"],
        "stored": [],
    }
    text = norm_flag_text(f.facts)
    assert (f.summary, f.fix) == (text.summary, text.fix)


def test_norm_output_is_info(ev):
    draft = _with(ev.draft, {"norm_output": True}, {})
    (f,) = norm_flag_checks(ev, SAMPLES, WIRING, draft=draft)
    assert (f.kind, f.severity, f.facts) == ("norm_output", "info", None)
    assert "SpecForge#879" in f.summary and f.fix == "" and f.evidence == {}


def test_the_shift_reaches_the_scorer(ev):
    w = _weight(0, 3 * ev.draft.config.hidden_size)
    draft = _with(ev.draft, {}, {"input_norm.weight": w})
    (f,) = norm_flag_checks(ev, SAMPLES, WIRING, draft=draft, shift=1)
    assert f.facts.as_configured == counts_of(draft_hits(ev, SAMPLES, draft, WIRING, 1))
    assert f.facts.as_configured != counts_of(draft_hits(ev, SAMPLES, draft, WIRING, 0))


def test_draft_hits_concatenates_the_samples(ev):
    one = draft_hits(ev, [0], ev.draft, WIRING, 0)
    assert one.dtype == bool and one.size > 0
    both = draft_hits(ev, [0, 1], ev.draft, WIRING, 0)
    assert np.array_equal(both[: one.size], one) and both.size > one.size
    empty = draft_hits(ev, [], ev.draft, WIRING, 0)
    assert empty.dtype == bool and empty.size == 0


def test_draft_hits_skips_samples_that_cannot_be_read(demo, ev, tmp_path):
    samples = tmp_path / "samples"
    samples.mkdir()
    for i in range(3):
        (samples / f"data_{i}.pt").write_bytes((demo.train_samples / f"data_{i}.pt").read_bytes())
    (samples / "data_1.pt").write_bytes(b"not a tensor file")
    broken = Evaluator(ev.draft, SampleSet(samples))
    want = np.concatenate([draft_hits(broken, [i], ev.draft, WIRING, 0) for i in (0, 2)])
    got = draft_hits(broken, [0, 1, 2], ev.draft, WIRING, 0)
    assert want.size > 0 and np.array_equal(got, want)
    assert draft_hits(broken, [1], ev.draft, WIRING, 0).size == 0


def test_config_flags():
    assert config_flag({"fc_norm": True}, "fc_norm")
    assert config_flag({"transformer_layer_config": {"fc_norm": True}}, "fc_norm")
    assert not config_flag({"transformer_layer_config": {"fc_norm": False}}, "fc_norm")
    assert not config_flag({"fc_norm": "true"}, "fc_norm")  # only a JSON true
    assert not config_flag({"transformer_layer_config": "fc_norm"}, "fc_norm")
    assert not config_flag({}, "fc_norm")
    # SpecForge's name for the per-slot norms, which SGLang reads as fc_norm
    assert config_flag({"use_aux_norm": True}, "fc_norm")
    assert not config_flag({"use_aux_norm": True}, "norm_before_fc")
    assert not config_flag({"use_aux_norm": 1}, "fc_norm")


def teststated_flags(demo, ev, tmp_path):
    assert stated_flags(ev.draft) == {
        "norm_before_fc": False,
        "fc_norm": False,
        "norm_output": False,
    }
    assert stated_flags(replace(ev.draft, path="")) is None
    assert stated_flags(replace(ev.draft, path=str(tmp_path))) is None  # no config.json
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    assert stated_flags(replace(ev.draft, path=str(bad))) is None
    on = edited_copy(demo.draft, tmp_path / "on", config=lambda c: c.update(fc_norm=True))
    assert stated_flags(replace(ev.draft, path=str(on))) == {
        "norm_before_fc": False,
        "fc_norm": True,
        "norm_output": False,
    }
    # a JSON list is not a config: no flags read from it
    lst = tmp_path / "list"
    lst.mkdir()
    (lst / "config.json").write_text("[]")
    assert raw_config(replace(ev.draft, path=str(lst))) is None


def test_a_draft_without_a_folder_reads_no_config_json(demo, ev, tmp_path, monkeypatch):
    # Not even one in the working directory: the flags then come from the config object.
    (tmp_path / "config.json").write_text(json.dumps({"fc_norm": True}))
    monkeypatch.chdir(tmp_path)
    assert stated_flags(replace(ev.draft, path="")) is None


def test_missing_fc_norms_count_the_blocks_stored(demo, tmp_path):
    n = 128

    def two(w):
        return {f"fc_norm.{i}.weight": _weight(i, n) for i in range(2)}

    d = edited_copy(
        demo.draft, tmp_path / "d", tensors=two, config=lambda c: c.update(fc_norm=True)
    )
    # The file, not the folder: its folder is read.
    (f,) = missing_norm_findings(d / "model.safetensors")
    assert f.facts.stored == ("fc_norm.0.weight", "fc_norm.1.weight")
    assert f.facts.missing == ("fc_norm.2.weight",) and f.facts.configured

    def four(w):
        return {f"fc_norm.{i}.weight": _weight(i, n) for i in range(4)}

    d4 = edited_copy(
        demo.draft, tmp_path / "d4", tensors=four, config=lambda c: c.update(fc_norm=True)
    )
    assert missing_norm_findings(d4) == []  # four stored: a four-block fc, none missing

    def gap(w):
        return {f"fc_norm.{i}.weight": _weight(i, n) for i in (0, 1, 2, 4)}

    g4 = edited_copy(
        demo.draft, tmp_path / "g4", tensors=gap, config=lambda c: c.update(fc_norm=True)
    )
    # Four stored: four blocks, and the fourth (fc_norm.3) is missing.
    (h,) = missing_norm_findings(g4)
    assert h.facts.tensors == tuple(f"fc_norm.{i}.weight" for i in range(4))
    assert h.facts.missing == ("fc_norm.3.weight",)
    text = norm_flag_text(h.facts)
    assert (h.kind, h.severity, h.summary, h.fix) == ("fc_norm", "error", text.summary, text.fix)
    assert h.fix
    nested = edited_copy(
        demo.draft,
        tmp_path / "n",
        config=lambda c: c.update(transformer_layer_config={"norm_before_fc": True}),
    )
    (g,) = missing_norm_findings(nested, n_blocks=3)
    assert g.kind == "norm_before_fc" and g.facts.missing == ("input_norm.weight",)
    raw = json.loads((nested / "config.json").read_text())
    assert raw["norm_before_fc"] is False  # the top level says false; the nested true wins


def test_a_small_gain_from_flipping_is_a_warning(ev):
    # input_norm.weight at the slots' mean RMS, a tenth low: the norm roughly undoes its own
    # scaling, so the draft (trained without it) loses a few points with the flag on - clearly
    # worse, but by less than MARGIN_ERROR: a warning, not an error.
    s = ev.samples[0]
    h = torch.cat([s.slots[k].float() for k in range(3)], -1)
    w = 0.9 * h.pow(2).mean(-1).sqrt().mean().expand(h.shape[-1]).clone()
    draft = _with(ev.draft, {"norm_before_fc": True}, {"input_norm.weight": w})
    (f,) = norm_flag_checks(ev, (0, 1, 2, 3), WIRING, draft=draft)
    gain = f.facts.flipped.acc - f.facts.as_configured.acc
    assert f.facts.flipped_better and MARGIN_CLEAR <= gain < MARGIN_ERROR
    assert f.severity == "warning"
