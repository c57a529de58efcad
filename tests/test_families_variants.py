"""The draft-family variants on the project's own small configs (no shared folder needed): the
families it refuses and the one line each gets, sliding-window layers, multi-layer drafts, tied
heads, an absent norm_before_residual."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from support import edited_copy

from inspector.errors import InputError
from inspector.formats import SampleSet, load_draft
from inspector.model import forward_steps, iter_steps, rms_norm
from inspector.model.attention import LayerCache, attend
from inspector.model.decoder import layer
from inspector.model.rope import rope_cos_sin
from inspector.model.step0 import Step0Shared, step0_logits_at_rows
from inspector.model.weights import resolve_layer


def _err(path: Path) -> str:
    with pytest.raises(InputError) as e:
        load_draft(path)
    return str(e.value)


def _layer_cfg(edit):
    def apply(cfg: dict) -> None:
        edit(cfg["transformer_layer_config"])

    return apply


@pytest.mark.parametrize(
    "edit,line",
    [
        (
            # P-EAGLE is run (tests/test_families_peagle.py), given its mask token
            lambda c: c.update(speculators_model_type="peagle"),
            "config.json: mask_token_id: missing: a P-EAGLE draft's depth >= 1 slots are fed",
        ),
        (
            lambda c: c.update(speculators_model_type="dspark"),
            "config.json: speculators_model_type: 'dspark': a DSpark draft, eval, doctor, accept "
            "and the app run block drafts",
        ),
        (
            lambda c: c.update(architectures=["DFlashDraftModel"]),
            "config.json: architectures: 'DFlashDraftModel': a DFlash (block diffusion drafting) "
            "draft, eval, doctor, accept and the app run block drafts; compare and the other "
            "replays do not yet (docs/guides/block-drafts.md)",
        ),
        (
            lambda c: c.update(architectures=["DeepSeekMTPModel"]),
            "config.json: architectures: 'DeepSeekMTPModel': a MTP heads draft",
        ),
        (
            lambda c: c.update(dflash_config={"projector_type": "dspark"}),
            "config.json: dflash_config.projector_type: marks a DSpark draft",
        ),
        (
            lambda c: c.update(dflash_config={"mask_token_id": 5}),
            "config.json: dflash_config: marks a DFlash (block diffusion drafting) draft",
        ),
        (
            lambda c: c.update(mask_token_id=7),
            "config.json: mask_token_id: marks a P-EAGLE (parallel drafting) draft, but neither "
            "speculators_model_type ('peagle') nor architectures (PEagleDraftModel) says so",
        ),
        (
            lambda c: c.update(eagle_config={"parallel_draft_step": 4}),
            "config.json: eagle_config.parallel_draft_step: 4: parallel drafting is not an EAGLE-3",
        ),
        (
            lambda c: c.update(eagle_config={"use_last_layernorm": False}),
            "config.json: eagle_config.use_last_layernorm: false is not supported (only true)",
        ),
        (
            _layer_cfg(lambda c: c.update(layer_types=["linear_attention"])),
            "config.json: transformer_layer_config.layer_types: layer 0 is 'linear_attention': "
            "not supported (only full_attention, sliding_attention)",
        ),
        (
            _layer_cfg(lambda c: c.update(use_sliding_window=True, sliding_window=8)),
            "config.json: transformer_layer_config.use_sliding_window: true without layer_types",
        ),
        (
            _layer_cfg(lambda c: c.update(rope_scaling={"type": "mrope", "mrope_section": [2, 2]})),
            "config.json: transformer_layer_config.rope_scaling.mrope_section: sums to 4, but a "
            "head has 8 rotary pairs (head_dim 16)",
        ),
        (
            _layer_cfg(lambda c: c.update(layer_types="sliding_attention")),
            "config.json: transformer_layer_config.layer_types: expected a list of strings, "
            "got 'sliding_attention'",
        ),
        (
            _layer_cfg(lambda c: c.update(layer_types=[1])),
            "config.json: transformer_layer_config.layer_types: expected a list of strings, got [1]",
        ),
        (
            _layer_cfg(lambda c: c.update(layer_types=["full_attention"] * 2)),
            "config.json: transformer_layer_config.layer_types: 2 entries for 1 layers",
        ),
        (
            _layer_cfg(lambda c: c.update(rope_scaling={"type": "mrope", "mrope_section": [0, 8]})),
            "config.json: transformer_layer_config.rope_scaling.mrope_section: expected a list of "
            "positive integers, got [0, 8]",
        ),
        (
            lambda c: c.update(eagle_config={"use_input_layernorm_in_first_layer": False}),
            "config.json: eagle_config.use_input_layernorm_in_first_layer: false is not "
            "supported (only true)",
        ),
        (
            lambda c: c.update(eagle_config={"use_mtp_layernorm": True}),
            "config.json: eagle_config.use_mtp_layernorm: true is not supported (only false)",
        ),
    ],
)
def test_refusals_are_one_line_naming_file_and_field(tiny_synthetic, tmp_path, edit, line):
    ckpt = edited_copy(tiny_synthetic[0], tmp_path / "c", config=edit)
    msg = _err(ckpt)
    assert "\n" not in msg
    assert msg.startswith(str(ckpt / "config.json").replace("config.json", "")), msg
    assert line in msg.replace(str(ckpt) + "/", ""), msg


def test_mla_weights_without_mla_config_say_so(tiny_synthetic, tmp_path):
    def add(w):
        return {"layers.0.self_attn.kv_a_proj_with_mqa.weight": torch.zeros(24, 128)}

    ckpt = edited_copy(tiny_synthetic[0], tmp_path / "c", tensors=add)
    assert "MLA attention weights, but config.json has no kv_lora_rank" in _err(ckpt)


def test_mrope_reads_as_plain_rope(tiny_synthetic, tmp_path):
    edit = _layer_cfg(
        lambda c: c.update(rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]})
    )
    d = load_draft(edited_copy(tiny_synthetic[0], tmp_path / "c", config=edit))
    base = load_draft(tiny_synthetic[0])
    assert d.config.rope.rope_type == "default"
    s = SampleSet(tiny_synthetic[1])[0]
    h = torch.randn(s.length - 1, 64)
    a = forward_steps(d, h, s.input_ids[1:], steps=2)
    b = forward_steps(base, h, s.input_ids[1:], steps=2)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_norm_before_residual_absence_is_recorded(tiny_synthetic, tmp_path):
    assert load_draft(tiny_synthetic[0]).config.norm_before_residual_explicit  # written false

    def drop(cfg):
        del cfg["norm_before_residual"]

    cfg = load_draft(edited_copy(tiny_synthetic[0], tmp_path / "c", config=drop)).config
    assert not cfg.norm_before_residual_explicit
    assert cfg.norm_before_residual is False  # what speculators reads; vLLM's parser reads true


def test_tied_head_reads_the_embedding_rows(tiny_synthetic, tmp_path):
    def tie(cfg):
        cfg["transformer_layer_config"]["tie_word_embeddings"] = True

    src = tiny_synthetic[0]
    full = load_draft(src)
    ckpt = edited_copy(src, tmp_path / "c", config=tie)
    from safetensors.torch import load_file, save_file

    w = load_file(str(ckpt / "model.safetensors"))
    del w["lm_head.weight"]
    save_file(w, str(ckpt / "model.safetensors"))
    d = load_draft(ckpt)
    rows = full.weights["embed_tokens.weight"][full.vocab.draft_to_target]
    assert torch.equal(d.weights["lm_head.weight"], rows)
    assert any("tie_word_embeddings" in n for n in d.notes)
    # without the flag the missing head is an error, named
    untied = edited_copy(
        ckpt,
        tmp_path / "u",
        config=lambda c: c["transformer_layer_config"].pop("tie_word_embeddings"),
    )
    assert "lm_head.weight: tensor not found" in _err(untied)


# --- sliding windows ----------------------------------------------------------------------------
def _window_cfg(window: int | None, use: bool | None = None):
    def edit(c: dict) -> None:
        c["layer_types"] = ["sliding_attention"]
        c["sliding_window"] = window
        if use is not None:
            c["use_sliding_window"] = use

    return _layer_cfg(edit)


def test_sliding_window_fields(tiny_synthetic, tmp_path):
    d = load_draft(edited_copy(tiny_synthetic[0], tmp_path / "a", config=_window_cfg(5)))
    assert d.config.sliding_windows == (5,)
    off = edited_copy(tiny_synthetic[0], tmp_path / "b", config=_window_cfg(5, use=False))
    assert load_draft(off).config.sliding_windows == ()  # present but disabled
    full = _layer_cfg(lambda c: c.update(layer_types=["full_attention"], sliding_window=5))
    assert (
        load_draft(
            edited_copy(tiny_synthetic[0], tmp_path / "c", config=full)
        ).config.sliding_windows
        == ()
    )
    bare = _layer_cfg(lambda c: c.update(sliding_window=5))  # a Llama layer ignores it
    assert (
        load_draft(
            edited_copy(tiny_synthetic[0], tmp_path / "d", config=bare)
        ).config.sliding_windows
        == ()
    )
    missing = edited_copy(tiny_synthetic[0], tmp_path / "e", config=_window_cfg(None))
    assert "sliding_window: missing: expected a positive integer" in _err(missing)


def _reference_attention(q, keys, values, scale, window):
    """Row by row, from the definition: step k's query at row j sees step-0 keys j' with
    j - window < j' <= j, and its own row's keys of steps 1..k."""
    b, h, t, _ = q.shape
    rep = h // keys[0].shape[1]
    keys = [k.repeat_interleave(rep, 1) for k in keys]
    values = [v.repeat_interleave(rep, 1) for v in values]
    out = torch.zeros(b, h, t, values[0].shape[-1], dtype=torch.float64)
    for j in range(t):
        lo = 0 if window is None else max(0, j - window + 1)
        ks = [keys[0][:, :, lo : j + 1]] + [k[:, :, j : j + 1] for k in keys[1:]]
        vs = [values[0][:, :, lo : j + 1]] + [v[:, :, j : j + 1] for v in values[1:]]
        kk, vv = torch.cat(ks, 2).double(), torch.cat(vs, 2).double()
        p = torch.softmax((q[:, :, j : j + 1].double() @ kk.transpose(-1, -2)) * scale, -1)
        out[:, :, j] = (p @ vv)[:, :, 0]
    return out


@pytest.mark.parametrize("window", [1, 3, 7, 64])
@pytest.mark.parametrize("grad", [False, True])
def test_windowed_attention_matches_the_definition(window, grad):
    from inspector.draft import DraftConfig, RopeConfig

    cfg = DraftConfig(64, 64, 4, 2, 16, 32, 1e-6, RopeConfig(), 100, 100)
    g = torch.Generator().manual_seed(0)
    t = 12
    cache = LayerCache(window)
    for step in range(3):
        q = torch.randn(1, 4, t, 16, generator=g, requires_grad=grad)
        cache.keys.append(torch.randn(1, 2, t, 16, generator=g))
        cache.values.append(torch.randn(1, 2, t, 16, generator=g))
        with torch.set_grad_enabled(grad):
            got = attend(cfg, q, cache)
        ref = _reference_attention(q.detach(), cache.keys, cache.values, 0.25, window)
        assert (got.detach().double() - ref).abs().max() < 1e-5, (window, step)
    if window < t:  # the window matters: full attention gives another answer
        full = _reference_attention(q.detach(), cache.keys, cache.values, 0.25, None)
        assert (got.detach().double() - full).abs().max() > 1e-3


def test_sliding_window_draft_runs_and_doctor_scorer_agrees(tiny_synthetic, tmp_path):
    d = load_draft(edited_copy(tiny_synthetic[0], tmp_path / "a", config=_window_cfg(4)))
    base = load_draft(tiny_synthetic[0])
    s = SampleSet(tiny_synthetic[1])[0]
    tokens = s.input_ids[1:]
    h = torch.cat([s.slots[i] for i in range(3)], -1)[:-1] @ d.weights["fc.weight"].T
    windowed = forward_steps(d, h, tokens, steps=3)
    plain = forward_steps(base, h, tokens, steps=3)
    for k in range(3):
        assert torch.isfinite(windowed[k]).all()
        assert (windowed[k][:4] - plain[k][:4]).abs().max() < 1e-4  # rows 0..3 see <= 4 keys
        assert (windowed[k][8:] - plain[k][8:]).abs().max() > 1e-3
    rows = torch.arange(0, h.shape[0], 3)
    shared = Step0Shared(d, tokens, 1)
    fast = step0_logits_at_rows(d, shared, h[None], rows)[0]
    assert (fast - windowed[0][rows]).abs().max() < 1e-4


# --- multi-layer drafts ---------------------------------------------------------------------------
def test_multi_layer_draft_layers_after_the_first_take_hidden_size(tiny_synthetic, tmp_path):
    """vLLM's layout for num_hidden_layers > 1: layer 0 reads [embedding | fc output] (2H), the
    later layers an ordinary H-wide residual stream with their own input norm."""
    g = torch.Generator().manual_seed(9)

    def second_layer(w):
        p = "layers.1."
        shapes = {
            "self_attn.q_proj.weight": (64, 64),
            "self_attn.k_proj.weight": (32, 64),
            "self_attn.v_proj.weight": (32, 64),
            "self_attn.o_proj.weight": (64, 64),
            "mlp.gate_proj.weight": (128, 64),
            "mlp.up_proj.weight": (128, 64),
            "mlp.down_proj.weight": (64, 128),
        }
        out = {p + k: torch.randn(*s, generator=g) / 8 for k, s in shapes.items()}
        out[p + "input_layernorm.weight"] = 0.5 + torch.rand(64, generator=g)
        out[p + "post_attention_layernorm.weight"] = 0.5 + torch.rand(64, generator=g)
        return out

    two = _layer_cfg(lambda c: c.update(num_hidden_layers=2))
    d = load_draft(edited_copy(tiny_synthetic[0], tmp_path / "c", tensors=second_layer, config=two))
    one = replace(d, config=replace(d.config, num_layers=1))
    s = SampleSet(tiny_synthetic[1])[0]
    h = torch.randn(s.length - 1, 64, generator=g)
    tokens = s.input_ids[1:]
    z2 = [z for _, z in iter_steps(d, h, tokens, steps=2)]
    z1 = [z for _, z in iter_steps(one, h, tokens, steps=2)]
    # layer 1 applied to layer 0's output, on its own: what the 2-layer step 0 must give
    cos, sin = rope_cos_sin(d.config, torch.arange(h.shape[0]) + 1, "cpu")
    manual = layer(d.config, resolve_layer(d, 1), z1[0][None], None, cos, sin, LayerCache())
    assert (z2[0] - manual[0]).abs().max() < 1e-5
    assert not torch.allclose(z2[1], z1[1])
    assert math.isfinite(float(rms_norm(z2[1], d.weights["norm.weight"], 1e-5).sum()))


# --- target_hidden_size, and the doctor on the variants ---------------------------------------------
def test_target_hidden_size_narrower_than_the_draft(tiny_synthetic, tmp_path):
    """fc takes slots x target_hidden_size columns (a target narrower than the draft): eval and
    the doctor run on samples of the target's width."""
    from inspector.doctor import DiagnoseSettings, diagnose
    from inspector.evaluate import Evaluator
    from inspector.synthetic import SyntheticSpec, write_samples

    g = torch.Generator().manual_seed(2)
    ht = 48

    def fc(w):
        return {"fc.weight": torch.randn(64, 3 * ht, generator=g) / (20 * ht**0.5)}

    def cfg(c):
        c["target_hidden_size"] = ht

    ckpt = edited_copy(tiny_synthetic[0], tmp_path / "c", tensors=fc, config=cfg)
    samples = tmp_path / "s"
    samples.mkdir()
    write_samples(samples, ht, 256, SyntheticSpec(n_samples=2, seq_len=20))
    d = load_draft(ckpt)
    assert (d.config.target_hidden_size, d.config.num_fc_blocks) == (ht, 3)
    ev = Evaluator(d, SampleSet(samples), ttt_steps=3)
    report = ev.run([ev.wiring("train")])
    assert report.samples == 2 and len(report.wirings[0].steps) == 3
    _assert_best_is_evals_best(ev, diagnose(ev, DiagnoseSettings(2)))


