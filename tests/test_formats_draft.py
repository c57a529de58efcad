"""Draft loading in the less common layouts (SGLang extra layers, no saved embedding) and the exact
line for each refused tensor; slot labels of every sample format."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from hostile import H, V, World, build_world
from safetensors.torch import load_file, save_file

from inspector.errors import InputError
from inspector.formats import load_draft, load_sample


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> World:
    return build_world(tmp_path_factory.mktemp("d") / "w")


def _copy(base: World, dest: Path, edit=None, cfg_edit=None) -> Path:
    shutil.copytree(base.ckpt, dest)
    if edit is not None:
        state = load_file(str(dest / "model.safetensors"))
        edit(state)
        save_file({k: v.contiguous() for k, v in state.items()}, str(dest / "model.safetensors"))
    if cfg_edit is not None:
        cfg = json.loads((dest / "config.json").read_text())
        cfg_edit(cfg)
        (dest / "config.json").write_text(json.dumps(cfg))
    return dest


def _err(fn, *a, **k) -> str:
    with pytest.raises(InputError) as e:
        fn(*a, **k)
    return str(e.value)


def _sglang(state: dict) -> None:
    """Rename to SGLang's export names and add a second layer that uses hidden_norm as its input norm."""
    for k in list(state):
        if k.startswith("layers.0."):
            state["model.midlayer." + k[len("layers.0.") :]] = state.pop(k)
        elif k in ("fc.weight", "norm.weight"):
            state["model." + k] = state.pop(k)
    g = torch.Generator().manual_seed(3)
    p = "model.additional_layers.0."
    for name, shape in {
        "self_attn.q_proj.weight": (64, H),
        "self_attn.k_proj.weight": (32, H),
        "self_attn.v_proj.weight": (32, H),
        "self_attn.o_proj.weight": (H, 64),
        "mlp.gate_proj.weight": (128, H),
        "mlp.up_proj.weight": (128, H),
        "mlp.down_proj.weight": (H, 128),
        "hidden_norm.weight": (H,),
        "post_attention_layernorm.weight": (H,),
    }.items():
        state[p + name] = torch.randn(*shape, generator=g) / 8


def test_sglang_export_with_an_extra_layer(base: World, tmp_path: Path) -> None:
    def two_layers(cfg: dict) -> None:
        cfg["transformer_layer_config"]["num_hidden_layers"] = 2

    ckpt = _copy(base, tmp_path / "c", _sglang, two_layers)
    d = load_draft(ckpt)
    assert d.config.num_layers == 2
    # the extra layer's input norm is its hidden_norm
    assert torch.equal(
        d.weights["layers.1.input_layernorm.weight"], d.weights["layers.1.hidden_norm.weight"]
    )
    assert d.weights["layers.1.self_attn.q_proj.weight"].shape == (64, H)  # H inputs, not 2H
    assert d.weights["layers.0.self_attn.q_proj.weight"].shape == (64, 2 * H)
    assert "fc.weight" in d.weights and "norm.weight" in d.weights

    # the first layer never borrows hidden_norm for a missing input norm
    def no_input_norm(state: dict) -> None:
        _sglang(state)
        del state["model.midlayer.input_layernorm.weight"]

    ckpt = _copy(base, tmp_path / "c0", no_input_norm, two_layers)
    assert (
        _err(load_draft, ckpt)
        == f"{ckpt / 'model.safetensors'}: layers.0.input_layernorm.weight: tensor not found"
    )

    def no_norms(state: dict) -> None:
        _sglang(state)
        del state["model.additional_layers.0.hidden_norm.weight"]

    ckpt = _copy(base, tmp_path / "c1", no_norms, two_layers)
    assert (
        _err(load_draft, ckpt)
        == f"{ckpt / 'model.safetensors'}: layers.1.input_layernorm.weight: tensor not found"
    )


