"""The bundled demo (assets/demo): its files, its figures, and a tiny run of the builder.

The figure tests read the committed assets and recompute the accuracies with the project's own
forward pass (inspector.model), so they fail if the assets, the forward or the wiring drift.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from inspector.demo.draft import SERVE_WIRING, TRAIN_WIRING, evaluate, load_demo_draft
from inspector.model import fc_project, forward_steps

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"
H = 128


def _load_samples(split: str) -> list[dict]:
    folder = DEMO / "samples" / split
    n = len(list(folder.glob("data_*.pt")))
    return [torch.load(folder / f"data_{i}.pt", weights_only=True) for i in range(n)]


@pytest.fixture(scope="module")
def draft():
    return load_demo_draft(DEMO / "draft")


@pytest.fixture(scope="module")
def samples() -> dict[str, list[dict]]:
    return {s: _load_samples(s) for s in ("train", "held")}


@pytest.fixture(scope="module")
def info() -> dict:
    return json.loads((DEMO / "build_info.json").read_text())


def _step0_accuracy(draft, recs: list[dict], wiring: tuple[int, ...]) -> tuple[int, int]:
    """Written out here (not via evaluate) so the test does not check the builder with itself:
    row j = wired slots at j + token x_{j+1}, predicts x_{j+2}, counted where loss_mask[j+1] = 1;
    an out-of-vocab true token is a miss."""
    d2t_abs = torch.arange(draft.vocab.d2t.numel()) + draft.vocab.d2t
    hits = total = 0
    with torch.no_grad():
        for r in recs:
            ids, mask = r["input_ids"], r["loss_mask"]
            g = torch.cat([r["hidden_states"][s].float() for s in wiring], -1)
            logits = forward_steps(draft, fc_project(draft, g[:-1]), ids[1:], steps=1)[0]
            pred = d2t_abs[logits[:-1].argmax(-1)]  # the last row's label lies beyond the sample
            use = mask[1:-1].bool()
            hits += int((pred == ids[2:])[use].sum())
            total += int(use.sum())
    return hits, total


# --- files -------------------------------------------------------------------------------------


def test_assets_are_complete_and_small() -> None:
    for rel in (
        "build_info.json",
        "target/config.json",
        "target/tokenizer.json",
        "target/model.safetensors",
        "draft/config.json",
        "draft/model.safetensors",
        "samples/train/data_config.json",
        "samples/held/data_config.json",
    ):
        assert (DEMO / rel).is_file(), rel
    size = sum(p.stat().st_size for p in DEMO.rglob("*") if p.is_file())
    # samples 15 MB, target 5 MB, the engine logs 4.5 MB (with the two converted GGUFs the
    # llama.cpp guide runs, 1.5 MB each), the draft 1.5 MB: a clone stays quick
    assert size < 30_000_000, f"assets/demo is {size / 1e6:.1f} MB"


def test_target_is_a_complete_hf_llama_checkpoint() -> None:
    t = load_file(str(DEMO / "target" / "model.safetensors"))
    per_layer = (
        "input_layernorm.weight",
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.o_proj.weight",
        "post_attention_layernorm.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
    )
    layers = {f"model.layers.{i}.{n}" for i in range(6) for n in per_layer}
    assert set(t) == {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} | layers
    assert t["model.layers.5.self_attn.k_proj.weight"].shape == (2 * 32, H)
    assert t["model.layers.0.mlp.down_proj.weight"].shape == (H, 384)
    cfg = json.loads((DEMO / "target" / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["head_dim"], cfg["vocab_size"]) == (
        H,
        6,
        32,
        512,
    )
    assert t["model.embed_tokens.weight"].shape == (512, H)
    assert t["lm_head.weight"].shape == (512, H)


def test_draft_checkpoint_layout_and_vocab_maps() -> None:
    cfg = json.loads((DEMO / "draft" / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3"
    assert cfg["architectures"] == ["Eagle3DraftModel"]
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]
    assert cfg["norm_before_residual"] is False and cfg["target_hidden_size"] is None
    layer = cfg["transformer_layer_config"]
    assert (layer["head_dim"], layer["vocab_size"], cfg["draft_vocab_size"]) == (32, 512, 256)

    w = load_file(str(DEMO / "draft" / "model.safetensors"))
    assert w["fc.weight"].shape == (H, 3 * H)
    assert w["lm_head.weight"].shape == (256, H)
    d2t, t2d = w["d2t"], w["t2d"]
    assert d2t.dtype == torch.int64 and d2t.shape == (256,)
    assert t2d.dtype == torch.bool and t2d.shape == (512,)
    assert int(t2d.sum()) == 256
    assert torch.equal(t2d.nonzero().flatten(), torch.arange(256) + d2t)
    # The frozen embedding is the target's.
    target = load_file(str(DEMO / "target" / "model.safetensors"))
    assert torch.equal(w["embed_tokens.weight"], target["model.embed_tokens.weight"])


def test_project_loader_reads_the_demo_draft(draft) -> None:
    from inspector.formats.checkpoint import load_draft

    loaded = load_draft(DEMO / "draft")
    assert loaded.config.head_dim == 32 and loaded.config.num_fc_blocks == 3
    assert loaded.config.aux_layer_ids == (0, 2, 4)
    assert torch.equal(loaded.vocab.d2t, draft.vocab.d2t)
    assert torch.equal(loaded.weights["fc.weight"], draft.weights["fc.weight"])


def test_samples_are_speculators_v1(samples) -> None:
    assert len(samples["train"]) >= 32 and len(samples["held"]) >= 32
    for split in ("train", "held"):
        cfg = json.loads((DEMO / "samples" / split / "data_config.json").read_text())
        assert cfg["hidden_states"]["layer_ids"] == [0, 2, 4, 6]
        assert cfg["format"]["schema"] == "speculators-v1"
        for r in samples[split]:
            assert set(r) == {"input_ids", "hidden_states", "loss_mask"}
            T = r["input_ids"].numel()
            assert r["input_ids"].dtype == torch.int64 and r["loss_mask"].dtype == torch.int64
            assert len(r["hidden_states"]) == 4
            assert all(h.dtype == torch.bfloat16 and h.shape == (T, H) for h in r["hidden_states"])
            m = r["loss_mask"]
            p = int((m == 0).sum())
            # A real prompt (mask 0) followed by the target's continuation (mask 1).
            assert 0 < p < T and m[:p].eq(0).all() and m[p:].eq(1).all()


def test_held_samples_are_not_training_samples(samples) -> None:
    train = {tuple(r["input_ids"].tolist()) for r in samples["train"]}
    assert not any(tuple(r["input_ids"].tolist()) in train for r in samples["held"])


# --- figures -----------------------------------------------------------------------------------


def test_embedding_slot_is_much_smaller_than_deeper_slots(samples) -> None:
    for split in ("train", "held"):
        toks = sum(r["input_ids"].numel() for r in samples[split])
        norms = [
            sum(float(r["hidden_states"][i].float().norm(dim=-1).sum()) for r in samples[split])
            / toks
            for i in range(4)
        ]
        assert all(norms[i] >= 10 * norms[0] for i in (1, 2, 3)), norms


def test_train_wiring_beats_serve_wiring(draft, samples, info) -> None:
    figs = {}
    for split in ("train", "held"):
        for name, wiring in (("train", TRAIN_WIRING), ("serve", SERVE_WIRING)):
            hits, total = _step0_accuracy(draft, samples[split], wiring)
            assert total > 1000
            figs[split, name] = hits / total
            # The recorded figure is the one the committed files give.
            recorded = info["accuracy"][split][f"{name}_wiring"]["step0"]
            assert abs(recorded - hits / total) < 0.005, (split, name, recorded, hits / total)
    assert figs["train", "train"] >= 0.55, figs
    assert figs["train", "serve"] <= figs["train", "train"] / 2, figs
    assert figs["held", "train"] >= figs["held", "serve"] + 0.08, figs
    assert figs["held", "serve"] <= figs["held", "train"] / 1.3, figs


def test_acceptance_length_is_higher_under_train_wiring(draft, samples) -> None:
    for split in ("train", "held"):
        tr = evaluate(draft, samples[split], TRAIN_WIRING)
        sv = evaluate(draft, samples[split], SERVE_WIRING)
        assert tr["acceptance_length"] > sv["acceptance_length"] + 0.1, (split, tr, sv)
        # Consistency of the metric: 1 + sum_k prod_{m<=k} c_m == 1 + sum_k full_acc_k.
        assert tr["acceptance_length"] == pytest.approx(1 + sum(tr["per_step"]))


# --- the builder ------------------------------------------------------------------------------


def test_target_training_is_seeded() -> None:
    from inspector.demo.tiny_target import TargetConfig, train_target

    cfg = TargetConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, head_dim=8, intermediate_size=48
    )
    stream = torch.arange(2000) % 61
    a, _ = train_target(stream, cfg, steps=3, batch=2, seq_len=16, seed=5)
    b, _ = train_target(stream, cfg, steps=3, batch=2, seq_len=16, seed=5)
    c, _ = train_target(stream, cfg, steps=3, batch=2, seq_len=16, seed=6)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_capture_takes_the_last_state_before_the_final_norm() -> None:
    from inspector.demo.data import GeneratedSequence, capture_slots
    from inspector.demo.tiny_target import Target, TargetConfig

    torch.manual_seed(0)
    model = Target(TargetConfig()).eval()
    with torch.no_grad():
        model.norm.weight.mul_(3.0)
        seq = GeneratedSequence(torch.randint(0, 512, (20,)), prompt_len=5)
        slots = capture_slots(model, seq)
        logits = model(seq.ids[None])[0]
    assert [s.shape for s in slots] == [(20, H)] * 4
    assert torch.equal(slots[0], model.embed_tokens.weight[seq.ids])
    # norm + lm_head of the last slot gives the model's logits: it is the pre-norm state.
    assert torch.allclose(model.lm_head(model.norm(slots[3])), logits, atol=1e-5)
    assert seq.loss_mask.tolist() == [0] * 5 + [1] * 15


def test_tiny_build_end_to_end(tmp_path: Path) -> None:
    from inspector.demo.build import BuildPlan, build

    plan = BuildPlan(
        max_files=20,
        target_steps=3,
        target_batch=4,
        target_seq_len=64,
        n_train_sequences=8,
        n_held_sequences=4,
        n_saved_train=4,
        prompt_len=(8, 12),
        total_len=(40, 48),
        draft_epochs=1,
        draft_batch=4,
    )
    logs: list[str] = []
    # A user's own files in the output folder survive; what the builder owns is replaced.
    (tmp_path / "samples" / "mine").mkdir(parents=True)
    (tmp_path / "samples" / "mine" / "keep.pt").write_bytes(b"mine")
    (tmp_path / "samples" / "train").mkdir()
    (tmp_path / "samples" / "train" / "data_99.pt").write_bytes(b"stale")
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "old.bin").write_bytes(b"stale")
    info = build(tmp_path, seed=1, progress=logs.append, plan=plan)
    assert (tmp_path / "samples" / "mine" / "keep.pt").read_bytes() == b"mine"
    assert not (tmp_path / "samples" / "train" / "data_99.pt").exists()
    assert sorted(p.name for p in (tmp_path / "draft").iterdir()) == [
        "config.json",
        "model.safetensors",
    ]
    assert any("done" in line for line in logs)
    assert len(list((tmp_path / "samples" / "train").glob("data_*.pt"))) == 4
    assert len(list((tmp_path / "samples" / "held").glob("data_*.pt"))) == 4
    d = load_demo_draft(tmp_path / "draft")
    assert int(d.vocab.t2d.sum()) == 256
    rec = torch.load(tmp_path / "samples" / "held" / "data_0.pt", weights_only=True)
    assert 40 <= rec["input_ids"].numel() <= 48
    assert json.loads((tmp_path / "build_info.json").read_text())["seed"] == 1
    assert set(info["accuracy"]) == {"train", "held"}
    assert not list(tmp_path.glob(".demo-build-*"))  # the staging folder is gone


def test_build_refuses_a_bad_out_before_any_work(tmp_path: Path, monkeypatch) -> None:
    import importlib
    import os

    from inspector.errors import InputError

    # the module, not the package's `build` function (which the package's attribute is until
    # something imports the submodule: the test alone would patch the function)
    build_mod = importlib.import_module("inspector.demo.build")
    monkeypatch.setattr(build_mod, "load_corpus", lambda *a, **k: pytest.fail("work started"))
    (tmp_path / "afile").write_text("x")
    (tmp_path / "demo" / "draft").mkdir(parents=True)
    (tmp_path / "demo" / "samples").write_text("a file where samples/ goes")
    for out, where in (
        (tmp_path / "afile", tmp_path / "afile"),
        (tmp_path / "afile" / "sub", tmp_path / "afile" / "sub"),
        (tmp_path / "demo", tmp_path / "demo" / "samples"),
    ):
        with pytest.raises(InputError) as e:
            build_mod.build(out)
        assert (e.value.path, e.value.field) == (str(where), "out")  # the setting --out words
    assert (tmp_path / "demo" / "samples").read_text() == "a file where samples/ goes"
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        with pytest.raises(InputError, match="not writable"):
            build_mod.build(ro)


def test_install_replaces_only_the_owned_folders_and_keeps_symlinks_unfollowed(
    tmp_path: Path,
) -> None:
    from inspector.demo.build import FOLDERS, _install

    out, staging, elsewhere = tmp_path / "out", tmp_path / "out" / ".stage", tmp_path / "else"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("keep")
    for sub in FOLDERS:
        (staging / sub).mkdir(parents=True)
        (staging / sub / "new").write_text(sub)
    (out / "samples" / "mine").mkdir(parents=True)
    (out / "draft").symlink_to(elsewhere)  # replaced as a link: its target is untouched
    (out / "target").mkdir()
    (out / "target" / "stale").write_text("old")
    _install(staging, out)
    for sub in FOLDERS:
        assert sorted(p.name for p in (out / sub).iterdir()) == ["new"], sub
    assert (out / "samples" / "mine").is_dir()
    assert (elsewhere / "precious").read_text() == "keep"


def test_time_budget_only_steers_a_clearly_slow_run() -> None:
    from inspector.demo.tiny_target import TIME_MARGIN, progress_fraction

    # No budget, or a run on schedule: the step count alone decides (reproducible).
    assert progress_fraction(30, 100, 1e9, None) == 0.3
    assert progress_fraction(30, 100, 29.0, 100.0) == 0.3
    # A run far behind its budget: the clock leads, and training ends at the budget.
    assert progress_fraction(30, 100, 60.0, 100.0) == pytest.approx(0.6 - TIME_MARGIN)
    assert progress_fraction(30, 100, 200.0, 100.0) == 1.0
