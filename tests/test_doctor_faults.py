"""Planted faults: variants of the bundled demo built in a temp folder, and the doctor
naming each fault by kind with the right fix. The demo itself is never modified.

The demo draft was trained on slots [embed, L2, L4] = (0, 1, 2) of samples holding HF layers
[0, 2, 4, 6]; an engine capturing only the aux layers feeds [L2, L4, L6] = (1, 2, 3).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from support import edited_copy, error_lines

from inspector.doctor import ConfigFix, DiagnoseSettings, diagnose, write_fixed
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft

N = 3  # samples per doctor run: the draft's own training samples give a clear signal
TRAIN = (0, 1, 2)


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _variant(demo, tmp: Path, name: str, *, tensors=None, config=None) -> Path:
    """A copy of the demo draft with some tensors and config keys replaced."""
    return edited_copy(demo.draft, tmp / name, tensors=tensors, config=config)


def _run(draft_dir: Path, samples: Path, n: int = N):
    ev = Evaluator(load_draft(draft_dir, strict=False), SampleSet(samples))
    return ev, diagnose(ev, DiagnoseSettings(n))


@pytest.fixture(scope="module")
def base(demo):
    before = _digest(demo.root / "draft")
    ev, report = _run(demo.draft, demo.train_samples)
    yield ev, report
    assert _digest(demo.root / "draft") == before


def test_unmodified_demo(base):
    ev, report = base
    assert report.best_wiring == TRAIN and report.recommended_wiring == TRAIN
    assert report.configured_wiring == TRAIN
    w = report.finding("wiring")
    assert w.severity == "info" and w.wiring == TRAIN and "[embed, L2, L4]" in w.summary
    assert not [f for f in report.findings if f.severity == "error"], [
        f.summary for f in report.findings
    ]
    sc = report.serving_config.to_dict()
    assert sc["reproducible"] is True
    assert sc["vllm"]["config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]
    assert sc["sglang"]["config"]["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 1, 3]
    # the demo's samples name their target (data_config.json "target"): LlamaForCausalLM, whose
    # model file adds 1 to every id (SGLang 0.5.23 srt/models/llama.py 929-941)
    assert sc["sglang"]["target_class"] == "LlamaForCausalLM"
    assert sc["sglang"]["layer_ids"] == [-1, 1, 3]
    serve = report.wiring_result((1, 2, 3))
    best = report.wiring_result(TRAIN)
    assert best.all_tok.acc > serve.all_tok.acc + 0.1  # the demo's train/serve gap
    for kind in ("norm_before_residual", "rope", "head_dim", "alignment", "vocab_map"):
        assert report.finding(kind).severity == "info", report.finding(kind).summary


def test_search_prunes_clearly_worse_wirings(demo, base):
    from inspector.doctor import search_wirings

    _, report = base
    dropped = [w for w in report.wirings if not w.complete]
    assert len(dropped) >= 12 and all(w.samples < N for w in dropped)
    assert report.finding("wiring").evidence["dropped_early"] == len(dropped)
    # The named wirings run to the end although the serve wiring is far worse.
    assert report.wiring_result((1, 2, 3)).complete and report.wiring_result(TRAIN).complete
    ev = Evaluator(load_draft(demo.draft), SampleSet(demo.train_samples))
    full = search_wirings(ev, range(N), prune=False)
    pruned = search_wirings(ev, range(N))
    assert pruned.forwards < full.forwards == 24 * N
    assert pruned.ranked()[0].wiring == full.ranked()[0].wiring == TRAIN


def test_fc_blocks_permuted_and_write_fixed(demo, base, tmp_path):
    perm = [1, 2, 0]  # new block b = old block perm[b], so block b now wants slot perm[b]

    def permute(w):
        fc = w["fc.weight"]
        ht = fc.shape[1] // 3
        return {"fc.weight": torch.cat([fc[:, b * ht : (b + 1) * ht] for b in perm], dim=1)}

    bad = _variant(demo, tmp_path, "permuted", tensors=permute)
    ev, report = _run(bad, demo.train_samples)
    assert report.best_wiring == (1, 2, 0)
    w = report.finding("wiring")
    assert w.severity == "error" and w.wiring == (1, 2, 0)
    assert "ascending" in w.summary and "--write-fixed" in w.fix
    assert report.finding("serving_config").severity == "error"
    fp = report.finding("fc_fingerprint")
    assert fp.severity == "warning" and fp.evidence["flagged"]

    res = write_fixed(ev, report, tmp_path / "fixed")
    assert res.verified and res.plan.fixed_wiring == TRAIN
    # The fixed checkpoint under the ascending wiring reaches the original draft's accuracy.
    fixed_ev, fixed_report = _run(tmp_path / "fixed", demo.train_samples)
    assert fixed_report.best_wiring == TRAIN
    original = base[1].wiring_result(TRAIN).all_tok
    got = fixed_report.wiring_result(TRAIN).all_tok
    assert got.total == original.total and abs(got.hits - original.hits) <= 1


def test_norm_before_residual_flipped(demo, base, tmp_path):
    # On the demo itself the flag barely matters: training left the fc output at RMS ~1, where
    # hidden_norm(h) ~ h, and the doctor says so. Scaling fc by 8 changes nothing under
    # norm_before_residual=true (the residual and the attention input are then both normed), so
    # the scaled draft is one whose right value is true; its config.json then says false.
    nbr = base[1].finding("norm_before_residual")
    assert nbr.severity == "info" and nbr.evidence["fc_output_rms"] > 0

    def scale(w):
        return {"fc.weight": w["fc.weight"] * 8}

    good = _variant(
        demo,
        tmp_path,
        "nbr_true",
        tensors=scale,
        config=lambda c: c.update(norm_before_residual=True),
    )
    _, ok = _run(good, demo.train_samples)
    assert ok.finding("norm_before_residual").severity == "info"
    assert ok.best_wiring == TRAIN

    bad = _variant(demo, tmp_path, "nbr_flipped", tensors=scale)  # config.json keeps false
    _, report = _run(bad, demo.train_samples)
    f = report.finding("norm_before_residual")
    assert f.severity in ("error", "warning"), f.summary
    assert f.summary.startswith("norm_before_residual: the draft scores ")
    assert f.summary.endswith(" as configured (false): it was trained with true"), f.summary
    assert '"norm_before_residual": true' in f.fix
    assert f.config_fix == ConfigFix(norm_before_residual=True)
    assert f.to_dict()["config_fix"] == {"norm_before_residual": True}
    assert report.recommended_wiring == TRAIN  # searched again under the corrected flag


def test_d2t_absolute(demo, tmp_path):
    bad = _variant(
        demo, tmp_path, "d2t", tensors=lambda w: {"d2t": torch.arange(w["d2t"].numel()) + w["d2t"]}
    )
    _, report = _run(bad, demo.train_samples, 1)
    f = report.finding("vocab_map")
    assert f.severity == "error" and "absolute" in f.summary and "offsets" in f.fix


def test_samples_one_position_off(demo, tmp_path):
    out = tmp_path / "shifted"
    out.mkdir()
    for i in range(N):
        d = torch.load(demo.train_samples / f"data_{i}.pt", weights_only=True)
        # Hidden state t now sits beside token t+1: the capture lags the tokens by one.
        torch.save(
            {
                "input_ids": d["input_ids"][1:],
                "loss_mask": d["loss_mask"][1:],
                "hidden_states": [h[:-1] for h in d["hidden_states"]],
            },
            out / f"data_{i}.pt",
        )
    shutil.copy(demo.train_samples / "data_config.json", out / "data_config.json")
    _, report = _run(demo.draft, out)
    f = report.finding("alignment")
    assert f.severity in ("error", "warning") and f.evidence["shift"] == 1, f.summary
    assert report.pairing_shift == 1
    assert report.best_wiring == TRAIN  # the search reruns under the corrected pairing


def test_serving_wiring_configured(demo, tmp_path):
    bad = _variant(
        demo,
        tmp_path,
        "serve",
        config=lambda c: c.update(eagle_aux_hidden_state_layer_ids=[2, 4, 6]),
    )
    _, report = _run(bad, demo.train_samples)
    assert report.configured_wiring == (1, 2, 3)
    f = report.finding("wiring")
    assert f.severity == "error" and f.wiring == TRAIN
    assert "[L2, L4, L6]" in f.summary and "[0, 2, 4]" in f.fix and "[-1, 1, 3]" in f.fix


# --- layer-id conventions --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def unstated(demo, tmp_path_factory) -> Path:
    """The demo's first samples with a data_config.json that no longer states its convention: the
    layer ids [0, 2, 4, 6] are HF indices, as sets captured with vLLM-convention ids write them,
    but the sample reader assumes the speculators v1 default (decoder-layer outputs, id + 1)."""
    out = tmp_path_factory.mktemp("unstated")
    for i in range(N):
        shutil.copy(demo.train_samples / f"data_{i}.pt", out / f"data_{i}.pt")
    cfg = json.loads((demo.train_samples / "data_config.json").read_text())
    del cfg["hidden_states"]["index_convention"]
    cfg["hidden_states"].pop("index_note", None)
    (out / "data_config.json").write_text(json.dumps(cfg))
    return out


def test_layer_id_conventions_disagree(demo, unstated):
    _, report = _run(demo.draft, unstated)
    assert [s.hf_index for s in report.slots] == [1, 3, 5, 7]  # read as id + 1
    assert report.configured_wiring is None and report.best_wiring == TRAIN
    f = report.finding("wiring")
    assert f.severity == "warning" and f.wiring == TRAIN
    assert "names no aux layer ids" not in f.summary  # it names [0, 2, 4]
    assert (
        "eagle_aux_hidden_state_layer_ids [0, 2, 4] (HF indices, as vLLM reads the key) "
        "match no captured slot: the slots are HF [1, 3, 5, 7]" in f.summary
    )
    # Which convention was assumed for each source, and what the other reading gives.
    assert "read as decoder-layer output ids (HF index = id + 1), assumed" in f.summary
    assert (
        "reading data_config.json's ids as HF indices instead, the config selects "
        "[embed, L2, L4], exactly the best wiring" in f.summary
    )
    assert "--slot-layers 0,2,4,6" in f.fix and '"index_convention": "hf"' in f.fix
    ids = f.evidence["layer_ids"]
    assert (ids["draft"]["convention"], ids["draft"]["stated"]) == ("hf", False)
    assert (ids["slots"]["convention"], ids["slots"]["stated"]) == ("layer_output", False)
    best = {
        (r["draft_convention"], r["slots_convention"])
        for r in ids["other_readings"]
        if r["is_best"]
    }
    assert best == {("hf", "hf"), ("layer_output", "layer_output")}
    assert "data_config.json" in report.finding("serving_config").summary


def test_slot_layers_override_restores_the_demo(demo, unstated):
    ev = Evaluator(
        load_draft(demo.draft, strict=False), SampleSet(unstated), slot_layers=[0, 2, 4, 6]
    )
    assert [s.label for s in ev.slot_info] == ["embed", "L2", "L4", "L6"]
    report = diagnose(ev, DiagnoseSettings(N))
    assert report.configured_wiring == TRAIN
    f = report.finding("wiring")
    assert f.severity == "info" and "configured wiring [embed, L2, L4]" in f.summary
    assert f.evidence["layer_ids"]["slots"]["where"] == "--slot-layers"
    assert f.evidence["layer_ids"]["other_readings"] == []  # an override states its convention
    sc = report.serving_config.to_dict()
    assert sc["vllm"]["config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]
    assert "data_config.json" not in report.finding("serving_config").summary


def test_slot_layers_on_eval_doctor_and_open(demo, unstated, capsys):
    from inspector.cli import build_parser, main
    from inspector.commands.open import build_app, web_command

    base = [str(demo.draft), str(unstated), "--slot-layers", "0,2,4,6"]
    rc = main(["eval", *base, "--limit", "1", "--json", "--wiring", "embed,L2,L4"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert [(s["label"], s["hf_index"]) for s in doc["slots"]] == [
        ("embed", 0),
        ("L2", 2),
        ("L4", 4),
        ("L6", 6),
    ]
    assert doc["wirings"][0]["wiring"] == list(TRAIN)
    # Without the override the same labels name no slot (exit 2, the flag named).
    assert main(["eval", *base[:2], "--limit", "1", "--wiring", "embed,L2,L4"]) == 2
    assert "embed" in capsys.readouterr().err
    rc = main(["doctor", *base, "--samples", "2", "--json"])
    assert json.loads(capsys.readouterr().out)["configured_wiring"] == list(TRAIN)
    args = build_parser().parse_args(["open", *base])
    assert "--slot-layers 0,2,4,6" in web_command(args)
    ev = build_app(args).loader(lambda text: None).ev
    assert [s.label for s in ev.slot_info] == ["embed", "L2", "L4", "L6"]


@pytest.mark.parametrize("ids", ["0,2", "0,2,x,6", "0,2,4,٦", "0,-2,4,6", ","])
def test_slot_layers_bad_values_exit_2(demo, unstated, ids, capsys):
    from inspector.cli import main

    assert main(["eval", str(demo.draft), str(unstated), "--slot-layers", ids, "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert "--slot-layers" in err and len(error_lines(err)) == 1


def _hidden_norm_scaled(c: float):
    """hidden_norm's weight x c with the attention's hidden-half columns / c: the forward under
    norm_before_residual=false is unchanged (the residual is the raw fc output), while under
    true the residual becomes c times larger, so the weights clearly fit false."""

    def edit(w):
        h = w["layers.0.hidden_norm.weight"].shape[0]
        out = {"layers.0.hidden_norm.weight": w["layers.0.hidden_norm.weight"] * c}
        for p in ("q_proj", "k_proj", "v_proj"):
            m = w[f"layers.0.self_attn.{p}.weight"].clone()
            m[:, h:] /= c
            out[f"layers.0.self_attn.{p}.weight"] = m
        return out

    return edit


def test_norm_before_residual_absent_fits_false(demo, tmp_path):
    # A speculators config without the key: speculators reads false, vLLM's parser true. The
    # weights fit false, so vLLM runs the draft with the wrong residual: the doctor says so and
    # its fix writes the key.
    absent = _variant(
        demo,
        tmp_path,
        "nbr_absent",
        tensors=_hidden_norm_scaled(8.0),
        config=lambda c: c.pop("norm_before_residual"),
    )
    _, report = _run(absent, demo.train_samples)
    f = report.finding("norm_before_residual")
    ev = f.evidence
    assert ev["explicit"] is False and ev["norm_before_residual"] is False
    assert ev["readings"] == {"vLLM": True, "SGLang": False, "speculators": False}
    assert ev["fits"] is False and ev["misread_by"] == ["vLLM"]
    assert f.severity in ("warning", "error"), f.summary
    assert "vLLM reads true" in f.summary and "vLLM will run" in f.summary
    assert '"norm_before_residual": false' in f.fix
    assert f.config_fix == ConfigFix(norm_before_residual=False)
    assert report.recommended_wiring == TRAIN

    # The same weights with the key written: every reader that honours it agrees, no warning.
    pinned = _variant(demo, tmp_path, "nbr_pinned", tensors=_hidden_norm_scaled(8.0))
    _, ok = _run(pinned, demo.train_samples)
    g = ok.finding("norm_before_residual")
    assert g.severity == "info" and g.config_fix is None
    assert g.evidence["readings"]["vLLM"] is False


def test_norm_before_residual_absent_fits_true(demo, tmp_path):
    # fc x 8 makes true the right value (see above); without the key the loader reads false,
    # as speculators does, and the flip wins: the finding names who reads what.
    absent = _variant(
        demo,
        tmp_path,
        "nbr_absent_true",
        tensors=lambda w: {"fc.weight": w["fc.weight"] * 8},
        config=lambda c: c.pop("norm_before_residual"),
    )
    _, report = _run(absent, demo.train_samples)
    f = report.finding("norm_before_residual")
    ev = f.evidence
    assert ev["fits"] is True and set(ev["misread_by"]) == {"SGLang", "speculators"}
    assert "as read when absent" in f.summary and "readers differ" in f.summary
    assert f.config_fix == ConfigFix(norm_before_residual=True)


def test_rope_theta_wrong_in_the_config(demo, tmp_path):
    """A config whose rope_theta is not the one the draft was trained with: the rope finding
    names the theta that fits, with both scores, and the key to set, word for word."""

    def cfg(c):
        c["transformer_layer_config"]["rope_parameters"]["rope_theta"] = 500000.0

    _, report = _run(_variant(demo, tmp_path, "rope500k", config=cfg), demo.train_samples, 4)
    f = report.finding("rope")
    assert f.severity == "error"
    assert f.summary.startswith("rope: rope_theta=10000 (default) scores ")
    assert f.summary.endswith(" with the configured rope (theta 500000, default)"), f.summary
    assert f.fix == (
        'set "rope_theta": 10000.0 in the draft\'s config.json '
        "(transformer_layer_config for speculators)"
    )
    assert f.config_fix == ConfigFix(rope_theta=10000.0)
