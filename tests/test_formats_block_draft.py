"""The block-draft adapter (inspector.formats.block_draft): its one-line errors, the family
detection, the default layer ids, and the commands' one-line refusal."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.errors import InputError
from inspector.formats import load_block_draft, load_draft
from inspector.formats.block_draft import block_family, build_target_layer_ids

ROOT = Path(__file__).parent / "golden_block"
TARGET = ROOT / "target"


def _copy(tmp: Path, which: str = "dflash") -> Path:
    folder = tmp / which
    shutil.copytree(ROOT / which / "checkpoint", folder)
    return folder


def _edit_config(folder: Path, edit: Callable[[dict], None]) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    edit(cfg)
    (folder / "config.json").write_text(json.dumps(cfg))


def _edit_weights(folder: Path, edit: Callable[[dict], None]) -> None:
    w = load_file(str(folder / "model.safetensors"))
    edit(w)
    save_file(w, str(folder / "model.safetensors"))


def _sub(**kv) -> Callable[[dict], None]:
    return lambda c: c["dflash_config"].update(kv)


def _pop_sub(key: str) -> Callable[[dict], None]:
    return lambda c: c["dflash_config"].pop(key)


def _top(**kv) -> Callable[[dict], None]:
    return lambda c: c.update(kv)


def _error(folder: Path, **kwargs) -> str:
    with pytest.raises(InputError) as e:
        load_block_draft(folder, **kwargs)
    line = str(e.value)
    assert "\n" not in line
    return line


CONFIG_ERRORS = [
    (_pop_sub("mask_token_id"), "config.json: dflash_config.mask_token_id: missing"),
    (
        _sub(mask_token_id=300),
        "config.json: dflash_config.mask_token_id: expected a token id in [0, 256), got 300",
    ),
    (
        _sub(target_layer_ids=[1, 4, 8]),
        "config.json: dflash_config.target_layer_ids: 8 reads hidden_states[9], past the "
        "target's 8 layers",
    ),
    (
        _sub(target_layer_ids=[1, -1, 4]),
        "config.json: dflash_config.target_layer_ids: -1 is below 0",
    ),
    (_sub(target_layer_ids="1,4,6"), "dflash_config.target_layer_ids: expected a list of integers"),
    (_sub(target_layer_ids=[]), "dflash_config.target_layer_ids: empty"),
    (
        lambda c: (c["dflash_config"].pop("target_layer_ids"), c.pop("num_target_layers")),
        "config.json: dflash_config.target_layer_ids: missing, and no num_target_layers",
    ),
    (_sub(block_size=1), "config.json: dflash_config.block_size: 1: a block drafts"),
    (_sub(block_size="4"), "dflash_config.block_size: expected a positive integer, got '4'"),
    (_sub(final_logit_softcapping="x"), "dflash_config.final_logit_softcapping: expected a number"),
    (_sub(input_embedding_scale=0), "dflash_config.input_embedding_scale: expected a positive"),
    (_top(layer_types=["full_attention"]), "config.json: layer_types: 1 entries for 2 layers"),
    (
        _top(layer_types=["full_attention", "linear_attention"]),
        "layer_types: layer 1 is 'linear_attention': not supported",
    ),
    (_top(sliding_window=0), "config.json: sliding_window: expected a positive integer, got 0"),
    (_top(is_causal="yes"), "config.json: is_causal: expected true or false"),
    (_top(num_key_value_heads=3), "config.json: num_key_value_heads: 3 does not divide 4 heads"),
    (_top(hidden_size=None), "config.json: hidden_size: missing"),
    (
        _sub(use_swa=True),
        "config.json: dflash_config.use_swa: true, but no window",
    ),
    (
        _sub(attention_mode="mla"),  # SpecForge's MLA DFlash layers
        "config.json: dflash_config.attention_mode: 'mla': not supported (only gqa, mha)",
    ),
    (_sub(attention_modes=["gqa", "kda"]), "dflash_config.attention_modes: 'kda': not supported"),
]


@pytest.mark.parametrize("edit,line", CONFIG_ERRORS)
def test_config_errors_name_file_and_field(tmp_path, edit, line):
    folder = _copy(tmp_path)
    _edit_config(folder, edit)
    assert line in _error(folder, target=TARGET)


def test_missing_head_dim_is_qwen3s_default(tmp_path):
    """A config.json without head_dim reads Qwen3Config's 128 (the reference's and vLLM's), not
    hidden / heads: q_proj then disagrees, and the line says why."""
    folder = _copy(tmp_path)
    _edit_config(folder, lambda c: c.pop("head_dim"))
    line = _error(folder, target=TARGET)
    assert "layers.0.self_attn.q_proj.weight: shape (64, 64), expected (512, 64)" in line
    assert "head_dim absent: Qwen3Config's default 128" in line


def test_default_ids_that_disagree_with_fc_are_named(tmp_path):
    """Ids absent: the reference's default spread, one per draft layer; a draft whose fc reads
    another number of layers cannot have been trained on it."""
    folder = _copy(tmp_path)
    _edit_config(folder, _pop_sub("target_layer_ids"))
    line = _error(folder, target=TARGET)
    assert "fc.weight: 192 input columns, but 2 target_layer_ids x 64 = 128" in line


def test_default_ids_load_with_a_note(tmp_path):
    folder = _copy(tmp_path)
    # three draft layers' worth of ids would need three layers: give the default 2 layers' fc
    _edit_config(folder, _pop_sub("target_layer_ids"))
    _edit_weights(folder, lambda w: w.update({"fc.weight": w["fc.weight"][:, :128].contiguous()}))
    draft = load_block_draft(folder, target=TARGET)
    block = draft.config.block
    assert block is not None
    assert block.layer_ids == (1, 5) and block.layer_ids_source == "default"
    assert any("the reference's default [1, 5]" in n for n in draft.notes)


WEIGHT_ERRORS = [
    (
        lambda w: w.pop("layers.1.self_attn.k_norm.weight"),
        "layers.1.self_attn.k_norm.weight: tensor not found",
    ),
    (
        lambda w: w.update({"extra.weight": torch.zeros(3)}),
        "extra.weight: not a tensor of this block draft's layout",
    ),
    (
        lambda w: w.update({"hidden_norm.weight": torch.zeros(32)}),
        "hidden_norm.weight: shape (32,), expected (64,)",
    ),
    (
        lambda w: w.update({"norm.weight": torch.full((64,), float("nan"))}),
        "norm.weight: contains NaN or Inf",
    ),
    (lambda w: w.update({"d2t": torch.zeros(256, dtype=torch.long)}), "d2t: a draft-vocab map"),
    (
        lambda w: w.update({"fc.weight": torch.zeros(64, 100)}),
        "fc.weight: 100 input columns, but 3 target_layer_ids x 64 = 192",
    ),
]


@pytest.mark.parametrize("edit,line", WEIGHT_ERRORS)
def test_weight_errors_name_file_and_field(tmp_path, edit, line):
    folder = _copy(tmp_path)
    _edit_weights(folder, edit)
    assert f"model.safetensors: {line}" in _error(folder, target=TARGET)


def test_the_target_supplies_embedding_and_head(tmp_path):
    folder = _copy(tmp_path)
    assert "embed_tokens.weight: absent (a DFlash draft embeds with the target's)" in _error(folder)
    line = _error(folder, embed=TARGET)
    assert "lm_head.weight: absent (a DFlash draft predicts with the target's head)" in line


def test_mask_embedding_file_must_match_the_mask_token(tmp_path):
    folder = _copy(tmp_path)
    torch.save({"embedding": torch.zeros(64), "mask_token_id": 7}, folder / "mask_embedding.pt")
    assert "mask_embedding.pt: mask_token_id: 7, but config.json's is 250" in _error(
        folder, target=TARGET
    )
    torch.save(torch.zeros(63), folder / "mask_embedding.pt")
    assert "mask_embedding: shape (63,), expected (64,)" in _error(folder, target=TARGET)


DFLASH2_ERRORS = [
    (_sub(conv_group_size=7), "dflash_config.conv_group_size: 7 does not divide hidden_size 64"),
    (_pop_sub("selector_rank"), "config.json: selector_rank: missing: expected a positive integer"),
    (_sub(selector_top_k=1000), "dflash_config.selector_top_k: 1000 exceeds vocab_size 256"),
]


@pytest.mark.parametrize("edit,line", DFLASH2_ERRORS)
def test_dflash2_errors(tmp_path, edit, line):
    folder = _copy(tmp_path, "dflash2")
    _edit_config(folder, edit)
    assert line in _error(folder, target=TARGET)


def test_dflash2_codebooks_load_under_either_name(tmp_path):
    """The released DFlash2 files name the codebooks without `.weight` (the fixture does); the
    reference's own save_pretrained writes `.weight`: both are the same canonical tensor."""
    folder = _copy(tmp_path, "dflash2")
    a = load_block_draft(folder, target=TARGET)
    _edit_weights(
        folder,
        lambda w: w.update(
            {
                f"candidate_selector.{n}.weight": w.pop(f"candidate_selector.{n}")
                for n in ("predecessor_codebook", "successor_codebook")
            }
        ),
    )
    b = load_block_draft(folder, target=TARGET)
    for name, t in a.weights.items():
        assert torch.equal(b.weights[name], t), name


