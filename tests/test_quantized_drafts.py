"""FP8 drafts read (ModelOpt's and compressed-tensors' layout: float8_e4m3fn weights beside their
`weight_scale`), dequantized into the canonical draft, and the acceptance the quantization costs
against the unquantized parent (`doctor --parent`). The FP8 draft is made here from the demo
draft (trained by inspector.demo), as ModelOpt's `quantize_drafter.py` does: no calibration,
amax / 448 per tensor (or per row)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.cli import main
from inspector.errors import InputError
from inspector.formats import load_draft

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"
HELD = DEMO / "samples" / "held"
E4M3 = torch.float8_e4m3fn
E4M3_MAX = torch.finfo(E4M3).max  # 448
# e4m3: 3 stored mantissa bits, so round-to-nearest moves a normal value by at most 2^-4 of it;
# below the smallest normal (2^-6) the spacing is 2^-9, so at most 2^-10 absolute (in units of
# the scale). Both the division by the scale and the dequantizing product round once in float32.
U8 = 2.0**-4
SUBNORMAL_HALF_STEP = 2.0**-10
U32 = torch.finfo(torch.float32).eps / 2

pytestmark = pytest.mark.usefixtures("one_thread")


def _quantized_names(t: dict) -> list[str]:
    """Every linear of the draft layer and fc; the head, the embedding and the norms stay."""
    return [
        n
        for n, v in t.items()
        if v.dim() == 2 and n not in ("lm_head.weight", "embed_tokens.weight")
    ]


def _fp8(tmp_path: Path, per_channel: bool = False) -> tuple[Path, dict, dict]:
    """The demo draft quantized to FP8: (folder, the parent's tensors, the scales used)."""
    out = tmp_path / ("fp8-channel" if per_channel else "fp8")
    shutil.copytree(DEMO / "draft", out)
    t = load_file(str(out / "model.safetensors"))
    parent = {k: v.clone() for k, v in t.items()}
    scales = {}
    for n in _quantized_names(t):
        w = t[n].float()
        amax = w.abs().amax(dim=1, keepdim=True) if per_channel else w.abs().max()
        s = (amax / E4M3_MAX).float()
        t[n] = (w / s).to(E4M3)
        t[n + "_scale"] = s.reshape(-1) if per_channel else s.reshape(())
        t[n.removesuffix(".weight") + ".input_scale"] = torch.tensor(1.0)
        scales[n] = s
    save_file(t, str(out / "model.safetensors"))
    if per_channel:  # compressed-tensors' declaration, in config.json
        cfg = json.loads((out / "config.json").read_text())
        cfg["quantization_config"] = {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "config_groups": {
                "group_0": {"weights": {"type": "float", "num_bits": 8, "strategy": "channel"}}
            },
        }
        (out / "config.json").write_text(json.dumps(cfg))
    else:  # ModelOpt's
        (out / "hf_quant_config.json").write_text(
            json.dumps({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}})
        )
    return out, parent, scales


@pytest.mark.parametrize("per_channel", [False, True])
def test_an_fp8_draft_loads_within_e4m3_rounding_of_its_parent(tmp_path, per_channel):
    folder, parent, scales = _fp8(tmp_path, per_channel)
    draft = load_draft(folder)
    q = draft.quantization
    assert q is not None and q.method == "fp8" and q.weight_dtype == "float8_e4m3fn"
    assert q.granularity == ("per-channel" if per_channel else "per-tensor")
    assert q.format == ("compressed-tensors" if per_channel else "modelopt")
    assert sorted(q.tensors) == sorted(scales) and q.input_scales == len(scales)
    assert not any(n.endswith(("_scale", "input_scale")) for n in draft.weights)
    stored = load_file(str(folder / "model.safetensors"))
    worst = 0.0
    for n, s in scales.items():
        got, w = draft.weights[n], parent[n].float()
        # exactly the stored value times its scale (one float32 product)
        assert torch.equal(
            got, stored[n].float() * s.reshape(-1, 1) if per_channel else stored[n].float() * s
        )
        bound = (U8 + 2 * U32) * w.abs() + SUBNORMAL_HALF_STEP * s * (1 + 2 * U32)
        err = (got - w).abs()
        assert bool((err <= bound).all()), n
        worst = max(worst, float((err / bound).max()))
    assert worst > 0.25  # the bound is the rounding's, not a slack one
    assert draft.weights["lm_head.weight"].dtype == torch.float32  # untouched tensors as read
    assert torch.equal(draft.weights["lm_head.weight"], parent["lm_head.weight"])


