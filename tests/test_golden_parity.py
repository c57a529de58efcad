"""Our forward against the logits speculators and SpecForge wrote themselves (tests/fixtures/golden)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from support import accumulation_tolerance

from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft
from inspector.model import fc_input, fc_project, forward_steps


def _top2_gap(logits: torch.Tensor) -> torch.Tensor:
    top2 = logits.topk(2, dim=-1).values
    return top2[:, 0] - top2[:, 1]


# The peers' logits are float32 sums in their own order: ours may differ from them by the float32
# accumulation term of the error model (support.accumulation_tolerance, n = the hidden size); the
# largest measured is a fifth of it (1.0e-5 on logits of RMS 3.3).
CASES = [
    # fixture, checkpoint folder, extra loader args, the peer's RoPE position offset
    ("speculators-basic", "checkpoint", {}, 1),
    ("specforge-basic", "checkpoint", {}, 0),
    ("specforge-basic", "checkpoint_sglang", {"embed": "target_embed.safetensors"}, 0),
    # SpecForge's MLA draft class (DeepSeek-V3-style attention, YaRN with mscale_all_dim 0.707)
    ("specforge-mla", "checkpoint", {}, 0),
    # gpt-oss-shaped: head_dim 16 != hidden 72 / 8 heads, GQA, no rope_theta
    ("specforge-headdim", "checkpoint", {}, 0),
]


@pytest.mark.parametrize("fixture,ckpt,extra,offset", CASES)
@pytest.mark.parametrize("our_offset", ["peer", "speculators"])
def test_logits_match_peer(golden, fixture, ckpt, extra, offset, our_offset):
    root = golden / fixture
    kwargs = {k: root / v for k, v in extra.items()}
    draft = load_draft(root / ckpt, **kwargs)
    samples = SampleSet(root / "samples")
    expected = load_file(str(root / "expected.safetensors"))
    pos = offset if our_offset == "peer" else 1
    assert len(samples) == 3
    for i, sample in enumerate(samples):
        # The peers were wired with slots [0, 1, 2] (speculators' cat(hidden_states[:-1])).
        g = fc_input(draft, [sample.slots[j] for j in (0, 1, 2)])
        h = fc_project(draft, g)[:-1]
        logits = forward_steps(draft, h, sample.input_ids[1:], steps=3, position_offset=pos)
        for k in range(3):
            exp = expected[f"sample{i}.step{k}.logits"]
            got = logits[k]
            assert got.shape == exp.shape
            tol = accumulation_tolerance(exp, draft.config.hidden_size)
            assert (got - exp).abs().max().item() <= tol, (fixture, i, k, tol)
            # Within tol of each other, two logits can swap order only if the peer's are 2 tol apart.
            clear = _top2_gap(exp) > 2 * tol
            assert torch.equal(got.argmax(-1)[clear], expected[f"sample{i}.step{k}.argmax"][clear])


def _max_diff_mla(golden, draft) -> float:
    root = golden / "specforge-mla"
    expected = load_file(str(root / "expected.safetensors"))
    worst = 0.0
    for i, sample in enumerate(SampleSet(root / "samples")):
        h = fc_project(draft, fc_input(draft, [sample.slots[j] for j in (0, 1, 2)]))[:-1]
        logits = forward_steps(draft, h, sample.input_ids[1:], steps=3, position_offset=0)
        for k in range(3):
            worst = max(
                worst, float((logits[k] - expected[f"sample{i}.step{k}.logits"]).abs().max())
            )
    return worst


@pytest.mark.parametrize(
    "change",
    [
        {"rope_interleave": False},  # half-split rotation instead of DeepSeek's adjacent pairs
        {"no_yarn_score_scale": True},  # mscale_all_dim lost: scores unscaled, cos/sin rescaled
        {"theta": 500000.0},
    ],
)
def test_mla_parity_fails_when_the_math_is_wrong(golden, change):
    """The MLA fixture tells its conventions apart: each plausible slip moves the logits by far
    more than the 1e-4 tolerance."""
    from dataclasses import replace

    draft = load_draft(golden / "specforge-mla" / "checkpoint")
    cfg = draft.config
    if "rope_interleave" in change:
        cfg = replace(cfg, mla=replace(cfg.mla, rope_interleave=False))
    if "no_yarn_score_scale" in change:
        # the yarn frequencies stay; the scores lose mscale^2 and cos/sin take mscale(factor)
        scaling = {k: v for k, v in cfg.rope.scaling.items() if k != "mscale_all_dim"}
        cfg = replace(cfg, rope=replace(cfg.rope, scaling=scaling))
    if "theta" in change:
        cfg = replace(cfg, rope=replace(cfg.rope, theta=change["theta"]))
    assert _max_diff_mla(golden, draft) < 1e-4
    assert _max_diff_mla(golden, replace(draft, config=cfg)) > 1e-3


@pytest.mark.parametrize(
    "fixture", ["speculators-basic", "specforge-basic", "specforge-mla", "specforge-headdim"]
)
def test_evaluator_predictions_use_peer_argmax(golden, fixture):
    """The evaluation path (cached projections, train wiring) yields the peer's argmax."""
    root = golden / fixture
    draft = load_draft(root / "checkpoint")
    ev = Evaluator(draft, SampleSet(root / "samples"), ttt_steps=3)
    expected = load_file(str(root / "expected.safetensors"))
    w = ev.wiring("train")
    assert w.slots == (0, 1, 2)
    d2t = draft.vocab.d2t
    for i in range(3):
        pred = ev.predict(i, w)
        t = ev.samples[i].length
        for k, sp in enumerate(pred.steps):
            # Evaluated rows are those with a true label: j = 0..T-3-k.
            exp = expected[f"sample{i}.step{k}.argmax"][: t - 2 - k]
            logits = expected[f"sample{i}.step{k}.logits"][: t - 2 - k]
            # The peer's argmax where its top two logits are further apart than our logits can be
            # from its own (test_logits_match_peer): every row of these fixtures, as it happens.
            clear = _top2_gap(logits) > 2 * accumulation_tolerance(logits, draft.config.hidden_size)
            assert sp.pred_draft[clear.numpy()].tolist() == exp[clear].tolist()
            assert sp.pred_target[clear.numpy()].tolist() == (exp + d2t[exp])[clear].tolist()
            assert sp.true.tolist() == ev.samples[i].input_ids[2 + k : t].tolist()
            assert sp.input.tolist() == ev.samples[i].input_ids[1 + k : t - 1].tolist()
            assert sp.masked.tolist() == ev.samples[i].loss_mask[1 + k : t - 1].bool().tolist()