def test_vllm_names_and_keys(tmp_path):
    """vLLM 0.32's names (`model.` prefixes, Muse-Glimmer's `encoder.fc.`) and its reading of
    `dflash_config.causal`, noted where the reference reads otherwise."""
    folder = _copy(tmp_path)
    renames = {"fc.weight": "encoder.fc.weight", "norm.weight": "model.norm.weight"}
    _edit_weights(folder, lambda w: w.update({new: w.pop(old) for old, new in renames.items()}))
    _edit_config(folder, _sub(causal=True))
    draft = load_block_draft(folder, target=TARGET)
    assert draft.config.block is not None and draft.config.block.causal == (True, True)
    assert any("dflash_config.causal" in n for n in draft.notes)
    assert "fc.weight" in draft.weights and "norm.weight" in draft.weights


def test_eagle_ids_that_disagree_are_noted(tmp_path):
    folder = _copy(tmp_path)
    _edit_config(folder, _top(eagle_aux_hidden_state_layer_ids=[1, 4, 6]))
    draft = load_block_draft(folder, target=TARGET)
    assert any(
        "differs from dflash_config.target_layer_ids + 1 = [2, 5, 7]" in n for n in draft.notes
    )


@pytest.mark.parametrize(
    "config,family",
    [
        ({"architectures": ["DFlashDraftModel"]}, "dflash"),
        ({"architectures": ["DFlash2DraftModel"]}, "dflash2"),
        ({"dflash_config": {"mask_token_id": 5}}, "dflash"),
        ({"dflash_config": {"conv_kernel_size": 4}}, "dflash2"),
        ({"dflash_config": {"projector_type": "dspark"}}, "dspark"),  # SpecForge's DSpark
        ({"dflash_config": {"projector_type": "domino"}}, None),
        ({"architectures": ["DSparkDraftModel"]}, None),
        ({"speculators_model_type": "dflash"}, "dflash"),  # speculators' layout
        ({"speculators_model_type": "dspark"}, "dspark"),
        ({"architectures": ["LlamaForCausalLMEagle3"]}, None),
        ({"architectures": ["PEagleDraftModel"], "dflash_config": {"mask_token_id": 5}}, None),
    ],
)
def test_block_family(config, family):
    assert block_family(config) == family


