"""`doctor --parent`: what a fine-tune changed or dropped against its parent, capture ids first
(ModelOpt PR #2149: fine-tuning released DFlash/DSpark drafts overwrote their capture layers with
the trainer's defaults and dropped attention-sink tensors). Parents are drafts trained here: the
demo's EAGLE-3 draft and the block bed's DFlash draft."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.cli import main
from inspector.doctor.checks.parent_diff import diff_against_parent, parent_diff_finding
from inspector.errors import InputError

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"
HELD = DEMO / "samples" / "held"
SINKS = "layers.0.self_attn.sinks"  # an attention-sink tensor the loader does not read
KEY = "eagle_aux_hidden_state_layer_ids"
STEP = 0.01  # the planted fine-tune's relative change of fc.weight

pytestmark = pytest.mark.usefixtures("one_thread")


def _copy(src: Path, dst: Path) -> tuple[dict, dict]:
    shutil.copytree(src, dst)
    return load_file(str(dst / "model.safetensors")), json.loads((dst / "config.json").read_text())


def _save(folder: Path, t: dict, cfg: dict) -> Path:
    save_file(t, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _lineage(tmp_path: Path) -> tuple[Path, Path]:
    """The demo draft with an attention-sink tensor (the parent), and its fine-tune: ids
    [0, 2, 4] overwritten with [1, 3, 5], embed_requires_grad flipped, fc moved by STEP of its
    norm (in float64, rounded once to float32), the sinks dropped."""
    t, cfg = _copy(DEMO / "draft", tmp_path / "parent")
    t[SINKS] = torch.linspace(-1, 1, cfg["transformer_layer_config"]["num_attention_heads"])
    parent = _save(tmp_path / "parent", t, cfg)
    t, cfg = _copy(parent, tmp_path / "child")
    fc = t["fc.weight"].double()
    noise = torch.randn(fc.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    t["fc.weight"] = (fc + STEP * fc.norm() * noise / noise.norm()).float()
    del t[SINKS]
    cfg["eagle_aux_hidden_state_layer_ids"] = [1, 3, 5]
    cfg["embed_requires_grad"] = True
    return parent, _save(tmp_path / "child", t, cfg)


def test_the_fine_tune_s_changes_are_listed_capture_ids_first(capsys, tmp_path):
    parent, child = _lineage(tmp_path)
    capsys.readouterr()
    argv = ["doctor", str(child), str(HELD), "--samples", "2", "--json", "--device", "cpu"]
    main([*argv, "--parent", str(parent)])
    doc = json.loads(capsys.readouterr().out)
    f = next(f for f in doc["findings"] if f["kind"] == "parent_diff")
    assert f["severity"] == "warning", f["summary"]
    ev = f["evidence"]
    assert ev["capture_ids"] == {
        "changed": True,
        "parent": {"ids": [0, 2, 4], "key": KEY, "hf_layers": [0, 2, 4]},
        "checkpoint": {"ids": [1, 3, 5], "key": KEY, "hf_layers": [1, 3, 5]},
    }
    assert ev["config_fields"] == [{"key": "embed_requires_grad", "parent": False, "child": True}]
    dropped, changed = ev["tensors"]
    assert dropped == {"name": SINKS, "change": "dropped", "parent_shape": [4]}
    assert changed["name"] == "fc.weight" and changed["change"] == "changed"
    # one float32 rounding of fc + delta moves the measured ratio by at most u32 * |fc + delta|
    # / |fc| <= u32 * (1 + STEP)
    u32 = torch.finfo(torch.float32).eps / 2
    assert abs(changed["relative_change"] - STEP) <= u32 * (1 + STEP)
    assert ev["tensors_unchanged"] == 15  # every other stored tensor, d2t and t2d included
    s = f["summary"]
    assert s.index("capture ids changed") < s.index("config fields") < s.index("dropped")
    assert "trainer's defaults" in f["fix"] and "dropped tensors" in f["fix"]
    # the vocab map did not move: the older --parent finding still comes
    assert any(g["kind"] == "vocab_moved" for g in doc["findings"])


def test_a_specforge_export_of_the_same_layers_keeps_its_capture_ids(tmp_path):
    """speculators' top-level [0, 2, 4] and SpecForge's eagle_config [-1, 1, 3] (SGLang ids, HF
    index - 1) name HF layers 0, 2, 4 both: no change, the raw ids shown beside."""
    t, cfg = _copy(DEMO / "draft", tmp_path / "specforge")
    assert cfg.pop(KEY) == [0, 2, 4]
    cfg["eagle_config"] = {KEY: [-1, 1, 3]}
    child = _save(tmp_path / "specforge", t, cfg)
    diff = diff_against_parent(child, DEMO / "draft")
    assert not diff.capture_changed
    assert diff.capture_child.to_dict() == {
        "ids": [-1, 1, 3],
        "key": f"eagle_config.{KEY}",
        "hf_layers": [0, 2, 4],
    }
    f = parent_diff_finding(diff)
    assert f.severity == "info" and "capture ids changed" not in f.summary
    # SGLang ids that do move a layer are still a change
    cfg["eagle_config"] = {KEY: [-1, 1, 4]}
    moved = diff_against_parent(_save(tmp_path / "specforge", t, cfg), DEMO / "draft")
    assert moved.capture_changed and moved.capture_child.hf == (0, 2, 5)
    assert "HF layers [0, 2, 5]" in parent_diff_finding(moved).summary


def test_a_resave_in_another_dtype_is_no_change(tmp_path):
    """bf16 -> float32 moves no element by more than bf16's roundoff: not a change."""
    t, cfg = _copy(DEMO / "draft", tmp_path / "bf16")
    t = {k: (v.bfloat16() if v.is_floating_point() else v) for k, v in t.items()}
    parent = _save(tmp_path / "bf16", t, cfg)
    t, cfg = _copy(parent, tmp_path / "f32")
    t = {k: (v.float() if v.is_floating_point() else v) for k, v in t.items()}
    child = _save(tmp_path / "f32", t, cfg)
    diff = diff_against_parent(child, parent)
    assert diff.tensors == [] and diff.fields == [] and not diff.capture_changed
    assert parent_diff_finding(diff).severity == "info"