def _assert_best_is_evals_best(ev, doc) -> None:
    """The doctor's best wiring leads its own ranking (hits, then the true token's log-prob),
    and its counts are eval's step-0 all-tok counts on the same samples."""
    from inspector.wiring import Wiring

    best = max((w for w in doc.wirings if w.complete), key=lambda w: (w.all_tok.hits, w.mean_logp))
    assert tuple(doc.best_wiring) == best.wiring
    rep = ev.run([Wiring(best.wiring)], indices=doc.sample_indices)
    assert rep.wirings[0].steps[0].all_tok == best.all_tok
    assert best.all_tok.total > 0


def test_doctor_runs_on_a_sliding_window_draft(tiny_synthetic, tmp_path):
    from inspector.doctor import DiagnoseSettings, diagnose
    from inspector.evaluate import Evaluator

    d = load_draft(edited_copy(tiny_synthetic[0], tmp_path / "a", config=_window_cfg(6)))
    ev = Evaluator(d, SampleSet(tiny_synthetic[1]), ttt_steps=2)
    doc = diagnose(ev, DiagnoseSettings(2))
    _assert_best_is_evals_best(ev, doc)
    assert all(math.isfinite(w.all_tok.acc) for w in doc.wirings)


def test_write_fixed_moves_specforge_aux_norms_with_the_blocks(tiny_synthetic, tmp_path):
    """`--write-fixed` reorders fc's blocks: SpecForge's aux_norm_{low,mid,high} (read as
    fc_norm.{0,1,2}) move with them, under their own names."""
    from safetensors.torch import load_file

    from inspector.doctor.fix import write_fixed
    from inspector.doctor.report import DoctorReport
    from inspector.evaluate import Evaluator

    g = torch.Generator().manual_seed(8)

    def aux(w):
        return {
            f"aux_norm_{n}.weight": 0.5 + torch.rand(64, generator=g)
            for n in ("low", "mid", "high")
        }

    ckpt = edited_copy(
        tiny_synthetic[0], tmp_path / "c", tensors=aux, config=lambda c: c.update(use_aux_norm=True)
    )
    ev = Evaluator(load_draft(ckpt), SampleSet(tiny_synthetic[1]))
    assert ev.draft.config.fc_norm
    wiring = (2, 0, 1)  # ascending order: blocks 1, 2, 0
    report = DoctorReport(
        best_wiring=wiring,
        wirings=[],
        findings=[],
        serving_config=None,
        recommended_wiring=wiring,
        slots=list(ev.slot_info),
        sample_indices=[0, 1],
    )
    res = write_fixed(ev, report, tmp_path / "out")
    orig = load_file(str(ckpt / "model.safetensors"))
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    names = ("low", "mid", "high")
    for k, old in enumerate((1, 2, 0)):
        assert torch.equal(
            got[f"aux_norm_{names[k]}.weight"], orig[f"aux_norm_{names[old]}.weight"]
        )
    assert res.verified and res.verification.positions_differing == 0
