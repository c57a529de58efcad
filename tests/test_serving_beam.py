"""The tree selection and the greedy walk on hand-built cases, and SGLang's own test vectors."""

from __future__ import annotations

import math

import pytest
import torch

from inspector.errors import InputError
from inspector.serving.beam import accepted_path, build_trees, stable_topk
from inspector.serving.spec import DraftSpec


def test_stable_topk_orders_ties_by_index():
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    v, i = stable_topk(x, 2)
    assert i.tolist() == [[1, 2], [0, 1]]
    assert v.tolist() == [[3.0, 3.0], [0.0, 0.0]]
    v, i = stable_topk(x, 4)
    assert i.tolist() == [[1, 2, 4, 3], [0, 1, 2, 3]]
    # batched leading dims, and k past the width
    v, i = stable_topk(x[None].expand(3, -1, -1), 9)
    assert i.shape == (3, 2, 5) and i[2, 0].tolist() == [1, 2, 4, 3, 0]


def test_stable_topk_on_random_rows_equals_a_full_stable_sort():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 5, (50, 40), generator=g).float()  # many ties
    v, i = stable_topk(x, 7)
    sv, si = x.sort(dim=-1, descending=True, stable=True)
    assert torch.equal(i, si[:, :7]) and torch.equal(v, sv[:, :7])


def _fake_expand(levels):
    """An expand() that returns fixed children per level: levels[l] = (logp [R,K,K], ids)."""
    calls = []

    def expand(level, parent, tokens):
        calls.append((level, parent.clone(), tokens.clone()))
        return levels[level]

    return expand, calls


def test_beam_keeps_the_global_top_k_and_the_tree_the_best_nodes():
    lg = math.log
    # K = 2, S = 3. Root children: tokens 5 (p .6) and 7 (p .4).
    root = (torch.tensor([[lg(0.6), lg(0.4)]]), torch.tensor([[5, 7]]))
    # level 1 children: of 5: 1 (.5), 2 (.5 -> tie, lower index first); of 7: 3 (.9), 4 (.1)
    l1 = (
        torch.tensor([[[lg(0.5), lg(0.5)], [lg(0.9), lg(0.1)]]]),
        torch.tensor([[[1, 2], [3, 4]]]),
    )
    # cumulative: 5-1 .30, 5-2 .30, 7-3 .36, 7-4 .04 -> beam (7-3, 5-1): .36 first, tie .30 -> 5-1
    l2 = (
        torch.tensor([[[lg(0.8), lg(0.2)], [lg(0.7), lg(0.3)]]]),
        torch.tensor([[[8, 9], [10, 11]]]),
    )
    # level 2 cumulative: 7-3-8 .288, 7-3-9 .072, 5-1-10 .21, 5-1-11 .09
    expand, calls = _fake_expand({1: l1, 2: l2})
    spec = DraftSpec(3, 2, 6)
    tr = build_trees(root, expand, spec)
    # level 2 is run for the beam (3 with parent beam index 1 = token 7, then 1 with parent 0)
    assert calls[1][1].tolist() == [[1, 0]] and calls[1][2].tolist() == [[3, 1]]
    assert calls[0][1].dtype == calls[1][1].dtype == torch.long  # beam indices gather rows
    assert tr.parent.dtype == tr.depth.dtype == tr.tokens.dtype == torch.long
    # candidates: 5 .6, 7 .4 | 1 .3, 2 .3, 3 .36, 4 .04 | 8 .288, 9 .072, 10 .21, 11 .09
    # best 5: .6 (5), .4 (7), .36 (3), .30 (1), .30 (2) -> candidate order 0, 1, 2, 3, 4
    assert tr.tokens.tolist() == [[5, 7, 1, 2, 3]]
    assert tr.parent.tolist() == [[-1, -1, 0, 0, 1]]
    assert tr.depth.tolist() == [[1, 1, 2, 2, 2]]
    spec = DraftSpec(3, 2, 7)
    tr = build_trees(root, _fake_expand({1: l1, 2: l2})[0], spec)
    # one more node: 7-3-8 (.288) beats .21; its parent 3 is node 4 of the tree
    assert tr.tokens.tolist() == [[5, 7, 1, 2, 3, 8]]
    want = [0.6, 0.4, 0.3, 0.3, 0.36, 0.288]  # cumulative probabilities
    assert tr.score.exp()[0].tolist() == pytest.approx(want)
    assert tr.parent.tolist() == [[-1, -1, 0, 0, 1, 4]]
    assert tr.depth.tolist() == [[1, 1, 2, 2, 2, 3]]