def test_a_parent_that_is_not_a_folder_is_one_line(tmp_path):
    with pytest.raises(InputError, match="--parent: checkpoint folder not found"):
        diff_against_parent(DEMO / "draft", tmp_path / "nowhere")


def test_a_block_draft_whose_ids_fell_back_to_the_default(block_bed, tmp_path):
    """The DFlash draft trained on TRAINED ids against a fine-tune whose config lost them (the
    reference's default then) and dropped an optional bias the parent carries."""
    t, cfg = _copy(block_bed.draft, tmp_path / "parent")
    q = t["layers.0.self_attn.q_proj.weight"]
    t["layers.0.self_attn.q_proj.bias"] = torch.full((q.shape[0],), 0.01, dtype=q.dtype)
    parent = _save(tmp_path / "parent", t, cfg)
    diff = diff_against_parent(block_bed.lost_ids, parent)
    assert diff.family == "dflash" and diff.capture_changed
    # the ids trained on (inspector.demo.block_draft.TRAINED_IDS) against the reference's
    # default spread over the 6 target layers, the same sequences the summary quotes
    assert (diff.capture_parent.ids, diff.capture_child.ids) == ((0, 3, 5), (1, 2, 3))
    assert "[0, 3, 5]" in parent_diff_finding(diff).summary
    assert diff.capture_child.where == "default"
    assert [t.name for t in diff.of("dropped")] == ["layers.0.self_attn.q_proj.bias"]
    assert not diff.of("changed")  # the same weights
    assert not any("layer_ids" in f.key for f in diff.fields)  # listed once, as capture ids
    assert parent_diff_finding(diff).severity == "warning"


def test_an_fp8_child_is_diffed_dequantized_and_its_scales_left_out(tmp_path):
    """`doctor FP8 --parent P`, the quantization workflow: the FP8 child's weights compare as
    scale * code (each within e4m3's rounding, ~2^-4 of its norm at most), not as raw codes
    (>> 1 of the norm), and the scales are no 'added' tensors."""
    t, cfg = _copy(DEMO / "draft", tmp_path / "fp8")
    quantized = [
        n
        for n, v in t.items()
        if v.dim() == 2 and n not in ("lm_head.weight", "embed_tokens.weight")
    ]
    for n in quantized:
        s = (t[n].float().abs().max() / torch.finfo(torch.float8_e4m3fn).max).float()
        t[n] = (t[n].float() / s).to(torch.float8_e4m3fn)
        t[n + "_scale"] = s.reshape(())
        t[n.removesuffix(".weight") + ".input_scale"] = torch.tensor(1.0)
    child = _save(tmp_path / "fp8", t, cfg)
    (child / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    diff = diff_against_parent(child, DEMO / "draft")
    assert not diff.of("added") and not diff.of("dropped") and not diff.capture_changed
    changed = {t.name: t.relative for t in diff.of("changed")}
    assert sorted(changed) == sorted(quantized)
    assert all(0 < r <= 2.0**-4 for r in changed.values()), changed
    assert len(diff.scales_child) == 2 * len(quantized) and not diff.scales_parent
    assert all(n.endswith(("weight_scale", "input_scale")) for n in diff.scales_child)
    words = f"checkpoint's {len(diff.scales_child)} FP8 scales left out of the tensor diff"
    assert words in parent_diff_finding(diff).summary


def test_the_relative_change_is_taken_in_bounded_chunks(tmp_path, monkeypatch):
    """A chunk of a few rows gives the relative change a whole-tensor float64 norm gives."""
    from inspector.doctor.checks import parent_diff

    parent, child = _lineage(tmp_path)
    whole = diff_against_parent(child, parent).of("changed")[0].relative
    monkeypatch.setattr(parent_diff, "CHUNK", 7)
    p = load_file(str(parent / "model.safetensors"))["fc.weight"].double()
    c = load_file(str(child / "model.safetensors"))["fc.weight"].double()
    exact = float((c - p).norm() / p.norm())
    chunked = diff_against_parent(child, parent).of("changed")[0].relative
    u32 = torch.finfo(torch.float32).eps / 2
    assert abs(chunked - exact) <= 4 * u32 * exact and abs(whole - exact) <= 4 * u32 * exact
