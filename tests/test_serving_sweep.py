"""`accept --sweep`: one beam per topk gives every (steps, draft_tokens) pair, equal to the
separate replays; the cost model, the grid's rules and the ranking."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inspector.engines import Engine
from inspector.errors import InputError
from inspector.serving.cost import CostModel, sweep_grid
from inspector.serving.replay import Replayer
from inspector.serving.settings_sweep import run_sweep
from inspector.serving.spec import DraftSpec

ROUND_FIELDS = ("starts", "accepted", "emitted", "bounded", "after_stop", "a_by_start")


@pytest.fixture(scope="module")
def synthetic_set(tmp_path_factory):
    from inspector.synthetic import SyntheticSpec, write_synthetic

    return write_synthetic(
        tmp_path_factory.mktemp("syn"), SyntheticSpec(size="tiny", n_samples=3, seq_len=24)
    )


def _evaluator(draft_dir, sample_dir, ttt_steps, dtype=torch.float64):
    from inspector.session import Inputs, load_evaluator

    return load_evaluator(
        Inputs(draft_dir, [str(sample_dir)]), device="cpu", dtype=dtype, ttt_steps=ttt_steps
    )


def _grid(topks=(1, 2, 4), tokens=(2, 3, 5, 8, 16)):
    specs, _ = sweep_grid(range(1, 5), topks, tokens)
    return specs


def assert_equal_to_separate_replays(
    ev, specs, engine=None, limit=None, distinct=0, names=("train", "serve")
):
    """Every (wiring, setting) of the sweep, sample by sample and round by round, equals a
    `Replayer` run with that setting alone; returns the sweep's report."""
    wirings = [ev.wiring(n) for n in names]
    report = run_sweep(ev, specs, wirings, engine=engine, names=list(names), limit=limit)
    assert len(report.rows) == len(specs) * len(wirings)
    for row in report.rows:
        alone = Replayer(ev, row.spec, engine)
        want = alone.run([row.accept.wiring], limit=limit).wirings[0]
        assert row.engine is alone.engine
        assert len(row.accept.per_sample) == len(want.per_sample) > 0
        for got, exp in zip(row.accept.per_sample, want.per_sample, strict=True):
            for f in ROUND_FIELDS:
                assert np.array_equal(getattr(got, f), getattr(exp, f)), (row.spec, got.index, f)
        g, w = row.accept.stats, want.stats
        assert (g.rounds, g.accepted, g.emitted, g.at_least) == (
            w.rounds,
            w.accepted,
            w.emitted,
            w.at_least,
        )
        assert g.accept_length == w.accept_length
    # The check has teeth where the draft accepts something: the settings of one wiring do not
    # all agree, so a selection that took another setting's tree would show.
    figures = {
        (r.accept.stats.rounds, r.accept.stats.accepted)
        for r in report.rows
        if r.accept.name == names[0]
    }
    assert len(figures) >= distinct
    return report


def _cut_demo(demo, out, n=3, keep=40, cont=0, finishes=("stop", "length")):
    """The demo's first `n` training samples cut `keep` tokens past their prompts (short, so
    the separate replays stay fast), the next `cont` tokens written as the target's
    continuation past the stop, as capture writes it (the demo's samples are the target's)."""
    out.mkdir()
    for i in range(n):
        d = torch.load(demo.train_samples / f"data_{i}.pt")
        t = int(torch.nonzero(d["loss_mask"])[0, 0]) + keep
        rec = {
            "input_ids": d["input_ids"][:t].clone(),
            "hidden_states": [x[:t].clone() for x in d["hidden_states"]],
            "loss_mask": d["loss_mask"][:t].clone(),
        }
        if cont:
            rec["continuation_ids"] = d["input_ids"][t : t + cont].clone()
            rec["continuation_hidden_states"] = [
                x[t : t + cont].clone() for x in d["hidden_states"]
            ]
            rec["finish_reason"] = finishes[i % len(finishes)]
        torch.save(rec, out / f"data_{i}.pt")
    return out


def test_one_beam_gives_every_setting_of_its_topk(demo):
    """tree_accepts_many of a grid (one beam per topk) equals tree_accepts of each setting,
    which test_serving_replay holds against direct per-round, per-node rounds."""
    from inspector.serving.tree_forward import tree_accepts, tree_accepts_many

    ev = _evaluator(demo.draft, demo.train_samples, ttt_steps=1, dtype="float32")
    w = ev.wiring("train")
    sample = ev.samples[0]
    h, ids = ev.fc_output(0, w), sample.input_ids
    p = int(torch.nonzero(sample.loss_mask)[0, 0])
    starts = torch.arange(p, p + 24)
    for k in (1, 2, 3):
        specs = [s for s in _grid((k,), (2, 3, 5, 9, 14, 40)) if s.topk == k]
        got = tree_accepts_many(ev.draft, h, ids, specs, starts=starts)
        want = [tree_accepts(ev.draft, h, ids, s, starts=starts) for s in specs]
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
        # teeth: the settings' counts differ, so a wrong tree shows
        assert len({tuple(w.tolist()) for w in want}) > len(specs) // 2


