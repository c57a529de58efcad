"""Optional architecture switches: each is honoured, and the cached-projection path equals the direct one."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from safetensors.torch import save_file

from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft, read_target_head
from inspector.model import fc_input, fc_project, forward_steps, rms_norm


def _direct_logits(draft, sample, wiring, steps=2):
    g = fc_input(draft, [sample.slots[i].to(draft.dtype) for i in wiring])
    h = fc_project(draft, g)[:-1]
    return forward_steps(draft, h, sample.input_ids[1:], steps=steps)


def _with(draft, **cfg):
    return dataclasses.replace(draft, config=dataclasses.replace(draft.config, **cfg))


def test_fc_norm_and_norm_before_fc_cached_equals_direct(golden):
    root = golden / "speculators-basic"
    base = load_draft(root / "checkpoint")
    h3 = base.config.num_fc_blocks * base.config.target_hidden_size
    g = torch.Generator().manual_seed(0)
    variants = {
        "fc_norm": _with(base, fc_norm=True),
        "norm_before_fc": _with(base, norm_before_fc=True),
    }
    for b in range(3):
        variants["fc_norm"].weights[f"fc_norm.{b}.weight"] = 0.5 + torch.rand(64, generator=g)
    variants["norm_before_fc"].weights["input_norm.weight"] = 0.5 + torch.rand(h3, generator=g)
    samples = SampleSet(root / "samples")
    for name, draft in variants.items():
        ev = Evaluator(draft, samples, ttt_steps=2)
        for wiring in ((0, 1, 2), (3, 1, 0)):
            pred = ev.predict(1, ev.wiring(list(wiring)))
            direct = _direct_logits(draft, samples[1], wiring)
            for k, sp in enumerate(pred.steps):
                assert sp.pred_draft.tolist() == direct[k][: len(sp)].argmax(-1).tolist(), name
        ref = Evaluator(base, samples).predict(1, ev.wiring("train")).steps[0]
        assert not np.array_equal(ref.p_pred, ev.predict(1, ev.wiring("train")).steps[0].p_pred)


def test_norm_before_residual_and_norm_output_change_the_result(golden):
    root = golden / "speculators-basic"
    base = load_draft(root / "checkpoint")
    s = SampleSet(root / "samples")[0]
    ref = _direct_logits(base, s, (0, 1, 2))
    nbr = _direct_logits(_with(base, norm_before_residual=True), s, (0, 1, 2))
    assert (ref[0] - nbr[0]).abs().max() > 1.0  # golden README: ~8.7
    nout = _direct_logits(_with(base, norm_output=True), s, (0, 1, 2))
    assert torch.equal(ref[0], nout[0]) and not torch.allclose(ref[1], nout[1])


def test_two_layer_draft_runs(golden):
    root = golden / "speculators-basic"
    base = load_draft(root / "checkpoint")
    w = dict(base.weights)
    for name, t in list(base.weights.items()):
        if name.startswith("layers.0.") and "hidden_norm" not in name:
            t2 = (
                t[:, 64:]
                if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight"))
                else t
            )
            w[name.replace("layers.0.", "layers.1.")] = t2.clone()
    two = dataclasses.replace(
        base, weights=w, config=dataclasses.replace(base.config, num_layers=2)
    )
    out = _direct_logits(two, SampleSet(root / "samples")[0], (0, 1, 2), steps=3)
    assert [o.shape[0] for o in out] == [36, 35, 34]
    assert torch.isfinite(out[2]).all()


def test_verifier_match_with_target_head(golden, tmp_path):
    root = golden / "speculators-basic"
    draft = load_draft(root / "checkpoint")
    g = torch.Generator().manual_seed(3)
    lm_head = torch.randn(256, 64, generator=g)
    norm = 0.5 + torch.rand(64, generator=g)
    tdir = tmp_path / "target"
    tdir.mkdir()
    save_file(
        {
            "lm_head.weight": lm_head,
            "model.norm.weight": norm,
            "model.embed_tokens.weight": draft.weights["embed_tokens.weight"],
        },
        str(tdir / "model.safetensors"),
    )
    (tdir / "config.json").write_text('{"rms_norm_eps": 1e-5}')
    samples = SampleSet(root / "samples")
    ev = Evaluator(draft, samples, target_head=read_target_head(tdir))
    pred = ev.predict(0, ev.wiring("train"))
    sp, m = pred.steps[0], pred.metrics[0]
    # Manual: verifier logits at t = j + 1 from the last (pre-norm) slot.
    y = rms_norm(samples[0].slots[3], norm, 1e-5)
    logits = y @ lm_head.T
    full = logits.argmax(-1)[1 : 1 + len(sp)].numpy()
    in_vocab_ids = draft.vocab.draft_to_target
    restricted = in_vocab_ids[logits[:, in_vocab_ids].argmax(-1)][1 : 1 + len(sp)].numpy()
    masked = sp.masked
    assert m.verifier_a.hits == int(((sp.pred_target == restricted) & masked).sum())
    assert m.verifier_b.hits == int(((sp.pred_target == full) & masked).sum())
    assert m.verifier_a.total == m.verifier_b.total == int(masked.sum())
