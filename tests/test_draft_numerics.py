"""The numerics an engine runs the draft in (`doctor.checks.draft_numerics`): SGLang gives an
unquantized draft the target's quantization; for an FP8 target the cost is measured."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from inspector.doctor.checks.draft_numerics import E4M3_MAX, fp8_rounded, target_quantization
from inspector.engines import Engine, engine

pytestmark = pytest.mark.usefixtures("one_thread")


def _target(tmp_path: Path, demo, qc: object) -> Path:
    out = tmp_path / "target"
    shutil.copytree(demo.target, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["quantization_config"] = qc
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def test_the_targets_declared_method_is_read_and_a_broken_file_is_none(tmp_path, demo):
    assert target_quantization(None) is None
    assert target_quantization(demo.target) is None  # declares none
    fp8 = _target(tmp_path / "a", demo, {"quant_method": "FP8", "activation_scheme": "dynamic"})
    assert target_quantization(fp8) == "fp8"
    nv = _target(tmp_path / "b", demo, {"quant_method": "modelopt", "quant_algo": "NVFP4"})
    assert target_quantization(nv) == "modelopt nvfp4"
    assert target_quantization(_target(tmp_path / "c", demo, "fp8")) is None
    broken = tmp_path / "d"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert target_quantization(broken) is None


def test_fp8_rounding_touches_the_projections_alone_within_e4m3s_error(demo):
    from inspector.formats import load_draft

    draft = load_draft(demo.draft, target=demo.target)
    inherit = engine(Engine.SGLANG).quant_inheritance
    assert inherit is not None and "--speculative-draft-model-quantization" in inherit.optout
    rounded, names = fp8_rounded(draft, inherit.projections)
    assert len(names) == 7 and all(n.startswith("layers.0.") for n in names)
    for k, w in draft.weights.items():
        r = rounded.weights[k]
        if k not in names:
            assert r is w, k  # fc, the norms, the embedding and the head stay as shipped
            continue
        scale = float(w.abs().max()) / E4M3_MAX
        err = (r - w).abs()
        # e4m3: 3 mantissa bits, half a unit in the last place is 2^-4 relative; below the
        # smallest normal (2^-6 * scale) the spacing is 2^-9 * scale
        bound = torch.maximum(w.abs() * 2.0**-4, torch.full_like(w, 2.0**-10 * scale))
        assert bool((err <= bound * (1 + 1e-6)).all()), k
        assert bool((err > 0).any()), k  # it did round
    assert engine(Engine.VLLM).quant_inheritance is None


def test_sglang_runs_the_draft_in_an_fp8_targets_numerics_with_its_cost(tmp_path, demo, capsys):
    from inspector.cli import main

    target = _target(tmp_path, demo, {"quant_method": "fp8", "activation_scheme": "dynamic"})
    rc = main(["doctor", "--target", str(target), "--samples", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    found = [f for f in out["findings"] if f["kind"] == "draft_numerics"]
    assert rc in (0, 1) and len(found) == 1  # SGLang only: vLLM runs the draft as shipped
    (f,) = found
    ev = f["evidence"]
    assert ev["engine"].startswith("SGLang") and ev["target_quantization"] == "fp8"
    cost = ev["cost"]
    assert sorted(cost["quantization"]["tensors"]) == sorted(
        f"layers.0.{p}.weight"
        for p in (
            "mlp.down_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "self_attn.k_proj",
            "self_attn.o_proj",
            "self_attn.q_proj",
            "self_attn.v_proj",
        )
    )
    # both figures are eval's own on the doctor's samples and wiring, as shipped and rounded
    from inspector.session import demo_inputs, load_evaluator
    from inspector.wiring import Wiring

    shipped = load_evaluator(demo_inputs(), device="cpu")
    inherit = engine(Engine.SGLANG).quant_inheritance
    rounded = shipped.with_draft(fp8_rounded(shipped.draft, inherit.projections)[0])
    wiring, samples = [Wiring(tuple(cost["wiring"]))], list(range(cost["samples"]))
    for ev_, key in ((shipped, "parent_accuracy"), (rounded, "accuracy")):
        counts = ev_.run(wiring, indices=samples).wirings[0].steps[0].all_tok
        assert cost[key]["hits"] == counts.hits and cost[key]["total"] == counts.total, key
    assert "--speculative-draft-model-quantization unquant" in f["fix"]
    assert "fp8" in f["summary"]