def test_sweep_equals_separate_replays_chains_from_ttt_and_trees(synthetic_set):
    ev = _evaluator(*synthetic_set, ttt_steps=4)  # every chain reads the TTT predictions
    specs = _grid((1, 2, 4), (3, 8))
    assert {s.topk for s in specs} == {1, 2, 4}
    assert sum(s.is_chain for s in specs) == 4 and len(specs) > 12
    # (this random draft accepts little: the demo's tests below have the teeth)
    report = assert_equal_to_separate_replays(ev, specs, limit=2, names=("train",))
    assert {r.engine for r in report.rows if r.spec.is_chain} == {Engine.VLLM}
    assert {r.engine for r in report.rows if not r.spec.is_chain} == {Engine.SGLANG}


def test_sweep_equals_separate_replays_with_chains_past_the_ttt_steps(synthetic_set):
    # chains of 1-2 steps read the predictions, 3-4 run the one-branch tree: one group, mixed
    ev = _evaluator(*synthetic_set, ttt_steps=2)
    assert_equal_to_separate_replays(
        ev, _grid((1, 3), (2, 7, 13)), engine=Engine.SGLANG, limit=2, names=("train",)
    )


def test_sweep_equals_separate_replays_on_the_demo(demo, tmp_path):
    cut = _cut_demo(demo, tmp_path / "cut", n=2)
    ev = _evaluator(demo.draft, cut, ttt_steps=4, dtype="float32")
    specs = _grid((1, 2, 4), (4, 16))
    assert len(specs) == 14
    # the demo's draft accepts: most settings give their own (rounds, accepted)
    assert_equal_to_separate_replays(ev, specs, distinct=8)


def test_sweep_equals_separate_replays_past_the_stop(demo, tmp_path):
    """Requests with the target's continuation past their stops (one by EOS, one by length):
    the deepest setting drafts every late start, each setting keeps its own (SGLang's round
    after the stop included)."""
    cut = _cut_demo(demo, tmp_path / "cut", n=2, keep=30, cont=8)
    ev = _evaluator(demo.draft, cut, ttt_steps=2, dtype="float32")
    assert ev.samples[0].continuation is not None
    report = assert_equal_to_separate_replays(
        ev, _grid((1, 4), (3, 8)), engine=Engine.SGLANG, distinct=6
    )
    assert any(r.accept.stats.after_stop for r in report.rows)


def test_grid_skips_what_draftspec_refuses_and_vllm_trees():
    specs, skipped = sweep_grid([1, 2], [1, 2], [3, 4, 8])
    # a chain is one setting per steps; topk 2: 1 step has 2 candidates (N <= 3), 2 steps 6
    assert [(s.steps, s.topk, s.draft_tokens) for s in specs] == [
        (1, 1, 2),
        (2, 1, 3),
        (1, 2, 3),
        (2, 2, 3),
        (2, 2, 4),
    ]
    assert skipped == [
        "steps 1 topk 2 draft tokens 4",
        "steps 1 topk 2 draft tokens 8",
        "steps 2 topk 2 draft tokens 8",
    ]
    specs, skipped = sweep_grid([3], [1, 4], [8], engine=Engine.VLLM)
    assert [s.topk for s in specs] == [1] and skipped == ["topk 4: vLLM drafts chains only"]
    with pytest.raises(InputError):
        sweep_grid([1], [4], [16])


def test_cost_model_parses_and_prices_a_round():
    assert CostModel.parse(None) == CostModel(0.05, 1.0, 0.0)
    c = CostModel.parse("draft=0.1, per_token=0.02")
    assert c == CostModel(0.1, 1.0, 0.02)
    spec = DraftSpec(3, 4, 8)
    assert c.round_cost(spec) == pytest.approx(3 * 0.1 + 1.0 + 0.02 * 7)
    assert c.speedup(2.88, spec) == pytest.approx(2.88 / 1.44)
    assert c.speedup(None, spec) is None
    for bad in ("draft", "draft=x", "speed=1", "draft=-1", "verify=0"):
        with pytest.raises(InputError):
            CostModel.parse(bad)


def test_ranks_and_recommendation_follow_the_cost_model(synthetic_set):
    ev = _evaluator(*synthetic_set, ttt_steps=4)
    specs = _grid((1, 4), (4, 16))
    w = [ev.wiring("train")]
    free = run_sweep(ev, specs, w, cost=CostModel(0.0, 1.0, 0.0))
    dear = run_sweep(ev, specs, w, cost=CostModel(0.5, 1.0, 0.5))
    for rep in (free, dear):
        rows = rep.of(rep.wirings()[0])
        assert sorted(r.rank_speedup for r in rows) == list(range(1, len(rows) + 1))
        best = rep.best(rep.wirings()[0])
        assert best is not None and best.rank_speedup == 1
        assert best.speedup == max(r.speedup for r in rows)
        d = rep.to_dict()
        assert d["recommendation"][rep.wirings()[0]]["flags"] == best.spec.flags()
        assert d["config"]["cost"] == rep.cost.to_dict()
    # free drafting and verification: speedup is the accept length, same order
    rows = free.of(free.wirings()[0])
    assert all(r.speedup == r.accept_length for r in rows)
    assert [r.rank_speedup for r in rows] == [r.rank_accept for r in rows]
    # dear tokens: the best setting verifies fewer tokens than the free one's
    assert (
        dear.best(dear.wirings()[0]).spec.draft_tokens
        <= free.best(free.wirings()[0]).spec.draft_tokens
    )