def test_embedding_from_embed_or_target(base: World, tmp_path: Path) -> None:
    ckpt = _copy(base, tmp_path / "c", lambda s: s.pop("embed_tokens.weight"))
    wf = ckpt / "model.safetensors"
    assert _err(load_draft, ckpt) == (
        f"{wf}: embed_tokens.weight: absent (SpecForge/SGLang exports drop it): pass --target DIR or --embed FILE"
    )
    embed = load_file(str(base.target / "model.safetensors"))["model.embed_tokens.weight"]
    d = load_draft(ckpt, target=base.target)
    assert torch.equal(d.weights["embed_tokens.weight"], embed)
    assert d.notes == [f"embedding from target {base.target}"]
    f = tmp_path / "e.safetensors"
    save_file({"model.embed_tokens.weight": embed * 2}, str(f))
    d = load_draft(ckpt, embed=f, target=base.target)  # --embed wins over --target
    assert torch.equal(d.weights["embed_tokens.weight"], embed * 2)
    assert d.notes == [f"embedding from {f}"]
    d = load_draft(base.ckpt, embed=f)  # and over a saved embedding
    assert torch.equal(d.weights["embed_tokens.weight"], embed * 2)
    save_file({"model.embed_tokens.weight": torch.ones(V, H + 1)}, str(f))
    assert _err(load_draft, ckpt, embed=f) == (
        f"{f}: model.embed_tokens.weight: shape ({V}, {H + 1}), expected ({V}, {H}) (the draft's [vocab_size, hidden_size])"
    )
    assert (
        _err(load_draft, ckpt, embed=tmp_path / "nope.safetensors")
        == f"{tmp_path / 'nope.safetensors'}: file not found"
    )


@pytest.mark.parametrize(
    "edit,text",
    [
        (
            lambda s: s.__setitem__("lm_head.weight", torch.ones(95, H)),
            f"lm_head.weight: shape (95, {H}), expected (96, {H}) (draft_vocab_size)",
        ),
        (
            lambda s: s.__setitem__("norm.weight", torch.ones(3)),
            f"norm.weight: shape (3,), expected ({H},)",
        ),
        (
            lambda s: s.__setitem__("embed_tokens.weight", torch.ones(V, 3)),
            f"embed_tokens.weight: shape ({V}, 3), expected ({V}, {H})",
        ),
        (
            lambda s: s.__setitem__("layers.0.mlp.up_proj.weight", torch.ones(128, 3)),
            f"layers.0.mlp.up_proj.weight: shape (128, 3), expected (128, {H})",
        ),
        (
            lambda s: s.__setitem__("norm.weight", torch.ones(H, dtype=torch.int32)),
            "norm.weight: dtype torch.int32, expected a floating type",
        ),
        (
            lambda s: s.__setitem__("fc.weight", torch.ones(H, 3 * H, dtype=torch.int32)),
            "fc.weight: dtype torch.int32, expected a floating type",
        ),
        (lambda s: s.pop("lm_head.weight"), "lm_head.weight: tensor not found"),
        (
            lambda s: s.pop("layers.0.hidden_norm.weight"),
            "layers.0.hidden_norm.weight: tensor not found",
        ),
        (
            lambda s: s.pop("layers.0.self_attn.q_proj.weight"),
            "midlayer.self_attn.q_proj.weight: tensor not found",
        ),
        (
            lambda s: s.__setitem__("layers.0.self_attn.q_proj.weight", torch.ones(66, 2 * H)),
            f"q_proj.weight: (66, {2 * H}): rows not divisible by 4 heads",
        ),
        (
            lambda s: s.__setitem__("layers.0.self_attn.q_proj.weight", torch.ones(64)),
            "q_proj.weight: (64,): rows not divisible by 4 heads",
        ),
        (
            lambda s: s.__setitem__("fc.weight", torch.ones(H, 0)),
            f"fc.weight: 0 input columns are not a multiple of target_hidden_size {H}",
        ),
        (
            lambda s: s.__setitem__("fc.weight", torch.ones(H + 1, 3 * H)),
            f"fc.weight: shape ({H + 1}, {3 * H}), expected [{H}, N*{H}]",
        ),
        (
            lambda s: s.__setitem__("model.fc.weight", s["fc.weight"].clone()),
            "model.fc.weight: a second tensor named fc.weight once renamed",
        ),
        (
            lambda s: s.__setitem__("layers.0.self_attn.k_norm.weight", torch.ones(3)),
            "layers.0.self_attn.k_norm.weight: shape (3,), expected (16,)",
        ),
        (
            lambda s: s.__setitem__("fc_norm.0.weight", torch.ones(H)),
            "fc_norm.1.weight: tensor not found (fc_norm is set)",
        ),
        (
            lambda s: s.update(
                {
                    "fc_norm.0.weight": torch.ones(3),
                    "fc_norm.1.weight": torch.ones(H),
                    "fc_norm.2.weight": torch.ones(H),
                }
            ),
            f"fc_norm.0.weight: shape (3,), expected ({H},)",
        ),
        (
            lambda s: s.__setitem__("layers.0.input_layernorm.weight", torch.full((H,), math.inf)),
            "layers.0.input_layernorm.weight: contains NaN or Inf",
        ),
    ],
)
def test_refused_tensors_name_the_weight_file(base: World, tmp_path: Path, edit, text) -> None:
    ckpt = _copy(base, tmp_path / "c", edit)
    assert _err(load_draft, ckpt) == f"{ckpt / 'model.safetensors'}: {text}"