def test_accepted_path_follows_the_matching_child_and_stops_at_the_limit():
    tokens = torch.tensor([[5, 7, 1, 2, 3, 8]] * 4)
    parent = torch.tensor([[-1, -1, 0, 0, 1, 4]] * 4)
    truth = torch.tensor([[7, 3, 8], [7, 3, 8], [5, 2, 9], [6, 3, 8]])
    a, at = accepted_path(tokens, parent, truth, torch.tensor([3, 2, 3, 3]))
    assert a.tolist() == [3, 2, 2, 0] and a.dtype == at.dtype == torch.long
    assert at.tolist() == [5, 4, 3, -1]
    # a token that appears in the tree but not under the accepted node does not count
    a, _ = accepted_path(tokens, parent, torch.tensor([[5, 3, 8]] * 4), torch.full((4,), 3))
    assert a.tolist() == [1] * 4


@pytest.mark.parametrize(
    ("args", "field", "message"),
    [
        ((0,), "--steps", "0: must be at least 1"),
        ((2, 0), "--topk", "0: must be at least 1"),
        ((3, 1, 8), "--draft-tokens", "8: a chain (topk 1) verifies steps + 1 = 4 tokens"),
        ((3, 4), "--draft-tokens", "required with --topk 4"),
        (
            (2, 2, 1),
            "--draft-tokens",
            "1: a tree of 2 steps and topk 2 has 6 candidate nodes, so 2..7 tokens (the root included)",
        ),
    ],
)
def test_draft_spec_refusals_name_the_flag(args, field, message):
    with pytest.raises(InputError) as e:
        DraftSpec(*args)
    assert e.value.field.flag == field and e.value.message == message  # a setting, as its flag


def test_draft_spec_accepts_every_engine_setting_at_the_bounds():
    assert DraftSpec(1).draft_tokens == 2 and DraftSpec(1).is_chain
    assert DraftSpec(3, 1, 4).draft_tokens == 4  # a chain's N given explicitly
    assert DraftSpec(2, 2, 2).draft_tokens == 2 and DraftSpec(2, 2, 7).draft_tokens == 7
    assert DraftSpec(2, 2, 7).mode == "tree" and DraftSpec(2).mode == "chain"
    assert DraftSpec(3, 2, 5).to_dict() == {"steps": 3, "topk": 2, "draft_tokens": 5}
    assert DraftSpec(3, 2, 5, kv="sglang").to_dict()["kv"] == "sglang"
    with pytest.raises(InputError) as e:
        DraftSpec(3, kv="vllm")
    assert e.value.field == "kv" and e.value.message == "'vllm': one of exact, sglang"
    assert DraftSpec(3, 4, 8).flags() == (
        "SGLang --speculative-num-steps 3 --speculative-eagle-topk 4 "
        "--speculative-num-draft-tokens 8"
    )
    assert DraftSpec(2).flags().endswith("; vLLM num_speculative_tokens 2")


def test_draft_spec_follows_the_engines_flags():
    assert DraftSpec(5).draft_tokens == 6
    assert DraftSpec(5, 8, 32).candidates == 8 + 4 * 64
    with pytest.raises(InputError, match="steps \\+ 1 = 4"):
        DraftSpec(3, 1, 8)
    with pytest.raises(InputError, match="required with --topk 4"):
        DraftSpec(3, 4)
    with pytest.raises(InputError, match="2..37 tokens"):
        DraftSpec(3, 4, 38)
    with pytest.raises(InputError, match="at least 1"):
        DraftSpec(0)
    assert "vLLM num_speculative_tokens 3" in DraftSpec(3).flags()
    assert "--speculative-eagle-topk 4" in DraftSpec(3, 4, 8).flags()


