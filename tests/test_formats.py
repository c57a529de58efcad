"""Every sample format and checkpoint layout loads into the same canonical objects."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft
from inspector.formats.checkpoint import canonical_name

LLAMA3_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def _golden_v1(golden, i=0):
    return torch.load(golden / "speculators-basic" / "samples" / f"data_{i}.pt", weights_only=True)


def _train_preds(ckpt, samples, **kw):
    ev = Evaluator(load_draft(ckpt, **kw), SampleSet(samples))
    return ev, ev.predict(0, ev.wiring("train")).steps[0]


def test_speculators_v0_sample(golden, tmp_path):
    d = _golden_v1(golden)
    hs = d["hidden_states"]
    torch.save(
        {
            "input_ids": d["input_ids"],
            "loss_mask": d["loss_mask"],
            "hidden_state": torch.cat(hs[:3], -1),
            "target": hs[3],
        },
        tmp_path / "data_0.pt",
    )
    ev, p = _train_preds(golden / "speculators-basic" / "checkpoint", tmp_path)
    _, ref = _train_preds(
        golden / "speculators-basic" / "checkpoint",
        golden / "speculators-basic" / "samples" / "data_0.pt",
    )
    assert ev.samples.format == "speculators-v0"
    assert [s.label for s in ev.slot_info] == ["s0", "s1", "s2", "target"]
    assert ev.wiring("train").slots == (0, 1, 2)
    assert p.pred_draft.tolist() == ref.pred_draft.tolist()


def test_specforge_ckpt_sample(golden, tmp_path):
    d = _golden_v1(golden)
    hs = d["hidden_states"]
    (tmp_path / "rows_0-2000").mkdir()
    torch.save(
        {
            "input_ids": d["input_ids"][None],
            "loss_mask": d["loss_mask"][None],
            "hidden_state": torch.randn(1, hs[0].shape[0], 64),
            "aux_hidden_state": torch.cat(hs[:3], -1)[None],
        },
        tmp_path / "rows_0-2000" / "data_0.ckpt",
    )
    ev, p = _train_preds(golden / "specforge-basic" / "checkpoint", tmp_path)
    _, ref = _train_preds(
        golden / "specforge-basic" / "checkpoint",
        golden / "speculators-basic" / "samples" / "data_0.pt",
    )
    assert ev.samples.format == "specforge"
    info = ev.slot_info
    assert len(info) == 4 and info[3].post_norm and info[3].verifier
    # Serving feeds decoder-layer outputs only: the post-norm final state is never a candidate.
    assert ev.wiring("train").slots == (0, 1, 2) == ev.wiring("serve").slots
    assert p.pred_draft.tolist() == ref.pred_draft.tolist()


def test_speculators_v2_sample_without_mask_warns(golden, tmp_path):
    d = _golden_v1(golden)
    hs = torch.stack(d["hidden_states"], dim=1)
    (tmp_path / "hidden_states").mkdir()
    save_file(
        {"hidden_states": hs.contiguous(), "token_ids": d["input_ids"]},
        str(tmp_path / "hidden_states" / "hs_0.safetensors"),
    )
    ev, p = _train_preds(golden / "speculators-basic" / "checkpoint", tmp_path / "hidden_states")
    assert ev.samples.format == "speculators-v2"
    s = ev.samples[0]
    assert any("no loss mask" in w for w in s.warnings)
    assert bool(s.loss_mask.all())
    assert ev.wiring("train").slots == (0, 1, 2)
    assert ev.wiring("serve").slots == (1, 2, 3)


def test_data_config_labels_and_conventions(golden, tmp_path):
    src = golden / "speculators-basic" / "samples"
    for name, cfg, labels in [
        (
            "hf",
            {"hidden_states": {"layer_ids": [0, 2, 4, 6], "index_convention": "hf"}},
            ["embed", "L2", "L4", "L6"],
        ),
        # speculators v1 layer_ids are decoder-layer outputs: HF index = id + 1.
        ("spec", {"hidden_states": {"layer_ids": [2, 16, 29, 31]}}, ["L3", "L17", "L30", "L32"]),
    ]:
        d = tmp_path / name
        shutil.copytree(src, d)
        (d / "data_config.json").write_text(json.dumps(cfg))
        ss = SampleSet(d)
        assert [s.label for s in ss.slot_info] == labels
        assert ss.slot_info[-1].verifier


def test_wiring_by_label(golden, tmp_path):
    d = tmp_path / "s"
    shutil.copytree(golden / "speculators-basic" / "samples", d)
    (d / "data_config.json").write_text(
        json.dumps({"hidden_states": {"layer_ids": [0, 2, 4, 6], "index_convention": "hf"}})
    )
    ev = Evaluator(load_draft(golden / "speculators-basic" / "checkpoint"), SampleSet(d))
    assert ev.wiring("embed,l2,L4").slots == (0, 1, 2)
    assert ev.wiring("[L2, L4, L6]").slots == (1, 2, 3)
    assert ev.wiring("serve").label(ev.slot_info) == "[L2, L4, L6]"


def test_pytorch_bin_and_sharded_safetensors_and_dtype(golden, tmp_path):
    src = golden / "specforge-basic" / "checkpoint"
    ref = load_draft(src)
    state = load_file(str(src / "model.safetensors"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(src / "config.json", bin_dir)
    torch.save(state, bin_dir / "pytorch_model.bin")
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    shutil.copy(src / "config.json", sharded)
    names = sorted(state)
    half = len(names) // 2
    save_file({n: state[n] for n in names[:half]}, str(sharded / "a.safetensors"))
    save_file({n: state[n] for n in names[half:]}, str(sharded / "b.safetensors"))
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps(
            {
                "weight_map": {
                    n: ("a" if i < half else "b") + ".safetensors" for i, n in enumerate(names)
                }
            }
        )
    )
    for folder in (bin_dir, sharded):
        d = load_draft(folder)
        assert d.weights.keys() == ref.weights.keys()
        assert all(torch.equal(d.weights[k], ref.weights[k]) for k in ref.weights)
    assert load_draft(src, dtype="bfloat16").dtype == torch.bfloat16
    assert load_draft(src).dtype == torch.float32  # kept as stored


def test_bf16_forward_close_to_fp32(golden):
    root = golden / "speculators-basic"
    ev32 = Evaluator(load_draft(root / "checkpoint"), SampleSet(root / "samples"))
    ev16 = Evaluator(load_draft(root / "checkpoint", dtype="bfloat16"), SampleSet(root / "samples"))
    w = ev32.wiring("train")
    a = ev32.predict(2, w).steps[0]
    b = ev16.predict(2, w).steps[0]
    assert (a.pred_draft == b.pred_draft).mean() > 0.8


def test_canonical_names():
    assert canonical_name("midlayer.self_attn.q_proj.weight") == "layers.0.self_attn.q_proj.weight"
    assert canonical_name("model.midlayer.hidden_norm.weight") == "layers.0.hidden_norm.weight"
    assert (
        canonical_name("model.additional_layers.0.mlp.up_proj.weight")
        == "layers.1.mlp.up_proj.weight"
    )
    assert canonical_name("model.fc.weight") == "fc.weight"
    assert canonical_name("layers.0.self_attn.o_proj.weight") == "layers.0.self_attn.o_proj.weight"


def test_rope_scaling_variants_change_logits_only_when_set(golden, tmp_path):
    """llama3 / linear / yarn scaling from legacy rope_scaling keys are honoured."""
    import dataclasses

    from inspector.draft import RopeConfig
    from inspector.model import rope_inv_freq

    base, _ = rope_inv_freq(RopeConfig(10000.0), 16)
    lin, _ = rope_inv_freq(RopeConfig(10000.0, "linear", {"factor": 4.0}), 16)
    assert torch.allclose(lin, base / 4)
    l3, _ = rope_inv_freq(
        RopeConfig(
            500000.0,
            "llama3",
            LLAMA3_SCALING,
        ),
        128,
    )
    b3, _ = rope_inv_freq(RopeConfig(500000.0), 128)
    assert torch.allclose(l3[:10], b3[:10]) and torch.allclose(l3[-5:], b3[-5:] / 8)
    _, yarn_scale = rope_inv_freq(
        RopeConfig(10000.0, "yarn", {"factor": 4.0, "original_max_position_embeddings": 2048}), 16
    )
    assert yarn_scale > 1.0
    # The config reader picks the legacy form up.
    src = golden / "specforge-basic" / "checkpoint"
    dst = tmp_path / "ck"
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.pop("rope_parameters")
    cfg["rope_theta"] = 500000.0
    cfg["rope_scaling"] = {"rope_type": "llama3", **LLAMA3_SCALING}
    (dst / "config.json").write_text(json.dumps(cfg))
    d = load_draft(dst)
    assert d.config.rope == RopeConfig(
        500000.0,
        "llama3",
        LLAMA3_SCALING,
    )
    assert dataclasses.replace(d.config, rope=RopeConfig()).rope.theta == 10000.0


def test_no_d2t_means_identity_vocab(tiny_synthetic, tmp_path):
    ckpt, samples = tiny_synthetic
    state = load_file(str(ckpt / "model.safetensors"))
    cfg = json.loads((ckpt / "config.json").read_text())
    v = cfg["transformer_layer_config"]["vocab_size"]
    state.pop("d2t"), state.pop("t2d")
    state["lm_head.weight"] = torch.randn(v, state["lm_head.weight"].shape[1])
    cfg["draft_vocab_size"] = v
    out = tmp_path / "full"
    out.mkdir()
    save_file(state, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg))
    ev = Evaluator(load_draft(out), SampleSet(samples))
    sp = ev.predict(0, ev.wiring("train")).steps[0]
    assert (sp.pred_draft == sp.pred_target).all()
    assert sp.in_vocab.all()


def test_head_dim_differs_from_hidden_over_heads(tmp_path):
    from inspector.synthetic import SyntheticSpec, write_synthetic

    ckpt, samples = write_synthetic(
        tmp_path, SyntheticSpec(size="tiny", head_dim=32, n_samples=1, seq_len=20)
    )
    d = load_draft(ckpt)
    assert d.config.head_dim == 32 and d.config.hidden_size // d.config.num_heads == 16
    ev = Evaluator(d, SampleSet(samples), ttt_steps=2)
    assert len(ev.predict(0, ev.wiring("train")).steps) == 2


def test_speculators_v2_loss_mask_from_arrow_dataset(golden, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.ipc as ipc

    rows = [
        torch.load(golden / "speculators-basic" / "samples" / f"data_{i}.pt", weights_only=True)
        for i in range(2)
    ]
    (tmp_path / "hidden_states").mkdir()
    for i, d in enumerate(rows):
        save_file(
            {
                "hidden_states": torch.stack(d["hidden_states"], 1).contiguous(),
                "token_ids": d["input_ids"],
            },
            str(tmp_path / "hidden_states" / f"hs_{i}.safetensors"),
        )
    table = pa.table(
        {
            "input_ids": [d["input_ids"].tolist() for d in rows],
            "loss_mask": [d["loss_mask"].tolist() for d in rows],
            "seq_len": [d["input_ids"].numel() for d in rows],
        }
    )
    with ipc.new_stream(str(tmp_path / "data-00000-of-00001.arrow"), table.schema) as w:
        w.write_table(table)
    ss = SampleSet(tmp_path / "hidden_states")
    for i, d in enumerate(rows):
        assert not ss[i].warnings
        assert torch.equal(ss[i].loss_mask, d["loss_mask"])
    # A dataset row that disagrees with the hidden-state file's token ids is refused.
    bad = pa.table({"input_ids": [[1, 2, 3]] * 2, "loss_mask": [[1, 1, 1]] * 2, "seq_len": [3, 3]})
    with ipc.new_stream(str(tmp_path / "data-00000-of-00001.arrow"), bad.schema) as w:
        w.write_table(bad)
    with pytest.raises(
        InputError, match="hs_0.safetensors: token_ids: differ from the dataset row"
    ):
        SampleSet(tmp_path / "hidden_states")[0]