def test_sglang_export_needs_an_embedding(golden):
    from inspector.errors import InputError

    with pytest.raises(InputError, match="embed_tokens.weight.*--target DIR or --embed FILE"):
        load_draft(golden / "specforge-basic" / "checkpoint_sglang")


def test_sglang_export_embedding_from_target_folder(golden, tmp_path):
    """--target DIR reads only model.embed_tokens.weight from a (sharded) target checkpoint."""
    import json

    from safetensors.torch import save_file

    root = golden / "specforge-basic"
    embed = load_file(str(root / "target_embed.safetensors"))["model.embed_tokens.weight"]
    target = tmp_path / "target"
    target.mkdir()
    save_file(
        {"model.embed_tokens.weight": embed}, str(target / "model-00001-of-00002.safetensors")
    )
    save_file(
        {"lm_head.weight": torch.zeros(256, 64), "model.norm.weight": torch.ones(64)},
        str(target / "model-00002-of-00002.safetensors"),
    )
    (target / "model.safetensors.index.json").write_text(
        json.dumps(
            {
                "weight_map": {
                    "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                    "lm_head.weight": "model-00002-of-00002.safetensors",
                    "model.norm.weight": "model-00002-of-00002.safetensors",
                }
            }
        )
    )
    a = load_draft(root / "checkpoint_sglang", target=target)
    b = load_draft(root / "checkpoint")
    assert torch.equal(a.weights["embed_tokens.weight"], b.weights["embed_tokens.weight"])
    for name, t in b.weights.items():
        assert torch.equal(a.weights[name], t), name
