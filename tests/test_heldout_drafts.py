"""The doctor on HELD-OUT drafts (tests/heldout.py): drafts trained here on wirings, norm flags
and a target the bundled demo never shows. On every case the wiring search names the wiring the
weights were trained on, and the doctor's config check says nothing false: no wiring problem for a
draft configured with its trained layers, an error naming the trained ids for a copy configured
with the last-N ("serve") layers; a trained order no engine can feed is an error either way."""

from __future__ import annotations

import pytest
from heldout import CASES, HeldOutDraft, with_ids

from inspector.doctor.finding import Severity
from inspector.doctor.pipeline import DoctorRequest, run
from inspector.doctor.wiring.trained import find_trained_wiring
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft

pytestmark = pytest.mark.usefixtures("one_thread")
N = 4  # doctor samples: the draft's own training samples
NAMES = list(CASES)


def _evaluator(folder, samples) -> Evaluator:
    return Evaluator(load_draft(folder, strict=False), SampleSet(samples))


def _doctor(d: HeldOutDraft, folder):
    request = DoctorRequest(folder, n_samples=N)
    return run(request, lambda f: _evaluator(f, d.samples))


@pytest.fixture(scope="module")
def searched(heldout_drafts):
    return {
        name: find_trained_wiring(_evaluator(d.checkpoint, d.samples))
        for name, d in heldout_drafts.items()
    }


@pytest.mark.parametrize("name", NAMES)
def test_the_search_ranks_the_trained_wiring_first(heldout_drafts, searched, name):
    d, tw = heldout_drafts[name], searched[name]
    top = sorted(tw.scored.items(), key=lambda kv: -kv[1].hits)[:4]
    assert tw.wiring == d.trained_wiring, [(w, c.fmt()) for w, c in top]


def _wiring(report):
    f = report.finding("wiring")
    assert f is not None, [x.kind for x in report.findings]
    return f


@pytest.mark.parametrize("name", NAMES)
def test_a_draft_configured_with_its_trained_layers(heldout_drafts, name):
    """Its config ids are its trained layers: no wiring problem, unless no engine can feed the
    trained order (then an error, whose fix is a permuted checkpoint)."""
    d = heldout_drafts[name]
    report = _doctor(d, d.checkpoint)
    f = _wiring(report)
    assert report.best_wiring == d.trained_wiring, f.summary
    if d.ascending:
        assert not f.severity.is_problem, f"{f.severity}: {f.summary} / {f.fix}"
    else:
        assert f.severity is Severity.ERROR, f"{f.severity}: {f.summary}"
        assert f.evidence["case"] == "not_ascending" and "--write-fixed" in f.fix, f.fix


@pytest.mark.parametrize("name", NAMES)
def test_a_copy_configured_with_the_serve_layers(heldout_drafts, name, tmp_path):
    """Its config rewritten to the last N captured layers: an error whose fix names the trained
    ids (the permuted order: a permuted checkpoint, as no ids can select it)."""
    d = heldout_drafts[name]
    assert d.serve_ids != d.config_ids
    report = _doctor(d, with_ids(d, d.serve_ids, tmp_path / "serve-ids"))
    f = _wiring(report)
    assert f.severity is Severity.ERROR, f"{f.severity}: {f.summary}"
    assert report.best_wiring == d.trained_wiring, f.summary
    if d.ascending:
        assert str(list(d.trained_hf)) in f.fix, f.fix
    else:
        assert "--write-fixed" in f.fix, f.fix