# SGLang's own conformance vectors for its tree (python/sglang/test: build_eagle_tree,
# `test_build_tree_kernel_efficient`): per step, the cumulative scores (products of
# probabilities) and tokens of every candidate, two requests, topk 4, 4 steps, 8 draft tokens.
SG_SCORES = [
    [
        [[7.1127e-01, 2.8292e-01, 2.2995e-03, 1.7357e-03]],
        [[9.7476e-01, 2.2219e-02, 6.5031e-04, 1.3212e-04]],
    ],
    [
        [
            [6.9142e-01, 1.2863e-02, 1.6873e-03, 1.1871e-03],
            [2.4787e-01, 1.8818e-02, 1.4204e-02, 9.2235e-04],
            [2.2971e-03, 1.6700e-06, 1.8737e-07, 8.3146e-08],
            [1.2771e-03, 2.4374e-04, 1.7832e-04, 1.1947e-05],
        ],
        [
            [8.4832e-02, 6.6068e-02, 5.8304e-02, 5.7851e-02],
            [2.3616e-03, 1.1243e-03, 5.4368e-04, 2.7768e-04],
            [2.5286e-04, 1.5578e-04, 2.8817e-05, 1.2888e-05],
            [1.2834e-04, 2.5417e-06, 1.1279e-06, 1.6088e-08],
        ],
    ],
    [
        [
            [6.6438e-01, 2.6997e-02, 2.4236e-05, 4.0821e-06],
            [2.4402e-01, 2.8409e-03, 5.0935e-04, 2.9022e-04],
            [1.6178e-02, 2.0567e-03, 4.5892e-04, 3.0034e-05],
            [1.3023e-02, 5.0497e-04, 3.6371e-04, 8.7750e-05],
        ],
        [
            [2.3263e-02, 2.0054e-02, 9.3990e-03, 2.7783e-03],
            [6.4156e-02, 5.5506e-04, 1.0429e-04, 9.7211e-05],
            [4.9950e-02, 5.0630e-03, 9.0068e-04, 3.3656e-04],
            [7.5817e-03, 8.5731e-04, 6.9972e-04, 6.0793e-04],
        ],
    ],
    [
        [
            [6.6420e-01, 1.0525e-04, 6.5864e-05, 1.2253e-06],
            [1.3019e-01, 1.0461e-01, 5.2083e-03, 1.6777e-03],
            [2.0103e-02, 6.7335e-03, 1.2625e-04, 1.0364e-05],
            [1.5142e-02, 7.0819e-04, 9.6595e-05, 8.7951e-05],
        ],
        [
            [5.8608e-02, 1.8840e-03, 7.8535e-04, 4.4400e-04],
            [1.2185e-02, 2.0684e-03, 1.7418e-03, 1.4327e-03],
            [6.2455e-03, 6.1487e-03, 2.6862e-03, 1.8034e-03],
            [1.8590e-03, 1.6151e-03, 1.2481e-03, 3.6038e-04],
        ],
    ],
]
SG_TOKENS = [
    [[29896, 29906, 29900, 29945], [13, 2, 29871, 28956]],
    [
        [
            29889,
            29974,
            29945,
            29900,
            29974,
            29922,
            29930,
            29958,
            29889,
            29974,
            29930,
            29945,
            29974,
            29922,
            29930,
            29958,
        ],
        [22550, 4136, 16492, 8439, 29871, 2, 3001, 13, 2, 13, 29906, 29946, 2, 13, 29871, 259],
    ],
    [
        [
            29946,
            29945,
            29953,
            29906,
            29896,
            29945,
            29900,
            29906,
            29896,
            29945,
            29906,
            29953,
            29896,
            29945,
            29906,
            29946,
        ],
        [
            29871,
            2,
            29901,
            29889,
            29871,
            2,
            395,
            259,
            29901,
            29871,
            2,
            29889,
            3001,
            1234,
            7146,
            2186,
        ],
    ],
    [
        [
            29946,
            29974,
            29945,
            29930,
            29889,
            29922,
            29974,
            29930,
            29974,
            29946,
            29930,
            29922,
            29889,
            29974,
            29945,
            29922,
        ],
        [
            29941,
            29906,
            2,
            29946,
            29871,
            450,
            319,
            14990,
            29946,
            29941,
            2,
            29906,
            29871,
            2,
            3001,
            13,
        ],
    ],
]


