"""The live loop at a temperature (the demo's target), per engine rule: what it realises against
the expectation it computes round by round (`serving/expectation.py`).

Given each round's start, its accepted count has the mean and variance the rule gives
(`sampling.node_reach`, exact: `test_serving_sampling` holds it against an enumeration), so
z = (realised - expected) / sqrt(sum of the rounds' variances) is about N(0, 1) across seeds and
prompts when the loop verifies as the rule says. The stated interval: |z| < 4 (a false failure
about 6e-5 under the normal approximation). A loop that verified by another rule moves z by
many units: the test of that is the greedy-verification mutant below.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from inspector.engines import Engine  # noqa: E402
from inspector.errors import InputError  # noqa: E402
from inspector.serving.live import LiveSettings, live_accept  # noqa: E402
from inspector.serving.live_draft import LiveDraft  # noqa: E402
from inspector.serving.sampling_settings import Verification, VerifyRule  # noqa: E402
from inspector.serving.spec import DraftSpec  # noqa: E402

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"
TARGET, DRAFT, PROMPTS = DEMO / "target", DEMO / "draft", DEMO / "prompts.jsonl"


@pytest.fixture(scope="module")
def draft():
    from inspector.formats import load_draft

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # many small forwards: a second thread mostly waits on 2 cores
    yield load_draft(DRAFT, target=TARGET, dtype=torch.float32, device="cpu")
    torch.set_num_threads(threads)


CASES = [
    # (spec, engine, rule and thresholds, temperature, top_k, top_p)
    (DraftSpec(3), Engine.VLLM, Verification(VerifyRule.VLLM_ONEHOT), 0.6, 0, 1.0),
    (DraftSpec(3), Engine.VLLM, Verification(VerifyRule.VLLM_ONEHOT), 0.6, 20, 0.95),
    (
        DraftSpec(3, 3, 7),
        Engine.SGLANG,
        Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_single=0.5, threshold_acc=0.5),
        1.0,
        0,
        1.0,
    ),
    (DraftSpec(3), Engine.VLLM, Verification(VerifyRule.VLLM_PROBABILISTIC), 1.0, 0, 1.0),
    (DraftSpec(3), Engine.SGLANG, Verification(VerifyRule.SGLANG_REJECTION), 0.6, 0, 0.95),
]
IDS = ["onehot", "onehot-topk-topp", "sglang-tree-thresholds", "probabilistic", "rejection"]


@pytest.mark.parametrize(("spec", "engine", "rule", "t", "top_k", "top_p"), CASES, ids=IDS)
def test_the_loop_realises_the_expectation_of_its_rule(draft, spec, engine, rule, t, top_k, top_p):
    live = LiveSettings(
        spec=spec,
        max_new=40,
        wirings=["train"],
        temperature=t,
        top_k=top_k,
        top_p=top_p,
        verification=rule,
        seed=3,
        limit=4,
        engine=engine,
    )
    report = live_accept(draft, TARGET, PROMPTS, live)
    d = report.to_dict()
    assert d["config"]["sampling"] == {
        "temperature": t,
        "top_k": top_k,
        "top_p": top_p,
        "verification": rule.to_dict(),
    }
    w = d["wirings"][0]
    e = w["expected"]
    assert e["realised_accepted"] == w["accepted"]
    assert e["realised_accept_length"] == pytest.approx(w["accept_length"])
    assert 0 < e["expected_accepted"] < 3 * w["rounds"]
    assert e["z"] is not None and abs(e["z"]) < 4, e
    # the interval is around the expected figure, the per-position expectations add up
    assert e["ci_low"] <= e["accept_length"] <= e["ci_high"]
    assert sum(e["expected_accepted_per_pos"]) == pytest.approx(e["expected_accepted"])
    assert all(a >= b for a, b in zip(e["per_depth"], e["per_depth"][1:], strict=False))
    for s in w["per_sample"]:
        assert len(s["expected"]) == len(s["accepted"])


def test_a_wrong_rule_is_caught_by_z(draft, monkeypatch):
    """A loop that verified greedily while claiming temperature 1.0 (a mutant of the loop):
    the realised counts leave the rule's expectation far behind, |z| well past 4."""
    import inspector.serving.live_sequence as seq

    def greedy(probs, tokens, parent, v, uniform, categorical, q=None):
        cur, path = -1, []
        while True:
            best = int(probs[cur + 1].argmax())
            nxt = next((j for j, p in enumerate(parent) if p == cur and tokens[j] == best), None)
            if nxt is None:
                return path, best
            path.append(nxt)
            cur = nxt

    monkeypatch.setattr(seq, "sample_verify", greedy)
    live = LiveSettings(spec=DraftSpec(3), max_new=40, wirings=["train"], temperature=1.0, limit=4)
    report = live_accept(draft, TARGET, PROMPTS, live)
    z = report.wirings[0].expectation.z
    assert z is not None and abs(z) > 4, z


def test_a_sampled_chain_at_a_tiny_temperature_is_the_greedy_chain(draft):
    """The sampled-draft rules' chain runs its nodes as the beam does: at temperature 1e-6 every
    draw is the argmax, so the chain is `tree()`'s topk-1 chain token for token."""
    from inspector.capture.run import CaptureSettings, prepare
    from inspector.capture.transformers_target import TargetModel
    from inspector.formats.samples import v1_slot_info
    from inspector.model import fc_wired
    from inspector.serving.live import draft_ids
    from inspector.wiring import parse_wiring

    spec = DraftSpec(3)
    settings = CaptureSettings(draft=str(DRAFT), device="cpu")
    prep = prepare(TARGET, PROMPTS, settings, draft_ids=draft_ids(draft))
    model = TargetModel(prep.target, device="cpu")
    prompt = prep.records[0].prompt
    infos = v1_slot_info([None if s == "post-norm" else s for s in prep.plan.slots])
    w = parse_wiring("train", infos, draft.config.num_fc_blocks)
    with torch.inference_mode():
        _, f, _ = model.forward_cached(torch.tensor(prompt), prep.plan.slots)
        h = fc_wired(draft, [f[s].to(draft.dtype) for s in w.slots])
        ld = LiveDraft(draft, spec)
        ld.extend(h[:-1], torch.tensor(prompt[1:]))
        chain, q = ld.sampled_chain(1e-6, lambda p: int(p.argmax()))
        tree = ld.tree()
    assert chain.tokens.tolist() == tree.tokens.tolist()
    assert chain.parent.tolist() == [[-1, 0, 1]] and chain.depth.tolist() == [[1, 2, 3]]
    assert q.shape == (3, draft.config.draft_vocab_size)
    assert torch.allclose(q.sum(-1), torch.ones(3, dtype=q.dtype))


def test_rules_the_engine_does_not_have_are_refused(draft):
    tree = LiveSettings(spec=DraftSpec(3, 2, 5), max_new=8, wirings=["train"], temperature=1.0)
    with pytest.raises(InputError, match="not SGLang's rule"):
        live_accept(
            draft,
            TARGET,
            PROMPTS,
            replace(tree, verification=Verification(VerifyRule.VLLM_ONEHOT)),
        )
    with pytest.raises(InputError, match="verifies chains"):
        live_accept(
            draft,
            TARGET,
            PROMPTS,
            replace(tree, verification=Verification(VerifyRule.SGLANG_REJECTION)),
        )
