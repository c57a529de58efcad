"""`--write-fixed`: the fix plan, the written checkpoint (tensors, config keys, side files) and its
verification, on tiny random drafts with hand-made reports (fast: the mutation-testing selection
for inspector/doctor/fix.py)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from support import edited_copy

from inspector.doctor import (
    ConfigFix,
    DoctorReport,
    Finding,
    FixPlan,
    VocabRepair,
    plan_fix,
    verify_fixed,
    write_fixed,
)
from inspector.doctor.fix import apply_config_fixes, ascending_order, config_fixes
from inspector.doctor.report import Verification
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft
from inspector.metrics import Counts
from inspector.sample import SlotInfo
from inspector.synthetic import SyntheticSpec, write_synthetic
from inspector.wiring import Wiring

PERMUTED = (2, 0, 1)  # [L4, embed, L2]: ascending order is block 1, 2, 0
ORDER = (1, 2, 0)


@pytest.fixture(scope="module")
def syn(tmp_path_factory) -> tuple[Path, Path]:
    return write_synthetic(
        tmp_path_factory.mktemp("fix"), SyntheticSpec(size="tiny", n_samples=3, seq_len=40)
    )


def _copy(src: Path, dst: Path, *, tensors=None, config=None) -> Path:
    """A copy of a draft folder with some tensors added/replaced and the config edited."""
    return edited_copy(src, dst, tensors=tensors, config=config)


def _ev(draft_dir: Path, samples: Path, strict: bool = True) -> Evaluator:
    return Evaluator(load_draft(draft_dir, strict=strict), SampleSet(samples))


def _report(ev: Evaluator, wiring=PERMUTED, findings=(), slots=None) -> DoctorReport:
    return DoctorReport(
        best_wiring=tuple(wiring),
        wirings=[],
        findings=list(findings),
        serving_config=None,
        recommended_wiring=tuple(wiring),
        slots=list(ev.slot_info if slots is None else slots),
        sample_indices=[0, 1],
    )


def _cfg(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


def _same_predictions(ev: Evaluator, out: Path, before: tuple, after: tuple) -> bool:
    fev = Evaluator(load_draft(out), ev.samples)
    a = ev.predict(2, Wiring(before)).steps[0].pred_target
    b = fev.predict(2, Wiring(after)).steps[0].pred_target
    return bool((a == b).all())


# --- the plan --------------------------------------------------------------------------------------
def test_ascending_order():
    assert ascending_order((2, 0, 1), [4, 0, 2]) == [1, 2, 0]
    assert ascending_order((0, 1, 2), [0, 2, 4]) == [0, 1, 2]
    # HF indices decide, not slot indices; unknown ones fall back to slot order.
    assert ascending_order((0, 1, 2), [6, 2, 4]) == [1, 2, 0]
    assert ascending_order((2, 0, 1), [4, None, 2]) == [1, 2, 0]
    assert ascending_order((1, 0), [None, None]) == [1, 0]
    assert ascending_order((2, 0, 1), [4, 4, 2]) == [2, 1, 0]  # equal HF indices: by slot
    with pytest.raises(ValueError, match="2 HF indices for 3 fc blocks"):
        ascending_order((0, 1, 2), [0, 2])


def _finding(kind, severity, fix=None, repair=None):
    return Finding(kind, severity, "", config_fix=fix, vocab_repair=repair)


def test_config_fixes_take_problems_of_config_kinds_only():
    report = DoctorReport(
        best_wiring=(0, 1, 2),
        wirings=[],
        serving_config=None,
        findings=[
            _finding("norm_before_residual", "warning", ConfigFix(norm_before_residual=True)),
            _finding("rope", "error", ConfigFix(rope_theta=5.0, drop_rope_scaling=True)),
            _finding("head_dim", "error", ConfigFix(rope_theta=7.0, head_dim=32)),  # later wins
            _finding("head_dim", "info", ConfigFix(head_dim=64)),  # info: not applied
            _finding("vocab_map", "error", ConfigFix(head_dim=8)),  # not a config kind
            _finding("rope", "warning"),  # no keys
        ],
    )
    fixes = config_fixes(report)
    assert fixes == ConfigFix(
        norm_before_residual=True, rope_theta=7.0, drop_rope_scaling=True, head_dim=32
    )
    assert fixes.to_dict() == {
        "norm_before_residual": True,
        "rope_theta": 7.0,
        "rope_scaling": None,
        "head_dim": 32,
    }
    assert config_fixes(replace(report, findings=[])).empty


def test_config_fix_merge_and_round_trip():
    scaled = ConfigFix(rope_scaling={"rope_type": "linear", "factor": 2.0})
    assert ConfigFix(drop_rope_scaling=True).merged(scaled) == scaled
    assert scaled.merged(ConfigFix(drop_rope_scaling=True)) == ConfigFix(drop_rope_scaling=True)
    assert scaled.merged(ConfigFix(rope_theta=3.0)).rope_scaling == {
        "rope_type": "linear",
        "factor": 2.0,
    }
    for fix in (scaled, ConfigFix(norm_before_residual=False), ConfigFix(drop_rope_scaling=True)):
        assert ConfigFix.from_dict(fix.to_dict()) == fix
    assert ConfigFix(norm_before_residual=False).to_dict() == {"norm_before_residual": False}
    assert not ConfigFix(norm_before_residual=False).empty and ConfigFix().empty


def test_plan_fix(syn):
    ev = _ev(*syn)
    vocab = _finding("vocab_map", "error", repair=VocabRepair.OFFSETS)
    nbr = _finding("norm_before_residual", "error", ConfigFix(norm_before_residual=True))
    report = _report(ev, findings=[vocab, nbr])
    report.best_wiring = (0, 1, 2)  # the recommended wiring wins over the top-ranked one
    plan = plan_fix(report)
    assert plan == FixPlan(
        wiring=PERMUTED,
        block_order=ORDER,
        fixed_wiring=(0, 1, 2),
        hf_indices=(0, 2, 4),
        config_fix=ConfigFix(norm_before_residual=True),
        vocab_repair=VocabRepair.OFFSETS,
    )
    assert plan.permutes
    assert plan.to_dict() == {
        "block_order": [1, 2, 0],
        "wiring": [0, 1, 2],
        "hf_indices": [0, 2, 4],
        "config_fixes": {"norm_before_residual": True},
        "vocab_repair": "offsets",
    }
    # A vocab finding that is not an error repairs nothing; unknown HF indices give no ids.
    report.findings = [replace(vocab, severity="warning")]
    report.slots = [SlotInfo("s0"), SlotInfo("s1", 2), SlotInfo("s2", 4), SlotInfo("s3", 6)]
    plan = plan_fix(report)
    assert plan.vocab_repair is None and plan.hf_indices is None
    assert plan.block_order == ORDER  # slot order when an HF index is unknown
    report.slots = [SlotInfo("embed", 0), SlotInfo("L2", 2)]  # slot 2 is not described
    plan = plan_fix(report)
    assert plan.hf_indices is None and plan.block_order == ORDER
    report.recommended_wiring = None
    assert plan_fix(report).wiring == (0, 1, 2) and not plan_fix(report).permutes


def test_apply_config_fixes(syn):
    draft = load_draft(syn[0])
    rope = replace(draft.config.rope, theta=5e5)
    draft = replace(draft, config=replace(draft.config, rope=rope))
    dimmed = replace(draft, config=replace(draft.config, rope=replace(rope, dim=32)))
    out = apply_config_fixes(dimmed, ConfigFix())
    assert out.config == dimmed.config
    out = apply_config_fixes(dimmed, ConfigFix(norm_before_residual=True, drop_rope_scaling=True))
    assert out.config.norm_before_residual is True
    assert out.config.rope.rope_type == "default" and out.config.rope.dim == 32
    assert out.config.rope.theta == 5e5
    out = apply_config_fixes(
        dimmed, ConfigFix(rope_scaling={"type": "linear", "factor": 4.0, "rope_type": "linear"})
    )
    assert (out.config.rope.rope_type, out.config.rope.scaling) == ("linear", {"factor": 4.0})
    assert out.config.rope.dim == 32 and out.config.rope.theta == rope.theta
    out = apply_config_fixes(dimmed, ConfigFix(rope_scaling={"type": "dynamic", "factor": 2.0}))
    assert out.config.rope.rope_type == "dynamic"
    out = apply_config_fixes(dimmed, ConfigFix(rope_scaling={"factor": 2.0}))
    assert out.config.rope.rope_type == "default"
    # A theta that stands for a rope over another dimension replaces that dimension.
    out = apply_config_fixes(dimmed, ConfigFix(rope_theta=500.0))
    assert (out.config.rope.theta, out.config.rope.dim) == (500.0, None)
    assert draft.config.rope == rope  # the input draft is not changed


# --- the written checkpoint --------------------------------------------------------------------------
def test_write_fixed_permutes_blocks_and_reports(syn, tmp_path):
    ev = _ev(*syn)
    calls = []
    res = write_fixed(ev, _report(ev), tmp_path / "out", progress=lambda *a: calls.append(a))
    assert calls == [("write fixed", 1, 2), ("write fixed", 2, 2)]
    assert res.verified and res.path == str(tmp_path / "out") and res.source == str(syn[0])
    assert res.changes == ["fc column blocks reordered [1, 2, 0] -> the ascending wiring [0, 1, 2]"]
    v = res.verification
    assert v.positions_differing == 0 and v.expected == v.fixed and v.expected.total > 0
    orig, fixed = load_draft(syn[0]), load_draft(tmp_path / "out")
    for k in range(3):
        torch.testing.assert_close(fixed.fc_block(k), orig.fc_block(ORDER[k]))
    assert _same_predictions(ev, tmp_path / "out", PERMUTED, (0, 1, 2))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "config.json",
        "model.safetensors",
    ]
    assert _cfg(tmp_path / "out") == _cfg(syn[0])  # ids already [0, 2, 4]: nothing to change
    d = res.to_dict()
    assert d["verified"] is True and d["wiring"] == [0, 1, 2] and d["block_order"] == [1, 2, 0]
    assert d["expected"] == v.expected.to_dict() and d["positions_differing"] == 0


def test_write_fixed_unchanged_checkpoint(syn, tmp_path):
    ev = _ev(*syn)
    res = write_fixed(ev, _report(ev, wiring=(0, 1, 2)), tmp_path / "out")
    assert res.verified
    assert res.changes == ["none needed: the checkpoint is copied unchanged"]
    assert (
        load_file(str(tmp_path / "out" / "model.safetensors")).keys()
        == load_file(str(syn[0] / "model.safetensors")).keys()
    )


@pytest.fixture(scope="module")
def normed(syn, tmp_path_factory) -> Path:
    """The random draft with per-block fc norms and an input norm, all distinct per block."""
    g = torch.Generator().manual_seed(7)

    def norms(w):
        ht = w["fc.weight"].shape[1] // 3
        out = {f"fc_norm.{k}.weight": 0.5 + torch.rand(ht, generator=g) for k in range(3)}
        out["input_norm.weight"] = 0.5 + torch.rand(3 * ht, generator=g)
        return out

    def flags(c):
        c.update(fc_norm=True, norm_before_fc=True)

    return _copy(syn[0], tmp_path_factory.mktemp("normed") / "draft", tensors=norms, config=flags)


def test_write_fixed_moves_the_norms_with_the_blocks(normed, syn, tmp_path):
    ev = _ev(normed, syn[1])
    assert ev.draft.config.fc_norm and ev.draft.config.norm_before_fc
    res = write_fixed(ev, _report(ev), tmp_path / "out")
    orig = load_file(str(normed / "model.safetensors"))
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    ht = orig["fc.weight"].shape[1] // 3
    for k in range(3):
        assert torch.equal(got[f"fc_norm.{k}.weight"], orig[f"fc_norm.{ORDER[k]}.weight"])
        block = slice(k * ht, (k + 1) * ht)
        old = slice(ORDER[k] * ht, (ORDER[k] + 1) * ht)
        assert torch.equal(got["input_norm.weight"][block], orig["input_norm.weight"][old])
    assert res.verified and res.verification.positions_differing == 0
    assert _same_predictions(ev, tmp_path / "out", PERMUTED, (0, 1, 2))


def test_verification_catches_a_wrong_checkpoint(syn, tmp_path):
    ev = _ev(*syn)
    report = _report(ev)
    res = write_fixed(ev, report, tmp_path / "out")
    assert res.verified and report.fixed is res
    w = load_file(str(tmp_path / "out" / "model.safetensors"))
    w["fc.weight"] = w["fc.weight"].roll(1, dims=0)  # any real damage changes predictions
    save_file(w, str(tmp_path / "out" / "model.safetensors"))
    check = verify_fixed(ev, report, tmp_path / "out", res.plan)
    assert not check.verified and check.positions_differing > check.tolerance


def test_write_fixed_reports_a_plan_that_does_not_verify(syn, tmp_path, monkeypatch, capsys):
    import inspector.doctor.fix as fix
    from inspector.cli import main

    ev = _ev(*syn)
    real = fix.plan_fix

    def unpermuted(report):  # a writer that forgets to move the blocks
        return replace(real(report), block_order=(0, 1, 2))

    monkeypatch.setattr(fix, "plan_fix", unpermuted)
    res = write_fixed(ev, _report(ev), tmp_path / "out")
    assert not res.verified and res.to_dict()["verified"] is False

    from inspector.doctor import diagnose as real_diagnose

    def permuted_diagnose(*a, **kw):
        report = real_diagnose(*a, **kw)
        report.recommended_wiring = PERMUTED
        return report

    monkeypatch.setattr(
        "inspector.doctor.pipeline.diagnose", permuted_diagnose
    )  # what the CLI runs
    rc = main(
        [
            "doctor",
            str(syn[0]),
            str(syn[1]),
            "--samples",
            "1",
            "--write-fixed",
            str(tmp_path / "cli"),
        ]
    )
    assert rc == 1 and "NOT verified" in capsys.readouterr().out


def test_verification_tolerance():
    c = Counts(10, 1000)
    assert Verification(c, c, 0).tolerance == 2
    assert Verification(Counts(1, 999), c, 0).tolerance == 1
    assert Verification(Counts(0, 0), Counts(0, 0), 0).tolerance == 1
    assert Verification(c, c, 2).verified
    assert not Verification(c, c, 3).verified
    assert Verification(c, Counts(12, 1000), 0).verified
    assert not Verification(c, Counts(13, 1000), 0).verified
    assert not Verification(c, Counts(7, 1000), 0).verified
    assert not Verification(c, Counts(10, 999), 0).verified  # other positions


def test_write_fixed_repairs_the_vocab_map(syn, tmp_path):
    w = load_file(str(syn[0] / "model.safetensors"))
    absolute = torch.arange(w["d2t"].numel()) + w["d2t"]
    bad = _copy(syn[0], tmp_path / "abs", tensors=lambda _: {"d2t": absolute})
    ev = _ev(bad, syn[1], strict=False)
    error = _finding("vocab_map", "error", repair=VocabRepair.OFFSETS)
    res = write_fixed(ev, _report(ev, (0, 1, 2), [error]), tmp_path / "fixed")
    assert res.changes == ["d2t rewritten as offsets, t2d rebuilt from it"]
    got = load_file(str(tmp_path / "fixed" / "model.safetensors"))
    assert torch.equal(got["d2t"], w["d2t"]) and torch.equal(got["t2d"], w["t2d"])
    assert got["t2d"].dtype == torch.bool and got["d2t"].dtype == w["d2t"].dtype
    load_draft(tmp_path / "fixed")  # strict: the repaired map is consistent
    # An error the stored data cannot repair is left as it is (and reported by the finding);
    # the written checkpoint is then verified as leniently as the doctor read the original.
    unfixable = replace(error, vocab_repair=None)
    res = write_fixed(ev, _report(ev, (0, 1, 2), [unfixable]), tmp_path / "kept")
    assert torch.equal(load_file(str(tmp_path / "kept" / "model.safetensors"))["d2t"], absolute)
    assert res.verified and res.changes == ["none needed: the checkpoint is copied unchanged"]
    with pytest.raises(InputError, match="d2t"):
        load_draft(tmp_path / "kept")


def _config_findings(theta: float = 20000.0):
    return [
        _finding("norm_before_residual", "warning", ConfigFix(norm_before_residual=True)),
        _finding("head_dim", "error", ConfigFix(rope_theta=theta, head_dim=16)),
    ]


def test_write_fixed_config_keys_speculators(syn, tmp_path):
    src = _copy(
        syn[0],
        tmp_path / "spec",
        config=lambda c: c.update(eagle_config={"eagle_aux_hidden_state_layer_ids": [9]}),
    )
    ev = _ev(src, syn[1])
    res = write_fixed(ev, _report(ev, findings=_config_findings()), tmp_path / "out")
    cfg = _cfg(tmp_path / "out")
    layer = cfg["transformer_layer_config"]
    assert cfg["norm_before_residual"] is True
    assert (layer["head_dim"], layer["rope_theta"]) == (16, 20000.0)
    assert "head_dim" not in cfg and "rope_theta" not in cfg
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]
    assert cfg["eagle_config"] == {
        "eagle_aux_hidden_state_layer_ids": [-1, 1, 3],
        "use_aux_hidden_state": True,
    }
    assert res.changes == [
        "fc column blocks reordered [1, 2, 0] -> the ascending wiring [0, 1, 2]",
        "norm_before_residual = true",
        "head_dim = 16",
        "rope_theta = 20000",
        "eagle_config.eagle_aux_hidden_state_layer_ids = [-1, 1, 3]",
    ]
    assert res.verified  # the fixed config reproduces the in-memory fixes
    assert res.to_dict()["config_fixes"] == {
        "norm_before_residual": True,
        "rope_theta": 20000.0,
        "head_dim": 16,
    }


def test_write_fixed_rope_parameters_and_scaling(syn, tmp_path):
    def params(c):
        layer = c["transformer_layer_config"]
        del layer["rope_theta"]
        layer["rope_parameters"] = {"rope_theta": 10000.0, "rope_type": "linear", "factor": 2.0}
        c["eagle_aux_hidden_state_layer_ids"] = [0, 2, 6]
        c["eagle_config"] = {"use_aux_hidden_state": False}

    src = _copy(syn[0], tmp_path / "params", config=params)
    ev = _ev(src, syn[1])
    drop = _finding("rope", "error", ConfigFix(drop_rope_scaling=True))
    res = write_fixed(ev, _report(ev, (0, 1, 2), [drop]), tmp_path / "out")
    layer = _cfg(tmp_path / "out")["transformer_layer_config"]
    assert layer["rope_parameters"] == {"rope_theta": 10000.0, "rope_type": "default"}
    assert "rope_scaling" not in layer and "rope_theta" not in layer
    assert res.changes == [
        "rope_scaling = None",
        "eagle_aux_hidden_state_layer_ids = [0, 2, 4]",
        "eagle_config.eagle_aux_hidden_state_layer_ids = [-1, 1, 3]",
    ]
    assert _cfg(tmp_path / "out")["eagle_config"]["use_aux_hidden_state"] is False  # kept
    scaled = ConfigFix(rope_theta=5000.0, rope_scaling={"rope_type": "linear", "factor": 4.0})
    res = write_fixed(
        ev, _report(ev, (0, 1, 2), [_finding("rope", "error", scaled)]), tmp_path / "out2"
    )
    layer = _cfg(tmp_path / "out2")["transformer_layer_config"]
    assert layer["rope_parameters"] == {"rope_theta": 5000.0, "rope_type": "linear", "factor": 4.0}
    assert res.verified and load_draft(tmp_path / "out2").config.rope.scaling == {"factor": 4.0}
    assert res.changes[:2] == [
        "rope_scaling = {'rope_type': 'linear', 'factor': 4.0}",
        "rope_theta = 5000",
    ]


def test_write_fixed_legacy_rope_scaling(syn, tmp_path):
    src = _copy(
        syn[0],
        tmp_path / "legacy",
        config=lambda c: c.update(rope_scaling={"rope_type": "linear", "factor": 2.0}),
    )
    ev = _ev(src, syn[1])
    scaled = ConfigFix(rope_scaling={"rope_type": "linear", "factor": 3.0})
    write_fixed(ev, _report(ev, (0, 1, 2), [_finding("rope", "error", scaled)]), tmp_path / "a")
    cfg = _cfg(tmp_path / "a")
    assert "rope_scaling" not in cfg  # moved into the layer config
    assert cfg["transformer_layer_config"]["rope_scaling"] == {"rope_type": "linear", "factor": 3.0}
    drop = _finding("rope", "error", ConfigFix(drop_rope_scaling=True))
    write_fixed(ev, _report(ev, (0, 1, 2), [drop]), tmp_path / "b")
    cfg = _cfg(tmp_path / "b")
    assert "rope_scaling" not in cfg and "rope_scaling" not in cfg["transformer_layer_config"]
    assert load_draft(tmp_path / "b").config.rope.rope_type == "default"


@pytest.fixture(scope="module")
def flat(syn, tmp_path_factory) -> Path:
    """The random draft in the flat SpecForge layout: one LlamaConfig, `midlayer.*` tensors."""
    dst = tmp_path_factory.mktemp("flat") / "draft"
    dst.mkdir()
    w = load_file(str(syn[0] / "model.safetensors"))
    save_file(
        {k.replace("layers.0.", "midlayer."): v for k, v in w.items()},
        str(dst / "model.safetensors"),
    )
    cfg = json.loads((syn[0] / "config.json").read_text())
    flat_cfg = {**cfg.pop("transformer_layer_config"), **cfg}
    for key in ("speculators_model_type", "eagle_aux_hidden_state_layer_ids"):
        flat_cfg.pop(key)
    (dst / "config.json").write_text(json.dumps(flat_cfg))
    (dst / "tokenizer.json").write_text("{}")
    (dst / "pytorch_model.bin").write_bytes(b"")
    (dst / "model.safetensors.index.json").write_text("{}")
    (dst / "notes").mkdir()
    return dst


def test_write_fixed_flat_layout(flat, syn, tmp_path):
    ev = _ev(flat, syn[1])
    assert ev.draft.layout == "specforge"
    res = write_fixed(ev, _report(ev, findings=_config_findings()), tmp_path / "out")
    cfg = _cfg(tmp_path / "out")
    assert (cfg["head_dim"], cfg["rope_theta"], cfg["norm_before_residual"]) == (16, 20000.0, True)
    assert "eagle_aux_hidden_state_layer_ids" not in cfg  # SGLang reads eagle_config only
    assert cfg["eagle_config"] == {
        "eagle_aux_hidden_state_layer_ids": [-1, 1, 3],
        "use_aux_hidden_state": True,
    }
    # Side files are copied; other weight files, shard indexes and folders are not.
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["config.json", "model.safetensors", "tokenizer.json"]
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert "midlayer.self_attn.q_proj.weight" in got  # tensor names kept as stored
    assert res.verified


def _refused(ev, report, out) -> InputError:
    with pytest.raises(InputError) as e:
        write_fixed(ev, report, out)
    assert e.value.field == "write-fixed" and e.value.field.flag == "--write-fixed"
    return e.value


def test_write_fixed_refuses_bad_outputs(syn, tmp_path):
    ev = _ev(*syn)
    report = _report(ev)
    for out in (syn[0], syn[0] / "sub"):
        e = _refused(ev, report, out)
        assert e.path == str(out)
        assert e.message == f"must be a new folder outside the input folder {syn[0]}"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    (tmp_path / "file").write_text("")
    for out, why in (
        (syn[0].parent, "exists and is not empty: a new folder is needed"),  # holds the input
        (tmp_path / "full", "exists and is not empty: a new folder is needed"),
        (tmp_path / "file", "exists and is not a folder"),
    ):
        e = _refused(ev, report, out)
        assert (e.path, e.message) == (str(out), why)
    (tmp_path / "empty").mkdir()
    assert write_fixed(ev, report, tmp_path / "empty").verified
    assert write_fixed(ev, report, tmp_path / "new" / "deeper" / "out").verified
    nameless = Evaluator(replace(ev.draft, path=""), ev.samples)
    e = _refused(nameless, report, tmp_path / "never")
    assert e.path is None and e.message == "the draft was not loaded from a folder"
    assert not (tmp_path / "never").exists()


def test_written_files_format(syn, tmp_path):
    from safetensors import safe_open

    ev = _ev(*syn)
    write_fixed(ev, _report(ev), tmp_path / "out")
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}
    text = (tmp_path / "out" / "config.json").read_text()
    assert text == json.dumps(json.loads(text), indent=2) + "\n"


def test_write_fixed_engine_ids_per_layout(syn, flat, tmp_path):
    # speculators without the top-level key: written; an eagle_config already right: untouched.
    def no_ids(c):
        del c["eagle_aux_hidden_state_layer_ids"]
        c["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [-1, 1, 3], "x": 1}

    ev = _ev(_copy(syn[0], tmp_path / "spec", config=no_ids), syn[1])
    res = write_fixed(ev, _report(ev), tmp_path / "a")
    cfg = _cfg(tmp_path / "a")
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]
    assert cfg["eagle_config"] == {
        "eagle_aux_hidden_state_layer_ids": [-1, 1, 3],
        "x": 1,
        "use_aux_hidden_state": True,
    }
    assert res.changes[1:] == ["eagle_aux_hidden_state_layer_ids = [0, 2, 4]"]
    # A flat config that names the top-level key gets it updated as well.
    flat_ids = _copy(
        flat, tmp_path / "flat", config=lambda c: c.update(eagle_aux_hidden_state_layer_ids=[1])
    )
    ev = _ev(flat_ids, syn[1])
    write_fixed(ev, _report(ev), tmp_path / "b")
    assert _cfg(tmp_path / "b")["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]
    # Unknown HF indices: no engine ids are written.
    slots = [SlotInfo(f"s{i}") for i in range(4)]
    res = write_fixed(ev, _report(ev, slots=slots), tmp_path / "c")
    assert _cfg(tmp_path / "c")["eagle_aux_hidden_state_layer_ids"] == [1]
    assert "eagle_config" not in _cfg(tmp_path / "c") and res.plan.hf_indices is None
    assert res.verified


def test_write_fixed_rope_keys_in_other_places(syn, tmp_path):
    def inner(c):
        layer = c["transformer_layer_config"]
        layer["rope_theta"] = 20000.0  # beside a rope_parameters that has no theta
        layer["rope_parameters"] = {"rope_type": "linear", "factor": 2.0}
        layer["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
        c["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}

    ev = _ev(_copy(syn[0], tmp_path / "inner", config=inner), syn[1])
    drop = _finding("rope", "error", ConfigFix(drop_rope_scaling=True))
    write_fixed(ev, _report(ev, (0, 1, 2), [drop]), tmp_path / "a")
    cfg = _cfg(tmp_path / "a")
    layer = cfg["transformer_layer_config"]
    assert layer["rope_parameters"] == {"rope_theta": 20000.0, "rope_type": "default"}
    assert "rope_scaling" not in layer and "rope_scaling" not in cfg

    # A rope_parameters that is not an object is refused when the draft loads, before any fix.
    def odd(c):
        c["transformer_layer_config"]["rope_parameters"] = "see rope_theta"

    with pytest.raises(InputError, match="rope_parameters: expected an object"):
        _ev(_copy(syn[0], tmp_path / "odd", config=odd), syn[1])


def test_write_fixed_copies_other_tensors_as_stored(normed, syn, tmp_path):
    ht = load_file(str(normed / "model.safetensors"))["fc.weight"].shape[1] // 3
    extra = {
        "extra.weight": torch.arange(3 * ht, dtype=torch.float32),  # input_norm's size
        "fc_norm.3.weight": torch.full((ht,), 3.0),  # a norm past the fc blocks
    }
    src = _copy(normed, tmp_path / "extra", tensors=lambda _: extra)
    ev = _ev(src, syn[1])
    write_fixed(ev, _report(ev), tmp_path / "out")
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    for name, t in extra.items():
        assert torch.equal(got[name], t)


def test_write_fixed_repairs_t2d_and_keeps_dtypes(syn, tmp_path):
    w = load_file(str(syn[0] / "model.safetensors"))
    t2d = w["t2d"].clone()
    first = int(t2d.nonzero()[0])
    t2d[first] = False
    t2d[(~t2d).nonzero()[-1]] = True
    src = _copy(
        syn[0], tmp_path / "t2d", tensors=lambda _: {"t2d": t2d, "d2t": w["d2t"].to(torch.int32)}
    )
    ev = _ev(src, syn[1], strict=False)
    error = _finding("vocab_map", "error", repair=VocabRepair.T2D_FROM_D2T)
    res = write_fixed(ev, _report(ev, (0, 1, 2), [error]), tmp_path / "out")
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert torch.equal(got["t2d"], w["t2d"]) and got["d2t"].dtype == torch.int32
    assert res.verified and load_draft(tmp_path / "out").config.draft_vocab_size == t2d.sum()


def test_write_fixed_verifies_under_the_pairing_shift(syn, tmp_path):
    ev = _ev(*syn)
    report = _report(ev)
    report.pairing_shift = 1
    res = write_fixed(ev, report, tmp_path / "out")
    assert res.verified and res.verification.positions_differing == 0


def test_written_checkpoint_must_load_strictly(tmp_path):
    d, s = write_synthetic(
        tmp_path / "hd",
        SyntheticSpec(size="tiny", n_samples=2, seq_len=40, head_dim=32, write_head_dim=False),
    )
    ev = _ev(d, s, strict=False)
    info = _finding("vocab_map", "info")
    for findings in ([], [info]):  # no head_dim fix: the written config still lacks it
        out = tmp_path / f"out{len(findings)}"
        with pytest.raises(InputError, match="head_dim"):
            write_fixed(ev, _report(ev, (0, 1, 2), findings), out)


@pytest.mark.parametrize("source", ["embed", "target"])
def test_write_fixed_passes_the_embedding_on(flat, syn, tmp_path, source):
    w = load_file(str(flat / "model.safetensors"))
    src = tmp_path / "noembed"
    shutil.copytree(flat, src)
    save_file(
        {k: v for k, v in w.items() if k != "embed_tokens.weight"}, str(src / "model.safetensors")
    )
    holder = tmp_path / "target"
    holder.mkdir()
    save_file(
        {"model.embed_tokens.weight": w["embed_tokens.weight"]}, str(holder / "model.safetensors")
    )
    kw = {"embed": holder / "model.safetensors"} if source == "embed" else {"target": holder}
    ev = Evaluator(load_draft(src, **kw), SampleSet(syn[1]))
    res = write_fixed(ev, _report(ev), tmp_path / "out", **kw)
    assert res.verified