def test_tree_selection_reproduces_sglangs_test_vectors():
    k = 4
    cum = [torch.tensor(s, dtype=torch.float64).log().reshape(2, -1) for s in SG_SCORES]
    toks = [torch.tensor(t).reshape(2, -1) for t in SG_TOKENS]
    beams = [stable_topk(c, k) for c in cum]  # each level's beam, as SGLang's select_top_k

    def expand(level, parent, tokens):
        # children's log-probs relative to their parent's cumulative score
        prev_score, prev_idx = beams[level - 1]
        assert torch.equal(tokens, toks[level - 1].gather(1, prev_idx))
        return cum[level].reshape(2, k, k) - prev_score[:, :, None], toks[level].reshape(2, k, k)

    tr = build_trees((cum[0], toks[0]), expand, DraftSpec(4, 4, 8))
    assert tr.tokens.tolist() == [
        [29896, 29906, 29889, 29974, 29946, 29896, 29946],
        [13, 22550, 4136, 16492, 8439, 29871, 29941],
    ]
    # SGLang's positions (seq_len + depth) and retrieve_next_token / next_sibling lists, as
    # parents: request 0 is root -> 1, 2; 1 -> 3 -> 5 -> 7; 2 -> 4 -> 6
    assert tr.depth.tolist() == [[1, 1, 2, 2, 3, 3, 4], [1, 2, 2, 2, 2, 3, 4]]
    assert tr.parent.tolist() == [[-1, -1, 0, 1, 2, 3, 4], [-1, 0, 0, 0, 0, 2, 5]]


@pytest.mark.parametrize("topk", [1, 2, 3])
def test_every_shallower_tree_selects_from_the_deepest_beams_candidates(topk):
    """One 4-step beam gives the tree of every (steps, draft_tokens) of its topk: equal, tensor
    for tensor, to building that tree on its own. Random log-probs with many ties (quantised),
    so a selection that broke ties differently, or took candidates past an s-step beam, fails."""
    from inspector.serving.beam import beam_candidates

    g = torch.Generator().manual_seed(topk)
    r, k, s_max = 6, topk, 4

    def logp(*shape):
        return -(torch.randint(1, 4, shape, generator=g).double() / 2)

    root = (logp(r, k), torch.randint(0, 50, (r, k), generator=g))
    levels = {
        lv: (logp(r, k, k), torch.randint(0, 50, (r, k, k), generator=g)) for lv in range(1, s_max)
    }
    cands = beam_candidates(root, _fake_expand(levels)[0], k, s_max)
    assert cands.steps == s_max
    checked = 0
    for steps in range(1, s_max + 1):
        budgets = [None] if k == 1 else range(2, k + (steps - 1) * k * k + 2)
        for n in budgets:
            spec = DraftSpec(steps, k, n)
            want = build_trees(root, _fake_expand(levels)[0], spec)
            got = cands.select(steps, spec.draft_tokens)
            for f in ("tokens", "parent", "depth", "score"):
                assert torch.equal(getattr(got, f), getattr(want, f)), (steps, n, f)
            checked += 1
    assert checked == (4 if k == 1 else sum(k + (s - 1) * k * k for s in range(1, 5)))
    with pytest.raises(ValueError):
        cands.select(s_max + 1, 3)