def test_fc_norms_and_input_norm_found_in_the_weights(base: World, tmp_path: Path) -> None:
    def norms(s: dict) -> None:
        for i in range(3):
            s[f"fc_norm.{i}.weight"] = torch.ones(H)
        s["input_norm.weight"] = torch.ones(3 * H)
        s["layers.0.self_attn.q_norm.weight"] = torch.ones(16)

    d = load_draft(_copy(base, tmp_path / "c", norms))
    assert d.config.fc_norm and d.config.norm_before_fc and d.config.num_fc_blocks == 3
    assert "layers.0.self_attn.q_norm.weight" in d.weights
    ckpt = _copy(base, tmp_path / "c2", cfg_edit=lambda c: c.__setitem__("norm_before_fc", True))
    assert (
        _err(load_draft, ckpt)
        == f"{ckpt / 'model.safetensors'}: input_norm.weight: tensor not found (norm_before_fc is set)"
    )


def test_target_hidden_size_sets_the_slot_width(base: World, tmp_path: Path) -> None:
    def wide(s: dict) -> None:
        s["fc.weight"] = torch.randn(H, 4 * 32) / 8

    ckpt = _copy(base, tmp_path / "c", wide, lambda c: c.__setitem__("target_hidden_size", 32))
    d = load_draft(ckpt)
    assert (d.config.target_hidden_size, d.config.num_fc_blocks) == (32, 4)
    assert d.fc_block(3).shape == (H, 32)


# --- slot labels ----------------------------------------------------------------------------
def _save(path: Path, **d) -> Path:
    torch.save({"input_ids": torch.arange(3), "loss_mask": torch.ones(3), **d}, path)
    return path


def test_slot_labels_per_format(tmp_path: Path) -> None:
    specforge = _save(
        tmp_path / "a.ckpt", aux_hidden_state=torch.ones(3, 6), hidden_state=torch.ones(3, 2)
    )
    infos = load_sample(specforge, [2, 4, 6]).slot_info
    assert [(i.label, i.hf_index, i.post_norm, i.verifier) for i in infos] == [
        ("L2", 2, False, False),
        ("L4", 4, False, False),
        ("L6", 6, False, False),
        ("final(post-norm)", None, True, True),
    ]
    infos = load_sample(specforge, [2, 4]).slot_info  # ids that do not fit: positional labels
    assert [i.label for i in infos] == ["aux0", "aux1", "aux2", "final(post-norm)"]
    assert all(i.hf_index is None for i in infos)
    assert [i.label for i in load_sample(specforge).slot_info] == [
        "aux0",
        "aux1",
        "aux2",
        "final(post-norm)",
    ]
    v1 = _save(tmp_path / "b.pt", hidden_states=[torch.ones(3, 2)] * 3)
    infos = load_sample(v1, [0, 3, 7]).slot_info
    assert [(i.label, i.hf_index, i.post_norm, i.verifier) for i in infos] == [
        ("embed", 0, False, False),
        ("L3", 3, False, False),
        ("L7", 7, False, True),
    ]
    assert [(i.label, i.verifier) for i in load_sample(v1).slot_info] == [
        ("s0", False),
        ("s1", False),
        ("s2", True),
    ]
    with pytest.raises(InputError) as e:
        load_sample(v1, [0, 3])
    assert str(e.value) == f"{v1}: hidden_states: 3 slots but data_config.json names 2 layer ids"
    v0 = _save(tmp_path / "c.pt", hidden_state=torch.ones(3, 4), target=torch.ones(3, 2))
    infos = load_sample(v0).slot_info
    assert [(i.label, i.verifier, i.post_norm) for i in infos] == [
        ("s0", False, False),
        ("s1", False, False),
        ("target", True, False),
    ]
    assert [i.label for i in load_sample(v0, [1, 2, 9]).slot_info] == ["L1", "L2", "L9"]