def test_commands_refuse_block_drafts_in_one_line():
    """compare and the other replays load through load_draft: a DFlash draft is one line there."""
    with pytest.raises(InputError) as e:
        load_draft(ROOT / "dflash" / "checkpoint", target=TARGET)
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith("tests/golden_block/dflash/checkpoint/config.json: architectures: ") or (
        "config.json: architectures: 'DFlashDraftModel'" in line
    )
    assert "eval, doctor, accept and the app run block drafts" in line


def test_the_replays_say_so_and_exit_2(capsys):
    from inspector.cli import main

    ckpt = str(ROOT / "dflash" / "checkpoint")
    argv = ["compare", ckpt, ckpt, str(ROOT), "--target", str(TARGET)]
    assert main([*argv, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "dflash/checkpoint/config.json: architectures: 'DFlashDraftModel'" in err
    assert "eval, doctor, accept and the app run block drafts" in err
    assert "Traceback" not in err


def test_doctor_without_target_names_the_embedding(capsys):
    """A DFlash draft borrows the target's embedding and head: without --target the doctor
    stops in one line saying so (not with a head finding)."""
    from inspector.cli import main

    argv = ["doctor", str(ROOT / "dflash" / "checkpoint"), str(ROOT), "--device", "cpu"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "embed_tokens.weight: absent (a DFlash draft embeds with the target's)" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "layers,draft_layers,ids",
    [
        (64, 5, [1, 16, 31, 46, 61]),  # SGLang's guess for Qwen3.8-27B-DFlash2 (64 layers)
        (36, 5, [1, 9, 17, 25, 33]),
        (36, 1, [18]),  # one draft layer: L // 2
        (9, 3, [1, 4, 6]),  # 1 + 2.5 rounds half to even: 4
        (11, 3, [1, 4, 8]),  # 1 + 3.5: 4
        (4, 2, [1, 1]),
    ],
)
def test_build_target_layer_ids(layers, draft_layers, ids):
    """Values the reference's own function gives (checked against it for every L in 4..80 and
    1..8 draft layers when this was written)."""
    assert build_target_layer_ids(layers, draft_layers) == ids


def test_the_default_is_not_what_a_draft_was_trained_on():
    """Qwen3.8-27B-DFlash2 was trained on [5, 19, 33, 47, 61]: a config without the ids gets
    SGLang's (the reference's default) guess, 4 of 5 layers wrong, and nothing errors."""
    guess = build_target_layer_ids(64, 5)
    trained = [5, 19, 33, 47, 61]
    assert sum(g != t for g, t in zip(guess, trained, strict=True)) == 4


def test_build_target_layer_ids_refuses_too_few_layers():
    with pytest.raises(ValueError):
        build_target_layer_ids(3, 2)
    with pytest.raises(ValueError):
        build_target_layer_ids(0, 1)
