"""The lm_head check's parts called directly: the config readings of head_status, the report for a
headless draft, the borrowed rows' edge cases and the own-against-target comparison on the demo
draft edited in memory (the doctor runs in test_doctor_head cover the wiring together)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from support import edited_copy

from inspector.doctor.checks.lm_head import (
    HEAD,
    HeadStatus,
    _key,
    borrow_target_head,
    compare_heads,
    head_comparison_text,
    head_finding,
    head_status,
)
from inspector.doctor.checks.norm_flags import draft_hits
from inspector.doctor.pipeline import headless_report, with_finding
from inspector.doctor.report import DoctorReport, Finding
from inspector.doctor.stats import counts_of
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft

SAMPLES = (0, 1)
WIRING = (0, 1, 2)


@pytest.fixture(scope="module")
def ev(demo):
    return Evaluator(load_draft(demo.draft), SampleSet(demo.train_samples))


@pytest.fixture(scope="module")
def target_head(demo):
    from inspector.formats.target_tensors import read_target_head

    return read_target_head(demo.target).lm_head


def _edited(demo, folder: Path, *, drop=(HEAD,), add=None, config=None) -> Path:
    d = edited_copy(demo.draft, folder, config=config)
    w = load_file(str(d / "model.safetensors"))
    for k in drop:
        w.pop(k)
    w.update(add or {})
    save_file(w, str(d / "model.safetensors"))
    return d


def _status(**kw) -> HeadStatus:
    base = dict(
        checkpoint="c",
        weight_file="c/model.safetensors",
        present=False,
        tied=False,
        reuse_target=False,
        draft_vocab_size=256,
        vocab_size=512,
        has_embedding=True,
        has_d2t=True,
    )
    return HeadStatus(**{**base, **kw})


def test_key_reads_the_top_level_first():
    layer = {"transformer_layer_config": {"hidden_size": 64, "vocab_size": 9}}
    assert _key({"hidden_size": 128, **layer}, "hidden_size") == 128
    assert _key(layer, "vocab_size") == 9
    assert _key({"transformer_layer_config": "x"}, "vocab_size") is None
    assert _key({}, "vocab_size") is None


def test_status_reads_only_json_integers_and_trues(demo, tmp_path):
    def odd(c):
        c.update(
            draft_vocab_size=256.0,
            vocab_size="512",
            tie_word_embeddings="true",
            reuse_target_lm_head=True,
            hidden_size=True,
        )
        c.pop("transformer_layer_config", None)

    d = _edited(demo, tmp_path / "odd", drop=(HEAD, "d2t", "embed_tokens.weight"), config=odd)
    s = head_status(d / "model.safetensors")  # a file: its folder is read
    assert s.checkpoint == str(d) and s.weight_file == str(d / "model.safetensors")
    assert (s.draft_vocab_size, s.vocab_size, s.hidden_size) == (None, None, None)
    assert (s.tied, s.reuse_target, s.present) == (False, True, False)
    assert not s.has_d2t and not s.has_embedding
    own = head_status(demo.draft)
    assert own.present and own.hidden_size == 128 and own.has_d2t and own.has_embedding


def test_status_to_dict():
    s = _status(reuse_target=True, hidden_size=64)
    want = {
        "weight_file": "c/model.safetensors",
        "lm_head_present": False,
        "tie_word_embeddings": False,
        "reuse_target_lm_head": True,
        "draft_vocab_size": 256,
        "vocab_size": 512,
    }
    assert s.to_dict() == want
    f = head_finding(s, "T")
    assert f.evidence == {**want, "scored_with_head_from": "T"}


def test_sglang_random_needs_all_three():
    assert _status().sglang_random
    assert not _status(present=True).sglang_random
    assert not _status(draft_vocab_size=None).sglang_random
    assert not _status(tied=True).sglang_random
    assert head_finding(_status(tied=True)).severity == "warning"


def test_headless_report():
    s = _status(tied=True)  # a warning as a finding, an error when nothing could be checked
    r = headless_report(s)
    (f,) = r.findings
    assert (f.kind, f.severity) == ("lm_head", "error") and f.summary == head_finding(s).summary
    assert (r.best_wiring, r.wirings, r.serving_config, r.checkpoint) == ((), [], None, "c")
    assert r.to_dict()["serving_config"] == {}
    info = Finding("rope", "info", "fine")
    added = with_finding(r, info)
    assert added is r and [x.kind for x in r.findings] == ["lm_head", "rope"]
    err = Finding("vocab_map", "error", "bad")
    first = with_finding(DoctorReport((), [], [info], None), err)
    assert [x.kind for x in first.findings] == ["vocab_map", "rope"]  # errors first


def test_borrowed_rows_without_d2t_are_the_first_rows(demo, target_head, tmp_path):
    def same_vocab(c):
        c.update(draft_vocab_size=512)

    d = _edited(demo, tmp_path / "d", drop=(HEAD, "d2t", "t2d"), config=same_vocab)
    out = borrow_target_head(head_status(d), demo.target, tmp_path / "a" / "b")
    w = load_file(str(out / "model.safetensors"))
    assert torch.equal(w[HEAD], target_head)
    assert (out / "config.json").read_bytes() == (d / "config.json").read_bytes()
    # No draft vocab size stated: every target row.
    none = replace(head_status(d), draft_vocab_size=None)
    w2 = load_file(str(borrow_target_head(none, demo.target, tmp_path / "c") / "model.safetensors"))
    assert torch.equal(w2[HEAD], target_head)


def test_a_tied_draft_borrows_its_embedding(demo, tmp_path):
    d = _edited(demo, tmp_path / "d", config=lambda c: c.update(tie_word_embeddings=True))
    out = borrow_target_head(head_status(d), demo.target, tmp_path / "b")
    w = load_file(str(out / "model.safetensors"))
    assert torch.equal(w[HEAD], w["embed_tokens.weight"])
    # Tied but no embedding stored: the target's rows.
    e = _edited(
        demo,
        tmp_path / "e",
        drop=(HEAD, "embed_tokens.weight"),
        config=lambda c: c.update(tie_word_embeddings=True),
    )
    w = load_file(
        str(borrow_target_head(head_status(e), demo.target, tmp_path / "f") / "model.safetensors")
    )
    d2t = w["d2t"].long()
    from inspector.formats.target_tensors import read_target_head

    assert torch.equal(w[HEAD], read_target_head(demo.target).lm_head[torch.arange(256) + d2t])


def test_rows_outside_the_targets_head_are_refused(demo, tmp_path):
    d = _edited(demo, tmp_path / "d")
    d2t = load_file(str(d / "model.safetensors"))["d2t"]
    one_past = d2t.clone()
    one_past[255] = 512 - 255  # row 512 of a 512-row head
    for name, bad in (
        ("past the end", d2t + 512),
        ("one past the end", one_past),
        ("negative", -1 - torch.arange(256)),  # every id to row -1
    ):
        e = _edited(demo, tmp_path / name, add={"d2t": bad})
        status = head_status(e)
        with pytest.raises(InputError) as err:
            borrow_target_head(status, demo.target, tmp_path / "x")
        assert (err.value.path, err.value.field, err.value.message) == (
            status.weight_file,
            "d2t",
            "maps draft ids outside the target's lm_head rows",
        )
    # The first id at row 0 and the last at the target's last row: accepted.
    last = d2t.clone()
    last[0], last[255] = 0, 511 - 255
    e = _edited(demo, tmp_path / "last", add={"d2t": last})
    (tmp_path / "y").mkdir()  # an existing folder is written into
    w = load_file(
        str(borrow_target_head(head_status(e), demo.target, tmp_path / "y") / "model.safetensors")
    )
    from inspector.formats.target_tensors import read_target_head

    full = read_target_head(demo.target).lm_head
    assert torch.equal(w[HEAD][0], full[0]) and torch.equal(w[HEAD][255], full[511])
    # A draft vocab larger than the target's head (no d2t: the first D rows).
    plain = _edited(demo, tmp_path / "plain", drop=(HEAD, "d2t", "t2d"))
    wide = replace(head_status(plain), draft_vocab_size=513)
    with pytest.raises(InputError, match="outside the target's lm_head rows"):
        borrow_target_head(wide, demo.target, tmp_path / "z")


def test_own_head_against_the_targets_rows(ev, target_head):
    f = compare_heads(ev, SAMPLES, WIRING, target_head, "T")
    facts = f.facts
    own = draft_hits(ev, SAMPLES, ev.draft, WIRING, 0)
    assert facts.own == counts_of(own) and facts.target_path == "T"
    rows = target_head[ev.draft.vocab.draft_to_target]
    theirs = replace(ev.draft, weights={**ev.draft.weights, HEAD: rows})
    assert facts.target == counts_of(draft_hits(ev, SAMPLES, theirs, WIRING, 0))
    assert facts.own_clearly_better and not facts.target_clearly_better
    assert f.kind == "lm_head" and f.severity == "info" and "vllm#28549" in f.summary
    assert f.evidence == {
        "own_head": facts.own.to_dict(),
        "target_head": facts.target.to_dict(),
        "target_clearly_better": False,
        "own_clearly_better": True,
        "target": "T",
    }
    text = head_comparison_text(facts)
    assert (f.summary, f.fix) == (text.summary, text.fix)


def test_the_targets_rows_take_the_drafts_dtype(ev, target_head):
    # A float64 head scores as the float32 rows would: the rows are cast to the draft's dtype.
    f = compare_heads(ev, SAMPLES, WIRING, target_head, "T")
    g = compare_heads(ev, SAMPLES, WIRING, target_head.double(), "T")
    assert g.facts == f.facts


def test_a_head_noisier_than_the_targets_rows_warns(ev, target_head):
    rows = target_head[ev.draft.vocab.draft_to_target]
    g = torch.Generator().manual_seed(0)
    noisy = rows + 0.5 * torch.randn(rows.shape, generator=g)
    draft = replace(ev.draft, weights={**ev.draft.weights, HEAD: noisy})
    f = compare_heads(ev, SAMPLES, WIRING, target_head, "T", draft=draft)
    assert f.facts.target_clearly_better and not f.facts.own_clearly_better
    assert f.severity == "warning"
    assert f.facts.own == counts_of(draft_hits(ev, SAMPLES, draft, WIRING, 0))
    # The shift reaches both scorings.
    s = compare_heads(ev, SAMPLES, WIRING, target_head, "T", draft=draft, shift=1)
    assert s.facts.own == counts_of(draft_hits(ev, SAMPLES, draft, WIRING, 1))


def test_no_comparison_without_an_own_head(ev, target_head):
    headless = replace(ev.draft, weights={k: v for k, v in ev.draft.weights.items() if k != HEAD})
    assert compare_heads(ev, SAMPLES, WIRING, target_head, "T", draft=headless) is None


def test_status_of_a_folder_without_config(tmp_path, demo):
    d = edited_copy(demo.draft, tmp_path / "d")
    (d / "config.json").unlink()
    assert head_status(d) is None
    cfg = json.loads((demo.draft / "config.json").read_text())
    assert _key(cfg, "draft_vocab_size") == head_status(demo.draft).draft_vocab_size


def test_a_narrower_draft_names_its_weight_file(demo, tmp_path):
    d = _edited(demo, tmp_path / "d")
    status = replace(head_status(d), hidden_size=64)
    with pytest.raises(InputError) as e:
        borrow_target_head(status, demo.target, tmp_path / "b")
    assert (e.value.path, e.value.field) == (status.weight_file, HEAD)
    assert e.value.message.startswith("absent, and the target's lm_head is 128 wide")