def test_the_quantization_cost_is_measured_against_the_parent(capsys, tmp_path):
    folder, _, _ = _fp8(tmp_path)
    capsys.readouterr()
    argv = ["doctor", str(folder), str(HELD), "--samples", "4", "--json", "--device", "cpu"]
    main([*argv, "--parent", str(DEMO / "draft")])
    doc = json.loads(capsys.readouterr().out)
    f = next(f for f in doc["findings"] if f["kind"] == "quantization")
    ev = f["evidence"]
    assert ev["quantization"]["granularity"] == "per-tensor"
    acc, ref = ev["accuracy"], ev["parent_accuracy"]
    assert acc["total"] == ref["total"] > 0
    assert ev["accept_length"] is not None and ev["parent_accept_length"] is not None
    assert ev["accept_length_cost"] == pytest.approx(
        ev["parent_accept_length"] - ev["accept_length"]
    )
    assert "against the parent's" in f["summary"] and "accept length" in f["summary"]
    # measured on the quantized draft, not the parent twice: e4m3's rounding moves some argmax
    assert (acc["hits"], ev["accept_length"]) != (ref["hits"], ev["parent_accept_length"])
    # the parent's figures are the demo draft's own: the cost is measured, not assumed zero
    capsys.readouterr()
    main(
        [
            "eval",
            str(DEMO / "draft"),
            str(HELD),
            "--limit",
            "4",
            "--json",
            "--device",
            "cpu",
            "--wiring",
            ",".join(map(str, ev["wiring"])),
        ]
    )
    own = json.loads(capsys.readouterr().out)["wirings"][0]
    assert own["steps"][0]["all_tok"]["hits"] == ref["hits"]
    assert own["acceptance_length"] == pytest.approx(ev["parent_accept_length"])
    print("FP8 cost:", acc, ref, ev["accept_length"], ev["parent_accept_length"])


def test_what_is_not_read_is_one_line(tmp_path):
    folder, _, _ = _fp8(tmp_path)
    t = load_file(str(folder / "model.safetensors"))
    del t["fc.weight_scale"]
    save_file(t, str(folder / "model.safetensors"))
    with pytest.raises(InputError, match=r"model.safetensors: fc.weight_scale: tensor not found"):
        load_draft(folder)
    (folder / "hf_quant_config.json").write_text(
        json.dumps({"quantization": {"quant_algo": "NVFP4"}})
    )
    with pytest.raises(InputError, match=r"hf_quant_config.json: quantization.quant_algo: 'NVFP4'"):
        load_draft(folder)


def test_an_fp8_block_draft_is_refused_in_one_line(block_bed, tmp_path):
    """Block drafts are not read quantized (docs/formats.md): a float8 weight would load as its
    raw e4m3 codes without the scale, so the loader names the tensor instead."""
    from inspector.formats.block_draft import load_block_draft

    out = tmp_path / "fp8-block"
    shutil.copytree(block_bed.draft, out)
    t = load_file(str(out / "model.safetensors"))
    w = t["fc.weight"].float()
    s = (w.abs().max() / E4M3_MAX).float()
    t["fc.weight"] = (w / s).to(E4M3)
    t["fc.weight_scale"] = s.reshape(())
    save_file(t, str(out / "model.safetensors"))
    with pytest.raises(
        InputError, match=r"model.safetensors: fc.weight: dtype torch.float8_e4m3fn"
    ):
        load_block_draft(out, target=block_bed.target)
    t["fc.weight"] = w.to(torch.bfloat16)  # a scale left beside an unquantized weight
    save_file(t, str(out / "model.safetensors"))
    with pytest.raises(InputError, match=r"model.safetensors: fc.weight_scale: a quantization"):
        load_block_draft(out, target=block_bed.target)