MLA_ATTENTION = {  # the golden MLA draft's attention tensors, as the loader must check them
    "q_a_proj.weight": (24, 128),
    "q_a_layernorm.weight": (24,),
    "q_b_proj.weight": (96, 24),
    "kv_a_proj_with_mqa.weight": (24, 128),
    "kv_a_layernorm.weight": (16,),
    "kv_b_proj.weight": (112, 16),
    "o_proj.weight": (64, 48),
}


@pytest.mark.parametrize("name", sorted(MLA_ATTENTION))
def test_mla_attention_tensors_are_required_and_shape_checked(golden, tmp_path, name):
    from support import edited_copy

    src = golden / "specforge-mla" / "checkpoint"
    stored = f"midlayer.self_attn.{name}"
    good = MLA_ATTENTION[name]
    assert tuple(load_file(str(src / "model.safetensors"))[stored].shape) == good
    bad = (good[0] + 1, *good[1:])
    short = edited_copy(src, tmp_path / "short", tensors=lambda w: {stored: torch.ones(bad)})
    with pytest.raises(InputError) as e:
        load_draft(short)
    assert str(e.value).endswith(f"layers.0.self_attn.{name}: shape {bad}, expected {good}")
    gone = tmp_path / "gone"
    shutil.copytree(src, gone)
    w = load_file(str(gone / "model.safetensors"))
    del w[stored]
    save_file(w, str(gone / "model.safetensors"))
    with pytest.raises(InputError) as e:
        load_draft(gone)
    assert str(e.value).endswith(f"layers.0.self_attn.{name}: tensor not found")


def test_mla_without_q_lora_checks_q_proj(golden, tmp_path):
    """q_lora_rank null: one q_proj [heads x qk_head_dim, 2H] instead of q_a / q_b."""
    from support import edited_copy

    src = golden / "specforge-mla" / "checkpoint"

    def q_proj(shape):
        def edit(w):
            for k in [k for k in w if ".q_a_" in k or ".q_b_" in k]:
                del w[k]
            return {"midlayer.self_attn.q_proj.weight": torch.ones(shape)}

        return edit

    def no_lora(cfg):
        cfg["q_lora_rank"] = None

    ok = edited_copy(src, tmp_path / "ok", tensors=q_proj((96, 128)), config=no_lora)
    draft = load_draft(ok)
    assert draft.config.mla.q_lora_rank is None
    assert not any(".q_a_" in k or ".q_b_" in k for k in draft.weights)
    bad = edited_copy(src, tmp_path / "bad", tensors=q_proj((96, 64)), config=no_lora)
    with pytest.raises(InputError) as e:
        load_draft(bad)
    assert str(e.value).endswith(
        "layers.0.self_attn.q_proj.weight: shape (96, 64), expected (96, 128)"
    )


def test_mla_config_fields(golden):
    """read_mla: the sizes as stated, q_lora_rank optional, rope_interleave true unless false."""
    from inspector.formats.config import parse_draft_config

    cfg = json.loads((golden / "specforge-mla" / "checkpoint" / "config.json").read_text())
    m = parse_draft_config("c.json", cfg).config.mla
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim) == (
        24,
        16,
        16,
        8,
    )
    assert m.v_head_dim == 12 and m.rope_interleave is True
    del cfg["rope_interleave"], cfg["q_lora_rank"]
    m = parse_draft_config("c.json", cfg).config.mla
    assert m.rope_interleave is True and m.q_lora_rank is None
    m = parse_draft_config("c.json", {**cfg, "rope_interleave": False}).config.mla
    assert m.rope_interleave is False
    assert parse_draft_config("c.json", {**cfg, "q_lora_rank": 8}).config.mla.q_lora_rank == 8
