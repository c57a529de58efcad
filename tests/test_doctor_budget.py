"""The doctor's compute budget: which samples and how much of each it reads, and that reading a
prefix scores exactly the positions of the whole sample that lie in it."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from inspector.cli import main
from inspector.doctor import DiagnoseSettings, diagnose
from inspector.doctor.budget import (
    ACCEPT_SHARE,
    READ_FORWARDS,
    SCORED_FORWARDS,
    SampleShape,
    plan,
    token_macs,
)
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft


@pytest.fixture(scope="module")
def cfg(demo):
    return load_draft(demo.draft).config


def test_token_macs_is_every_matmul_weight(demo, cfg):
    # One forward per token multiplies by every 2-D weight once, except the embedding (a lookup).
    d = load_draft(demo.draft)
    want = sum(
        t.numel() for k, t in d.weights.items() if t.dim() == 2 and not k.startswith("embed")
    )
    assert token_macs(cfg) == want


def _shape(index: int, length: int, prompt: int) -> SampleShape:
    mask = np.zeros(length, dtype=np.int64)
    mask[prompt:] = 1
    return SampleShape.of(index, mask)


def test_shape_prefix_reaches_the_nth_scored_position():
    s = _shape(0, 100, 30)
    assert s.scored[0] == 30 and s.scored.size == 69
    # Mask position p is row p-1's, whose label is token p+1: p+2 tokens.
    assert s.prefix(1) == 32 and s.prefix(10) == 41
    assert s.prefix(69) == s.prefix(None) == 100
    # The first and last positions are never scored (no row before, no label after).
    assert SampleShape.of(1, np.ones(5)).scored.tolist() == [1, 2, 3]


def test_small_drafts_read_everything(cfg):
    shapes = [_shape(i, 2048, 600) for i in range(8)]
    p = plan(cfg, shapes)
    assert p.decided_by == "whole" and not p.cut and p.samples == list(range(8))
    assert p.accept_samples is None and not p.accept_skipped


def test_budget_cuts_each_sample_to_the_same_scored_count(cfg):
    shapes = [_shape(i, 2048, 600) for i in range(8)]
    macs = token_macs(cfg)
    # Room for exactly 64 scored positions per sample (and the prompt before them).
    per = READ_FORWARDS * (600 + 65) + SCORED_FORWARDS * 64
    budget = 8 * per * macs / (1 - ACCEPT_SHARE)
    p = plan(cfg, shapes, budget_macs=budget * 1.0001)
    assert p.decided_by == "budget" and p.scored_per_sample == 64
    assert p.cuts == {i: 600 + 65 for i in range(8)} and p.samples == list(range(8))
    # A hair less: the next rung down.
    q = plan(cfg, shapes, budget_macs=budget * 0.999)
    assert q.scored_per_sample == 32 and q.cuts[0] == 600 + 33


def test_budget_reads_fewer_samples_when_prompts_cost_too_much(cfg):
    shapes = [_shape(i, 2048, 1500) for i in range(8)]
    macs = token_macs(cfg)
    per = READ_FORWARDS * (1500 + 33) + SCORED_FORWARDS * 32
    budget = 3.5 * per * macs / (1 - ACCEPT_SHARE)
    p = plan(cfg, shapes, budget_macs=budget)
    assert p.samples == [0, 1, 2] and p.dropped_samples == [3, 4, 5, 6, 7]
    assert p.scored_per_sample == 32 and p.cut
    # At least one sample always runs, whatever the budget.
    assert plan(cfg, shapes, budget_macs=1.0).samples == [0]


def test_accept_replay_gets_its_share(cfg):
    from inspector.doctor.budget import ACCEPT_READ_FORWARDS

    shapes = [_shape(i, 1000, 0) for i in range(4)]  # 998 round starts each
    macs = token_macs(cfg)
    # A 30-step replay (3 wirings: 30 forwards where rounds start, keys and values elsewhere)
    # fits two samples only; the checks fit whole.
    checks = sum(READ_FORWARDS * 1000 + SCORED_FORWARDS * 998 for _ in shapes) * macs
    per = 3 * (ACCEPT_READ_FORWARDS * 1000 + 30 * 998) * macs
    budget = 2.5 * per / ACCEPT_SHARE
    assert checks <= budget * (1 - ACCEPT_SHARE)
    p = plan(cfg, shapes, budget_macs=budget, accept_steps=30)
    assert p.decided_by == "whole" and p.accept_samples == [0, 1]
    assert p.summary() == "accept length replayed on 2 of the samples"
    assert plan(cfg, shapes, budget_macs=budget * 100, accept_steps=30).accept_samples is None
    none = plan(replace(cfg, intermediate_size=cfg.intermediate_size * 100_000), shapes[:1])
    assert none.accept_skipped


def test_max_tokens(cfg):
    shapes = [_shape(0, 100, 10), _shape(1, 40, 10)]
    p = plan(cfg, shapes, max_tokens=50, budget_macs=1.0)
    assert p.decided_by == "--max-tokens" and p.cuts == {0: 50} and p.samples == [0, 1]
    assert p.accept_samples is None  # the user's choice: no budget
    w = plan(cfg, shapes, max_tokens=0, budget_macs=1.0)
    assert w.decided_by == "whole" and not w.cut and w.accept_samples is None
    for bad in (-1, 1, 2):
        with pytest.raises(InputError, match="--max-tokens"):
            plan(cfg, shapes, max_tokens=bad)


def test_cut_view_shares_the_set(demo):
    base = SampleSet(demo.train_samples)
    view = base.cut({0: 20})
    full = base[0]
    cut = view[0]
    assert cut.length == 20 and full.length > 20
    assert cut.input_ids.equal(full.input_ids[:20]) and cut.slots[1].equal(full.slots[1][:20])
    assert view[1].length == base[1].length  # not in the map: whole
    assert base[0].length == full.length  # the base set is not cut


def test_doctor_on_a_prefix_scores_exactly_its_positions(demo):
    ev = Evaluator(load_draft(demo.draft), SampleSet(demo.train_samples))
    whole = diagnose(ev, DiagnoseSettings(2, max_tokens=0))
    cut = diagnose(ev, DiagnoseSettings(2, max_tokens=40))
    assert cut.plan is not None and cut.plan.cuts == {0: 40, 1: 40}
    train = (0, 1, 2)
    per_whole = whole.wiring_result(train)
    per_cut = cut.wiring_result(train)
    # Rows 0..37 of each sample, counted where loss_mask[row + 1] is set.
    want = 0
    for i in (0, 1):
        m = ev.samples[i].loss_mask.numpy().astype(bool)
        want += int(m[1:39].sum())
    assert per_cut.all_tok.total == want < per_whole.all_tok.total
    assert cut.to_dict()["reading"]["tokens_read"] == {"0": 40, "1": 40}


def test_cli_max_tokens(demo, capsys):
    rc = main(
        [
            "doctor",
            str(demo.draft),
            str(demo.train_samples),
            "--samples",
            "1",
            "--max-tokens",
            "48",
            "--json",
        ]
    )
    assert rc in (0, 1)
    out = json.loads(capsys.readouterr().out)
    assert out["reading"]["decided_by"] == "--max-tokens"
    assert out["reading"]["tokens_read"] == {"0": 48}
    rc = main(["doctor", str(demo.draft), str(demo.train_samples), "--samples", "1"])
    text = capsys.readouterr().out
    assert "compute budget" not in text  # the demo draft is read whole


def test_write_fixed_verifies_on_what_the_doctor_read(demo, tmp_path):
    from support import edited_copy

    from inspector.doctor import write_fixed

    def permute(w):
        fc = w["fc.weight"]
        ht = fc.shape[1] // 3
        return {"fc.weight": torch.cat([fc[:, b * ht : (b + 1) * ht] for b in (1, 2, 0)], dim=1)}

    bad = edited_copy(demo.draft, tmp_path / "permuted", tensors=permute)
    ev = Evaluator(load_draft(bad, strict=False), SampleSet(demo.train_samples))
    report = diagnose(ev, DiagnoseSettings(2, max_tokens=60))
    res = write_fixed(ev, report, tmp_path / "fixed")
    want = sum(int(ev.samples[i].loss_mask.numpy().astype(bool)[1:59].sum()) for i in (0, 1))
    assert res.verified and res.verification.expected.total == want


def test_plan_summary(cfg):
    shapes = [_shape(i, 2048, 1500) for i in range(8)]
    macs = token_macs(cfg)
    per = READ_FORWARDS * (1500 + 33) + SCORED_FORWARDS * 32
    p = plan(cfg, shapes, budget_macs=3.5 * per * macs / (1 - ACCEPT_SHARE))
    text = p.summary()
    assert "up to 32 scored positions each" in text and "5 more samples over the budget" in text
    assert "accept" not in text  # the replay fits: it drafts only where rounds start
    assert plan(cfg, shapes[:1]).summary() == ""
    huge = replace(cfg, intermediate_size=cfg.intermediate_size * 100_000)
    assert "accept length not replayed here" in plan(huge, shapes[:1]).summary()
    cut = plan(cfg, shapes[:2], max_tokens=100)
    assert cut.summary() == "each cut to its first 100 tokens (--max-tokens)"