def test_a_declaration_the_tensors_contradict_is_one_line(tmp_path):
    """FP8 declared (ModelOpt's file, or config.json's quantization_config) over unquantized
    weights: the docstring's one-line error, not a silent unquantized read."""
    out = tmp_path / "declared"
    shutil.copytree(DEMO / "draft", out)
    (out / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    with pytest.raises(
        InputError, match=r"hf_quant_config.json: quantization: declares FP8; no FP8 weight stored"
    ):
        load_draft(out)
    (out / "hf_quant_config.json").unlink()
    cfg = json.loads((out / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    (out / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(
        InputError, match=r"config.json: quantization_config: declares FP8; no FP8 weight stored"
    ):
        load_draft(out)


@pytest.mark.parametrize("scale_key", ["weight_scale", "weight_scale_inv"])
def test_hf_s_per_tensor_fp8_is_read(tmp_path, scale_key):
    """quant_method "fp8" with no quant_algo and no weight_block_size (transformers' / vLLM's
    per-tensor FP8): each weight's scale stored as weight_scale (vLLM) or weight_scale_inv
    (transformers; a multiplier despite its name) dequantizes like ModelOpt's."""
    folder, parent, scales = _fp8(tmp_path)
    (folder / "hf_quant_config.json").unlink()
    cfg = json.loads((folder / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    (folder / "config.json").write_text(json.dumps(cfg))
    t = load_file(str(folder / "model.safetensors"))
    if scale_key == "weight_scale_inv":
        for n in scales:
            t[n + "_scale_inv"] = t.pop(n + "_scale").reshape(1)
    save_file(t, str(folder / "model.safetensors"))
    draft = load_draft(folder)
    q = draft.quantization
    assert q is not None and q.format == "fp8" and q.granularity == "per-tensor"
    assert sorted(q.tensors) == sorted(scales)
    assert not any("_scale" in n for n in draft.weights)
    for n, s in scales.items():
        assert torch.equal(draft.weights[n], t[n].float() * s)
    if scale_key == "weight_scale_inv":  # a block of scales stays refused
        t["fc.weight_scale_inv"] = torch.ones(2, 2)
        save_file(t, str(folder / "model.safetensors"))
        with pytest.raises(InputError, match=r"fc.weight_scale_inv: a block-wise FP8 scale"):
            load_draft(folder)


def test_an_fp8_draft_s_stored_dtype_is_its_unquantized_tensors(tmp_path):
    """A bf16 draft quantized to FP8 keeps the head and norms in bf16: that is the dtype it is
    stored and served in, and the compute dtype follows it (bf16 on a GPU), not the float32 its
    dequantized weights are held in."""
    from inspector.formats.compute_dtype import compute_dtype

    src = tmp_path / "bf16"
    shutil.copytree(DEMO / "draft", src)
    t = load_file(str(src / "model.safetensors"))
    t = {k: (v.bfloat16() if v.is_floating_point() else v) for k, v in t.items()}
    for n in _quantized_names(t):
        s = (t[n].float().abs().max() / E4M3_MAX).float()
        t[n] = (t[n].float() / s).to(E4M3)
        t[n + "_scale"] = s.reshape(())
    save_file(t, str(src / "model.safetensors"))
    (src / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    draft = load_draft(src, device="cpu")
    assert draft.quantization is not None
    assert draft.quantization.unquantized_dtype == torch.bfloat16
    assert draft.stored_dtype == torch.bfloat16
    assert draft.dtype_label == "float32 (stored bfloat16)"  # the CPU's upcast, said as one
    on_gpu = compute_dtype(None, draft.stored_dtype, device="cuda", float_bytes=0, available=0)
    assert on_gpu.dtype == torch.bfloat16
    assert load_draft(src, dtype="bfloat16").weights["fc.weight"].dtype == torch.bfloat16
