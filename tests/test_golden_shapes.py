"""The draft shapes of 2026 against the logits speculators 0.9.0 wrote itself
(tests/fixtures/golden/speculators-{normfc,fcnorm,qwen3,deep,wide,single}, made by
tests/fixtures/make_golden_shapes.py): EAGLE-3.1 in both its meanings, a Qwen3 draft layer, two
layers fed two slots, four slots, one slot. Each loads, matches the peer within the error model,
fails to match when the feature that makes the shape is dropped, evaluates, and goes through the
doctor's search over its own wiring space."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file
from support import accumulation_tolerance

from inspector.doctor import DiagnoseSettings, diagnose
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft
from inspector.model import fc_input, fc_project, forward_steps

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPES = [
    "speculators-normfc",
    "speculators-fcnorm",
    "speculators-qwen3",
    "speculators-deep",
    "speculators-wide",
    "speculators-single",
]


def _meta(golden, name: str) -> dict:
    return json.loads((golden / name / "meta.json").read_text())


def _worst(golden, name: str, draft) -> tuple[float, float]:
    """(largest |ours - peer| over every step, sample and row; the tolerance at that logit scale)."""
    root = golden / name
    meta = _meta(golden, name)
    expected = load_file(str(root / "expected.safetensors"))
    worst, tol = 0.0, math.inf
    for i, sample in enumerate(SampleSet(root / "samples")):
        g = fc_input(draft, [sample.slots[j] for j in meta["wiring"]])
        h = fc_project(draft, g)[:-1]
        logits = forward_steps(draft, h, sample.input_ids[1:], steps=3, position_offset=1)
        for k in range(3):
            exp = expected[f"sample{i}.step{k}.logits"]
            assert logits[k].shape == exp.shape
            worst = max(worst, float((logits[k] - exp).abs().max()))
            tol = min(tol, accumulation_tolerance(exp, draft.config.hidden_size))
    return worst, tol


def test_each_shape_is_what_its_name_says(golden):
    """The fixtures hold the shapes they claim (a generator slip would make the parity hollow)."""
    got = {}
    for name in SHAPES:
        cfg = load_draft(golden / name / "checkpoint").config
        w = load_draft(golden / name / "checkpoint").weights
        got[name] = (
            cfg.num_fc_blocks,
            cfg.num_layers,
            cfg.fc_norm,
            cfg.norm_before_fc,
            cfg.norm_output,
            "layers.0.self_attn.q_norm.weight" in w,
        )
    assert got == {
        "speculators-normfc": (3, 1, False, True, True, False),
        "speculators-fcnorm": (3, 1, True, False, True, False),
        "speculators-qwen3": (3, 1, False, False, False, True),
        "speculators-deep": (2, 2, False, False, False, False),
        "speculators-wide": (4, 1, False, False, False, False),
        "speculators-single": (1, 1, False, False, False, False),
    }


@pytest.mark.parametrize("name", SHAPES)
def test_logits_match_speculators(golden, name):
    """Every TTT step of every sample within the float32 accumulation bound of the peer's."""
    draft = load_draft(golden / name / "checkpoint")
    worst, tol = _worst(golden, name, draft)
    assert worst <= tol, (name, worst, tol)


def _drop_feature(name: str, draft):
    """The draft with the one feature that makes its shape removed (or, for N, the slots fed in
    another order): a forward that ignored the feature would compute exactly this."""
    cfg = draft.config
    w = dict(draft.weights)
    if name.endswith("normfc"):
        return replace(draft, config=replace(cfg, norm_output=False))
    if name.endswith("fcnorm"):
        return replace(draft, config=replace(cfg, fc_norm=False))
    if name.endswith("qwen3"):
        for k in [k for k in w if k.endswith(("q_norm.weight", "k_norm.weight"))]:
            del w[k]
        return replace(draft, weights=w)
    if name.endswith("deep"):
        return replace(draft, config=replace(cfg, num_layers=1))
    if name.endswith(("wide", "single")):  # the fc block of slot 0 read as the last block's
        ht = cfg.target_hidden_size
        fc = w["fc.weight"]
        w["fc.weight"] = torch.cat([fc[:, ht:], fc[:, :ht]], dim=1) if fc.shape[1] > ht else -fc
        return replace(draft, weights=w)
    raise AssertionError(name)


@pytest.mark.parametrize("name", SHAPES)
def test_the_fixture_tells_the_feature_apart(golden, name):
    """Dropping the shape's feature moves the logits far past the tolerance: the parity above
    could not pass with a forward that ignores it."""
    draft = load_draft(golden / name / "checkpoint")
    worst, tol = _worst(golden, name, _drop_feature(name, draft))
    assert worst > 100 * tol, (name, worst, tol)


def test_norm_before_fc_alone_is_not_enough(golden):
    """The normfc fixture also fails without its whole-input norm (both halves of speculators'
    first EAGLE-3.1 are checked: norm_output above, norm_before_fc here)."""
    draft = load_draft(golden / "speculators-normfc" / "checkpoint")
    off = replace(draft, config=replace(draft.config, norm_before_fc=False))
    worst, tol = _worst(golden, "speculators-normfc", off)
    assert worst > 100 * tol


@pytest.mark.parametrize("name", SHAPES)
def test_evaluator_predictions_use_peer_argmax(golden, name):
    """The evaluation path (cached per-block projections, or the whole-input norm) yields the
    peer's argmax on the configured wiring, at every step."""
    root = golden / name
    meta = _meta(golden, name)
    draft = load_draft(root / "checkpoint")
    ev = Evaluator(draft, SampleSet(root / "samples"), ttt_steps=3, position_offset=1)
    expected = load_file(str(root / "expected.safetensors"))
    w = ev.wiring("train")
    assert w.slots == tuple(meta["wiring"])
    for i in range(len(ev.samples)):
        t = ev.samples[i].length
        for k, sp in enumerate(ev.predict(i, w).steps):
            exp = expected[f"sample{i}.step{k}.argmax"][: t - 2 - k]
            logits = expected[f"sample{i}.step{k}.logits"][: t - 2 - k]
            top2 = logits.topk(2, dim=-1).values
            clear = (top2[:, 0] - top2[:, 1]) > 2 * accumulation_tolerance(
                logits, draft.config.hidden_size
            )
            assert sp.pred_draft[clear.numpy()].tolist() == exp[clear].tolist()


@pytest.mark.parametrize("name", SHAPES)
def test_doctor_searches_the_shapes_own_wiring_space(golden, name):
    """The doctor runs on every shape and scores every ordered choice of N of the samples'
    slots (N the draft's fc blocks, however many that is)."""
    root = golden / name
    draft = load_draft(root / "checkpoint", strict=False)
    ev = Evaluator(draft, SampleSet(root / "samples"))
    report = diagnose(ev, DiagnoseSettings(2, prune=False))
    n, s = draft.config.num_fc_blocks, len(ev.samples[0].slots)
    scored = {tuple(r.wiring) for r in report.wirings}
    assert len(scored) == math.perm(s, n)
    assert all(len(w) == n for w in scored)
    assert len(report.best_wiring) == n
