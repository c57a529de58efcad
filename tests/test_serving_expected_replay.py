"""The expectation at a temperature on saved samples (`serving/expected_replay.py`): each replayed
round's odds from the target's batched verification of the draft's trees.

Held three ways on the demo:
- against the live loop: on the sequences `accept --live --temperature --out` wrote, every round
  the replay takes is the loop's round, and its odds are the loop's (the loop verified the same
  tree against the same target, with a KV cache instead of one batched forward: float32
  rounding apart, 1e-4 on a probability);
- on the demo's held-out samples, which are the target's own continuations sampled at
  temperature 0.7: the realised walk is consistent with the expectation at 0.7 (|z| < 4, the
  stated interval), and not at 0.3 (the data is not what the target samples there);
- on the samples the draft was trained on: the draft has learnt their sampled tokens, so it
  accepts far more than the target's sampling would give (z > 4).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from inspector.cli import main  # noqa: E402

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"
TARGET, DRAFT = DEMO / "target", DEMO / "draft"
pytestmark = [
    pytest.mark.skipif(not (DRAFT / "config.json").is_file(), reason="assets/demo not built"),
    pytest.mark.usefixtures("one_thread"),
]


def _accept(capsys, samples, *extra) -> dict:
    capsys.readouterr()
    argv = ["accept", str(DRAFT), str(samples), "--target", str(TARGET), "--device", "cpu"]
    assert main([*argv, "--json", *map(str, extra)]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_replays_odds_are_the_live_loops(capsys, tmp_path):
    from inspector.formats import load_draft
    from inspector.serving.live import LiveSettings, live_accept
    from inspector.serving.spec import DraftSpec

    draft = load_draft(DRAFT, target=TARGET, dtype=torch.float32, device="cpu")
    out = tmp_path / "live"
    settings = LiveSettings(
        spec=DraftSpec(3), max_new=40, wirings=["train"], temperature=0.7, top_k=20, seed=4,
        out=out, limit=3,
    )  # fmt: skip
    live = live_accept(draft, TARGET, DEMO / "prompts.jsonl", settings).wirings[0]
    rep = _accept(capsys, out / "train", "--wiring", "train", "--temperature", "0.7", "--top-k", 20)
    w = rep["wirings"][0]
    assert rep["config"]["sampling"]["temperature"] == 0.7
    for s_live, s_rep in zip(live.per_sample, w["per_sample"], strict=True):
        assert s_rep["accepted"] == s_live.accepted.tolist()
        got, want = s_rep["expected"], s_live.odds.expected.tolist()
        # rounds past the sample's tokens take their realised count (none here but the last)
        inside = len(want) - 1
        assert got[:inside] == pytest.approx(want[:inside], abs=1e-4)
    assert w["expected"]["expected_accepted"] == pytest.approx(
        live.expectation.expected, abs=1e-3 * len(w["per_sample"]) * 40
    )


def test_on_the_targets_own_samples_the_walk_realises_the_expectation(capsys):
    held = DEMO / "samples" / "held"
    at = _accept(capsys, held, "--wiring", "train", "--temperature", "0.7", "--limit", 16)
    e = at["wirings"][0]["expected"]
    assert abs(e["z"]) < 4, e
    assert e["ci_low"] <= e["accept_length"] <= e["ci_high"]
    colder = _accept(capsys, held, "--wiring", "train", "--temperature", "0.3", "--limit", 16)
    assert colder["wirings"][0]["expected"]["z"] < -4  # not the data the target samples at 0.3


def test_on_its_own_training_samples_the_draft_beats_the_targets_sampling(capsys):
    train = DEMO / "samples" / "train"
    e = _accept(capsys, train, "--wiring", "train", "--temperature", "0.7", "--limit", 8)
    assert e["wirings"][0]["expected"]["z"] > 4


def test_what_the_samples_path_refuses(capsys):
    held = DEMO / "samples" / "held"
    capsys.readouterr()
    rc = main(["accept", str(DRAFT), str(held), "--temperature", "0.7", "--limit", "1"])
    assert rc == 2 and "--target" in capsys.readouterr().err
    argv = ["accept", str(DRAFT), str(held), "--target", str(TARGET), "--temperature", "0.7"]
    rc = main([*argv, "--verify", "vllm-probabilistic", "--limit", "1"])
    assert rc == 2 and "samples its drafts" in capsys.readouterr().err


def test_the_doctors_accept_length_at_a_temperature_is_accepts_expectation(capsys, monkeypatch):
    """`doctor --temperature` quotes, in the wiring finding, what `accept --temperature` gives
    on the same samples (a chain of 3 under vLLM's rule), and says it is expected there; the
    target is loaded once for the two stages that run it (the slots' identity, the odds)."""
    import inspector.capture.transformers_target as target_module

    loads = []

    class Counted(target_module.TargetModel):
        def __init__(self, *a, **kw):
            loads.append(a)
            super().__init__(*a, **kw)

    monkeypatch.setattr(target_module, "TargetModel", Counted)
    held = DEMO / "samples" / "held"
    capsys.readouterr()
    argv = ["doctor", str(DRAFT), str(held), "--target", str(TARGET), "--device", "cpu"]
    assert main([*argv, "--samples", "4", "--temperature", "0.7", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(loads) == 1
    (identity,) = [f for f in doc["findings"] if f["kind"] == "slot_identity"]
    assert identity["summary"].startswith("slots measured against the target")  # it ran there
    (wiring,) = [f for f in doc["findings"] if f["kind"] == "wiring"]
    ev = wiring["evidence"]
    assert ev["accept_settings"] == "temperature 0.7, vllm-onehot verification, expected"
    assert "at 3 steps, temperature 0.7, vllm-onehot verification, expected" in wiring["summary"]
    n = len(ev["accept_samples"])
    assert ev["accept_samples"] == list(range(n))
    rep = _accept(capsys, held, "--temperature", "0.7", "--limit", n, "--steps", 3)
    by_slots = {tuple(w["wiring"]): w["expected"]["accept_length"] for w in rep["wirings"]}
    counted = {tuple(w["wiring"]): w["accept_length"] for w in rep["wirings"]}
    assert ev["best"]["wiring"] == [0, 1, 2] and ev["named"]["serve"]["wiring"] == [1, 2, 3]
    assert ev["best"]["accept_length"] == pytest.approx(by_slots[(0, 1, 2)], abs=1e-4)
    assert ev["named"]["serve"]["accept_length"] == pytest.approx(by_slots[(1, 2, 3)], abs=1e-4)
    # greedy, the same finding quotes the replay's count, and says so
    assert main([*argv, "--samples", "4", "--json"]) == 0
    greedy = json.loads(capsys.readouterr().out)
    (g,) = [f for f in greedy["findings"] if f["kind"] == "wiring"]
    assert g["evidence"]["accept_settings"] == "greedy" and g["summary"].endswith("greedy")
    assert g["evidence"]["best"]["accept_length"] == pytest.approx(counted[(0, 1, 2)], abs=1e-4)
    assert g["evidence"]["best"]["accept_length"] != pytest.approx(ev["best"]["accept_length"])


def test_the_doctor_at_a_temperature_needs_the_target(capsys):
    held = DEMO / "samples" / "held"
    capsys.readouterr()
    rc = main(["doctor", str(DRAFT), str(held), "--device", "cpu", "--temperature", "0.7"])
    err = capsys.readouterr().err
    assert rc == 2 and "--temperature" in err and "pass --target DIR" in err


@pytest.fixture(scope="module")
def demo_odds_inputs():
    """The demo draft on its first training sample, and the demo target in float32."""
    from inspector.capture.transformers_target import TargetModel
    from inspector.evaluate import Evaluator
    from inspector.formats import SampleSet, load_draft

    ev = Evaluator(
        load_draft(DRAFT, dtype=torch.float32, device="cpu"), SampleSet(DEMO / "samples" / "train")
    )
    return ev, TargetModel(TARGET, dtype="float32", device="cpu")


def _reference_odds(ev, target, n, spec, sampling, verification, wiring):
    """Round n's odds computed the plain way: the draft's tree at row n - 1, and the target's
    distribution at the root and at each node from its own causal forward over x_0..x_n followed
    by the node's path (no cache, no 4D mask, no chunk)."""
    from inspector.serving.sampling import RoundOdds, node_reach, target_probs
    from inspector.serving.tree_forward import RowTrees

    sample = ev.samples[0]
    t = int(sample.length)
    ids = sample.input_ids
    h = ev.fc_output(0, wiring)
    tr = RowTrees(
        ev.draft, h[: t - 2], ids[1 : t - 1], spec, position_offset=ev.position_offset
    ).trees()
    d2t = ev.draft.vocab.draft_to_target
    r = n - 1
    tokens = d2t[tr.tokens[r]].tolist()
    parent, depth = tr.parent[r].tolist(), tr.depth[r].tolist()
    rows = [target.logits_forward(ids[: n + 1].tolist())]
    for j in range(len(tokens)):
        path, k = [], j
        while k >= 0:
            path.append(tokens[k])
            k = parent[k]
        rows.append(target.logits_forward(ids[: n + 1].tolist() + path[::-1]))
    probs = target_probs(torch.stack(rows).float(), sampling)
    return RoundOdds.of(node_reach(probs, tokens, parent, verification), depth, spec.steps)


@pytest.mark.parametrize("chunk_rounds", [1, 2, None])
def test_each_rounds_odds_are_the_targets_own_distributions(
    demo_odds_inputs, monkeypatch, chunk_rounds
):
    """sample_odds against the plain computation, at the first and last rows a tree exists at
    (start 1 and T - 2), in one chunk, one round per chunk and two per chunk (the last chunk
    part-filled); rounds whose start lies at or past T - 1 have no tree and take their count."""
    import numpy as np

    from inspector.serving import expected_replay
    from inspector.serving.replay import SampleReplay
    from inspector.serving.sampling_settings import Sampling, Verification, VerifyRule
    from inspector.serving.spec import DraftSpec

    ev, target = demo_odds_inputs
    spec = DraftSpec(3, topk=2, draft_tokens=4)
    sampling = Sampling(0.7, top_k=20)
    verification = Verification(VerifyRule.SGLANG_TARGET_ONLY)
    wiring = ev.wiring("train")
    t = int(ev.samples[0].length)
    if chunk_rounds is not None:
        monkeypatch.setattr(expected_replay, "CHUNK_TOKENS", chunk_rounds * spec.candidates)
    # 22, 63 and 68: rounds of the demo's first sample that accept about 2 of 3 at 0.7
    starts = [1, 22, 63, 68, t - 2, t - 1, t + 2]
    accepted = [0, 1, 2, 3, 2, 2, 1]
    rep = SampleReplay(
        index=0, path="", starts=np.array(starts), accepted=np.array(accepted),
        emitted=np.array(accepted) + 1, a_by_start=np.zeros(t, dtype=np.int64), depth=spec.steps,
    )  # fmt: skip
    got = expected_replay.sample_odds(ev, target, rep, wiring, spec, sampling, verification)
    # float32 logits from a masked batch against a plain causal forward: ~1e-6 relative apart
    tol = {"rel": 1e-4, "abs": 1e-6}
    for i, n in enumerate(starts[:5]):
        want = _reference_odds(ev, target, n, spec, sampling, verification, wiring)
        assert got.expected[i] == pytest.approx(want.expected, **tol), n
        assert got.variance[i] == pytest.approx(want.variance, **tol), n
        assert got.at_least[i].tolist() == pytest.approx(list(want.at_least), **tol), n
    assert got.expected[1:4].min() > 1.5  # the rows compared are informative ones
    for i, a in zip((5, 6), accepted[5:], strict=True):
        assert got.expected[i] == a and got.variance[i] == 0
        assert got.at_least[i].tolist() == [float(a >= k) for k in range(1, spec.steps + 1)]
