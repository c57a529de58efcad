"""The batched replay of speculative decoding against a direct per-round, per-node one."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from serving_oracle import direct_round, random_draft

from inspector.model import fc_project
from inspector.serving.spec import DraftSpec
from inspector.serving.tree_forward import tree_accepts


def _sample(draft, t: int, seed: int, *, repeat: bool = True):
    g = torch.Generator().manual_seed(seed)
    v = draft.config.vocab_size
    ids = torch.randint(0, v, (t,), generator=g)
    if repeat:
        # Tokens the draft itself predicts make long accepted runs likelier than random ones.
        ids[t // 2 :] = ids[: t - t // 2]
    slots = torch.randn(t, 3 * draft.config.hidden_size, generator=g, dtype=torch.float64)
    return fc_project(draft, slots.to(draft.dtype)), ids


CASES = [
    # steps, topk, draft_tokens, draft options
    (3, 1, None, {}),
    (3, 4, 8, {}),
    (2, 2, 3, {}),
    (4, 3, 12, {"layers": 2}),
    (3, 2, 7, {"norm_output": True}),
    (1, 4, 5, {}),
    (3, 4, 37, {}),  # every candidate in the tree
]


@pytest.mark.parametrize(("steps", "topk", "n", "opts"), CASES)
def test_batched_replay_equals_direct_rounds(steps, topk, n, opts):
    draft = random_draft(seed=steps * 10 + topk, **opts)
    spec = DraftSpec(steps, topk, n)
    t = 14
    h, ids = _sample(draft, t, seed=topk)
    got = tree_accepts(draft, h, ids, spec).tolist()
    want = [0] + [
        direct_round(draft, h, ids, start, steps, topk, spec.draft_tokens)[0]
        for start in range(1, t)
    ]
    assert got == want


@pytest.fixture(scope="module")
def synthetic_set(tmp_path_factory):
    from inspector.synthetic import SyntheticSpec, write_synthetic

    return write_synthetic(
        tmp_path_factory.mktemp("syn"), SyntheticSpec(size="tiny", n_samples=3, seq_len=24)
    )


def _evaluator(paths, steps):
    from inspector.session import Inputs, load_evaluator

    draft_dir, sample_dir = paths
    return load_evaluator(
        Inputs(draft_dir, [str(sample_dir)]), device="cpu", dtype=torch.float64, ttt_steps=steps
    )


def test_the_chain_from_ttt_predictions_equals_the_tree_code_with_one_branch(synthetic_set):
    from inspector.serving.replay import Replayer

    ev = _evaluator(synthetic_set, 3)
    spec = DraftSpec(3)
    ttt = Replayer(ev, spec)
    ev1 = _evaluator(synthetic_set, 1)  # fewer TTT steps than the chain: the tree path runs
    tree = Replayer(ev1, spec)
    for w in ("train", "serve"):
        for i in range(3):
            a = ttt.a_by_start(i, ev.wiring(w))
            b = tree.a_by_start(i, ev1.wiring(w))
            assert a.tolist() == b.tolist()
            if i > 0:
                continue  # the slow oracle on one sample per wiring
            h = ev.fc_output(i, ev.wiring(w))
            ids = ev.samples[i].input_ids
            want = [0] + [
                direct_round(ev.draft, h, ids, n, 3, 1, 4)[0] for n in range(1, ids.shape[0])
            ]
            assert a.tolist() == want


def test_replayer_pools_rounds_and_follows_the_json_contract(synthetic_set):
    from inspector.serving.replay import Replayer

    ev = _evaluator(synthetic_set, 1)
    spec = DraftSpec(3, 2, 5)
    rep = Replayer(ev, spec)
    report = rep.run([ev.wiring("train"), ev.wiring("serve")], names=["train", "serve"])
    d = report.to_dict()
    assert d["config"] == {
        "steps": 3,
        "topk": 2,
        "draft_tokens": 5,
        "mode": "replay",
        "engine": "sglang",
        "overlap_scheduler": True,
    }
    assert d["samples"] == 3
    for w in d["wirings"]:
        sample_rounds = [len(s["accepted"]) for s in w["per_sample"]]
        assert w["rounds"] == sum(sample_rounds) > 0
        assert w["accepted"] == sum(sum(s["accepted"]) for s in w["per_sample"])
        assert w["accept_length"] == pytest.approx(1 + w["accepted"] / w["rounds"])
        # samples without a continuation: an overlap round after each length stop whose last
        # round emitted more than one token, counted as a lower bound
        after = w["rounds_after_stop"]
        assert after == sum(s.get("rounds_after_stop", 0) for s in w["per_sample"])
        assert w["emitted_per_round"] == pytest.approx(w["emitted"] / (w["rounds"] - after))
        assert len(w["per_depth"]) == 3 and w["per_depth"] == sorted(w["per_depth"], reverse=True)
        assert w["synthetic_acceptance_rates"] == pytest.approx(w["per_depth"], abs=1e-6)
        assert sum(b["rounds"] for b in w["by_position"]) == w["rounds"]
    # every sample: its rounds cover its masked run exactly (synthetic masks: one run each)
    for i in range(3):
        r = rep.replay(i, ev.wiring("train"))
        mask = ev.samples[i].loss_mask.numpy()
        p = int(np.flatnonzero(mask)[0])
        assert r.starts[0] == p and int(r.emitted.sum()) == len(mask) - 1 - p
        assert r.emitted[r.after_stop].sum() == 0
        assert rep.replay(i, ev.wiring("train")) is r  # cached


def test_evals_accept_length_is_the_replayed_chain(synthetic_set):
    from inspector.serving.replay import Replayer

    ev = _evaluator(synthetic_set, 2)
    w = ev.wiring("train")
    report = ev.run([w])
    wr = report.wirings[0]
    replay = Replayer(ev, DraftSpec(2)).run([w]).wirings[0].stats
    assert wr.accept.rounds == replay.rounds > 0
    assert wr.acceptance_length == pytest.approx(replay.accept_length)
    assert wr.accept.at_least == replay.at_least
    d = wr.to_dict()
    assert d["acceptance_length"] == pytest.approx(replay.accept_length)
    # the old closed form is kept under its own name
    assert d["acceptance_length_estimate"] == pytest.approx(wr.acceptance_length_estimate)
    assert d["accept"]["rounds"] == replay.rounds


@pytest.mark.parametrize("opts", [{}, {"layers": 2}])
def test_sglang_kv_mode_equals_the_direct_rounds_with_row_kv(opts):
    """SGLang's topk > 1 draft attention (each beam row reads its own row's earlier KV): the
    batched replay equals the direct rounds run that way, and differs from the exact mask."""
    draft = random_draft(seed=7, **opts)
    t = 14
    h, ids = _sample(draft, t, seed=3)
    spec = DraftSpec(4, 3, 12, kv="sglang")
    got = tree_accepts(draft, h, ids, spec).tolist()
    want = [0] + [direct_round(draft, h, ids, n, 4, 3, 12, kv="sglang")[0] for n in range(1, t)]
    assert got == want
    trees_differ = any(
        direct_round(draft, h, ids, n, 4, 3, 12, kv="sglang")[1]
        != direct_round(draft, h, ids, n, 4, 3, 12)[1]
        for n in range(1, t)
    )
    assert trees_differ  # the approximation changes some trees on this draft


@pytest.mark.parametrize(
    ("spec", "cfg"),
    [
        (DraftSpec(3), {}),
        (DraftSpec(3, 4, 8), {}),
        (DraftSpec(4, 3, 12, kv="sglang"), {}),
        (DraftSpec(3, 2, 6), {"norm_before_residual": True}),
        (DraftSpec(3, 2, 6), {"sliding_windows": (4,)}),
        (DraftSpec(3, 2, 6), {"norm_output": True}),
    ],
)
def test_rounds_at_chosen_starts_equal_every_start(spec, cfg):
    """The replay drafts only where rounds start (after the prompt): every other row's step 0
    is keys and values only. Those trees equal the ones computed at every row (checked against
    the direct rounds above), and so do the accept counts; elsewhere a_by_start is 0."""
    from dataclasses import replace

    from inspector.serving.tree_forward import RowTrees

    draft = random_draft(seed=11)
    draft = replace(draft, config=replace(draft.config, **cfg))
    t = 16
    h, ids = _sample(draft, t, seed=5)
    starts = torch.tensor([3, 4, 5, 9, 10, 15])
    rows = starts - 1
    every = RowTrees(draft, h[: t - 1], ids[1:t], spec).trees()
    some = RowTrees(draft, h[: t - 1], ids[1:t], spec, rows=rows).trees()
    assert some.tokens.tolist() == every.tokens[rows].tolist()
    assert some.parent.tolist() == every.parent[rows].tolist()
    assert some.depth.tolist() == every.depth[rows].tolist()
    # The every-row path merges its diagonal keys in float32 (attend's fused merge), the chosen
    # rows' path stays in float64: a few float32 roundings of log-probs of this size.
    tol = 8 * torch.finfo(torch.float32).eps * float(every.score.abs().max().clamp(min=1))
    torch.testing.assert_close(some.score, every.score[rows], rtol=0, atol=tol)
    got = tree_accepts(draft, h, ids, spec, starts=starts)
    assert got[starts].tolist() == tree_accepts(draft, h, ids, spec)[starts].tolist()
    others = torch.ones(t, dtype=torch.bool)
    others[starts] = False
    assert (got[others] == 0).all()


def test_round_starts_are_the_runs_but_their_last_token():
    from inspector.serving.replay import round_starts

    mask = np.array([0, 0, 1, 1, 1, 0, 1, 1, 0, 1], dtype=np.int64)
    # runs (2, 4), (6, 7), (9, 9): a round starts after x_n for n in P..E-1
    assert round_starts(mask).tolist() == [2, 3, 6]
    assert round_starts(np.zeros(5)).size == 0


# A depth-4 node's keys come from its lineage gathered twice: every candidate in the tree.
TREE_CASES = [c for c in CASES if c[0] >= 3 and c[1] >= 2] + [(4, 2, 15, {})]


@pytest.mark.parametrize(("steps", "topk", "n", "opts"), TREE_CASES)
def test_every_rows_tree_is_the_direct_rounds_tree(steps, topk, n, opts):
    """Not only the accepted counts (random drafts rarely accept past depth 2) but every node of
    every row's tree, as target ids in candidate order: the ancestors' keys a depth-3 node reads
    (its lineage) decide its children."""
    from inspector.serving.tree_forward import RowTrees

    draft = random_draft(seed=steps * 10 + topk, **opts)
    spec = DraftSpec(steps, topk, n)
    t = 12
    h, ids = _sample(draft, t, seed=topk)
    trees = RowTrees(draft, h[: t - 1], ids[1:t], spec).trees()
    got = draft.vocab.draft_to_target[trees.tokens]
    for start in range(1, t):
        scores: list[float] = []
        _, want = direct_round(
            draft, h, ids, start, steps, topk, spec.draft_tokens, scores_out=scores
        )
        assert got[start - 1].tolist() == want, start
        # The heads' log-probs are float32 (the oracle's float64): each of a node's <= steps
        # terms carries a few float32 roundings at the score's scale.
        want_s = torch.tensor(scores, dtype=torch.float64)
        tol = 4 * steps * torch.finfo(torch.float32).eps * (1 + want_s.abs())
        assert ((trees.score[start - 1].double() - want_s).abs() <= tol).all(), start


@pytest.mark.parametrize("window", [2, 5])
def test_a_sliding_window_shapes_the_trees_as_the_direct_rounds(window):
    """Every level's cache carries the layer's window: the trees are the direct rounds' whose
    nodes see the committed rows at most window-1 back (and their ancestors), not the
    unwindowed trees."""
    from dataclasses import replace

    from inspector.serving.tree_forward import RowTrees

    base = random_draft(seed=5)
    draft = replace(base, config=replace(base.config, sliding_windows=(window,)))
    spec = DraftSpec(3, 2, 6)
    t = 12
    h, ids = _sample(draft, t, seed=2)
    got = draft.vocab.draft_to_target[RowTrees(draft, h[: t - 1], ids[1:t], spec).trees().tokens]
    plain = base.vocab.draft_to_target[RowTrees(base, h[: t - 1], ids[1:t], spec).trees().tokens]
    for start in range(1, t):
        _, want = direct_round(draft, h, ids, start, 3, 2, 6, window=window)
        assert got[start - 1].tolist() == want, start
    assert not torch.equal(got, plain)


@pytest.mark.parametrize(("steps", "topk", "n"), [(3, 1, None), (3, 2, 11)])  # every node
def test_a_round_never_counts_past_the_samples_end(steps, topk, n):
    """A draft that always proposes the sample's one token (a zero lm_head: every logit ties,
    the lowest draft id wins) accepts every drafted token, but a round after x_0..x_n counts
    at most the T-1-n tokens the sample holds after it (truth past the end is clamped, never
    matched)."""
    from dataclasses import replace

    base = random_draft(seed=7)
    w = dict(base.weights)
    w["lm_head.weight"] = torch.zeros_like(w["lm_head.weight"])
    draft = replace(base, weights=w)
    x = int(draft.vocab.draft_to_target[0])
    t = 10
    ids = torch.full((t,), x, dtype=torch.long)
    g = torch.Generator().manual_seed(1)
    slots = torch.randn(t, 3 * draft.config.hidden_size, generator=g, dtype=torch.float64)
    h = fc_project(draft, slots.to(draft.dtype))
    got = tree_accepts(draft, h, ids, DraftSpec(steps, topk, n)).tolist()
    assert got == [0] + [min(steps, t - 1 - s) for s in range(1, t)]
