"""The doctor's machinery on small random drafts: search == naive, lenient loading, the
config-level findings, serving ids, --write-fixed, the CLI.

(Faults that need a trained draft are in test_doctor_faults.py, on the bundled demo.)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from doctor_oracle import naive_search
from safetensors.torch import load_file, save_file

from inspector.cli import main
from inspector.doctor import (
    DiagnoseSettings,
    VocabRepair,
    diagnose,
    search_wirings,
    write_fixed,
)
from inspector.doctor.checks.layer_ids import configured_hf_ids
from inspector.doctor.fix import ascending_order
from inspector.doctor.report import Finding, sort_findings
from inspector.doctor.serving import engine_configs, serving_config
from inspector.doctor.wiring.search import Scorer, all_wirings, neighbours
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft
from inspector.sample import SlotInfo
from inspector.synthetic import SyntheticSpec, write_synthetic
from inspector.wiring import Wiring


@pytest.fixture(scope="module")
def syn(tmp_path_factory) -> tuple[Path, Path]:
    return write_synthetic(
        tmp_path_factory.mktemp("syn"), SyntheticSpec(size="tiny", n_samples=3, seq_len=48)
    )


def _ev(draft_dir: Path, samples: Path, strict: bool = True) -> Evaluator:
    return Evaluator(load_draft(draft_dir, strict=strict), SampleSet(samples))


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


# --- search ------------------------------------------------------------------------------------
def test_search_equals_naive(syn):
    ev = _ev(*syn)
    idx = [0, 1, 2]
    ws = search_wirings(ev, idx, prune=False)
    ranked = naive_search(ev, idx, all_wirings(4, 3))
    naive = {w: (c, lp) for w, c, lp in ranked}
    assert len(ws.ranked()) == 24
    for acc in ws.ranked():
        c, lp = naive[acc.wiring]
        assert acc.counts() == c
        assert acc.mean_logp() == pytest.approx(lp, abs=1e-4)
    assert ws.ranked()[0].wiring == ranked[0][0]
    pruned = search_wirings(ev, idx, protected=[(0, 1, 2)])
    assert pruned.ranked()[0].wiring == ws.ranked()[0].wiring
    assert not pruned.scores((0, 1, 2)).dropped


def test_search_counts_match_evaluator(syn):
    ev = _ev(*syn)
    ws = search_wirings(ev, [0, 1], prune=False)
    rep = ev.run([Wiring((0, 1, 2)), Wiring((2, 0, 3))], limit=2)
    for w, wr in zip(((0, 1, 2), (2, 0, 3)), rep.wirings, strict=True):
        assert ws.scores(w).counts() == wr.steps[0].all_tok


def test_neighbours_and_greedy(syn, monkeypatch):
    assert (1, 0, 2) in neighbours((0, 1, 2), 4) and (3, 1, 2) in neighbours((0, 1, 2), 4)
    assert all(len(set(w)) == 3 for w in neighbours((0, 1, 2), 4))
    import inspector.doctor.wiring.search as s

    ev = _ev(*syn)
    exhaustive = search_wirings(ev, [0, 1], prune=False).ranked()[0].wiring
    monkeypatch.setattr(s, "EXHAUSTIVE_MAX_SLOTS", 2)
    greedy = search_wirings(ev, [0, 1], protected=[exhaustive], start=(0, 1, 2), prune=False)
    assert greedy.ranked()[0].wiring == exhaustive  # a local optimum at the global one stays there
    assert len(greedy.state) < 24


def test_shifted_scorer_rows(syn):
    ev = _ev(*syn)
    m = {s: Scorer(ev, shift=s, count_from=1).score(0, [(0, 1, 2)])[0].hit.size for s in (-1, 0, 1)}
    assert m[-1] == m[0] == m[1] > 0


# --- lenient loading and the config-level findings ---------------------------------------------
def _rewrite(src: Path, dst: Path, tensors: dict | None = None, config: dict | None = None) -> Path:
    dst.mkdir(parents=True)
    w = load_file(str(src / "model.safetensors"))
    w.update(tensors or {})
    save_file(w, str(dst / "model.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    for k, v in (config or {}).items():
        cfg[k] = v
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_absolute_d2t_is_a_finding(syn, tmp_path):
    w = load_file(str(syn[0] / "model.safetensors"))
    absolute = torch.arange(w["d2t"].numel()) + w["d2t"]
    bad = _rewrite(syn[0], tmp_path / "abs", {"d2t": absolute})
    with pytest.raises(InputError):
        load_draft(bad)
    draft = load_draft(bad, strict=False)
    assert any("absolute" in n for n in draft.notes)
    assert torch.equal(draft.vocab.d2t, w["d2t"])
    report = diagnose(Evaluator(draft, SampleSet(syn[1])), DiagnoseSettings(2))
    f = report.finding("vocab_map")
    assert f.severity == "error" and "absolute" in f.summary and "offsets" in f.fix
    assert f.evidence["d2t"] == "absolute"
    assert f.vocab_repair == VocabRepair.OFFSETS


def test_t2d_disagreeing_is_a_finding(syn, tmp_path):
    w = load_file(str(syn[0] / "model.safetensors"))
    t2d = w["t2d"].clone()
    first = int(t2d.nonzero()[0])
    t2d[first] = False
    t2d[(~t2d).nonzero()[-1]] = True
    bad = _rewrite(syn[0], tmp_path / "t2d", {"t2d": t2d})
    with pytest.raises(InputError):
        load_draft(bad)
    report = diagnose(_ev(bad, syn[1], strict=False), DiagnoseSettings(1))
    f = report.finding("vocab_map")
    assert f.severity == "error" and "t2d disagrees" in f.summary
    assert f.vocab_repair == VocabRepair.T2D_FROM_D2T


def test_missing_head_dim_is_a_finding(tmp_path):
    d, s = write_synthetic(
        tmp_path / "hd",
        SyntheticSpec(size="tiny", n_samples=2, seq_len=40, head_dim=32, write_head_dim=False),
    )
    with pytest.raises(InputError, match="head_dim"):
        load_draft(d)
    ev = _ev(d, s, strict=False)
    assert ev.draft.config.head_dim == 32
    report = diagnose(ev, DiagnoseSettings(2))
    f = report.finding("head_dim")
    assert f.severity == "error"
    assert "no head_dim" in f.summary and '"head_dim": 32' in f.fix
    assert f.summary.startswith(
        "config.json has no head_dim, and q_proj implies 32 while hidden_size/heads is 16: "
        "engines and trainers that fall back to hidden_size/heads fail to load the draft or "
        "build the wrong attention/RoPE"
    ), f.summary
    assert f.evidence["hidden_size/heads"] == 16
    assert f.config_fix is not None and f.config_fix.head_dim == 32
    # --write-fixed adds it, and the written checkpoint loads strictly.
    res = write_fixed(ev, report, tmp_path / "fixed")
    cfg = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert cfg["transformer_layer_config"]["head_dim"] == 32
    assert res.verified and res.plan.config_fix.head_dim == 32


# --- serving ids -------------------------------------------------------------------------------
def test_sglang_and_vllm_ids():
    c = engine_configs([0, 2, 4], last_layer=6)  # no target class: both of SGLang's readings
    assert c["vllm"]["config"] == {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}
    assert c["sglang"]["layer_ids_by_rule"] == {"every": [-1, 1, 3], "first-is-1": [0, 2, 4]}
    assert c["sglang"]["layer_ids"] is None and c["sglang"]["target_class"] is None
    # the config.json keys: the reading of every model file but DeepSeek's and GLM-4 MoE Lite's
    assert c["sglang"]["config"]["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 1, 3]
    assert any("-1" in n for n in c["sglang"]["notes"]) and any(
        "36063" in n for n in c["vllm"]["notes"]
    )
    # A 61-layer Llama target: HF [3, 31, 59] is SGLang [2, 30, 58] (id = HF index - 1).
    llama = engine_configs([3, 31, 59], last_layer=None, target="LlamaForCausalLM")["sglang"]
    assert llama["layer_ids"] == [2, 30, 58] and llama["rule"]["family"] == "Llama"
    assert llama["rule"]["source"] == "SGLang 0.5.23 srt/models/llama.py 929-941"
    assert configured_hf_ids([1, 29, 57], "sglang") == [[2, 30, 58]]
    assert configured_hf_ids([-1, 2, 30], "sglang") == [[0, 3, 31], [-1, 2, 30]]
    assert configured_hf_ids([0, 2, 4], "hf") == [[0, 2, 4]]


def test_serving_config_not_ascending():
    infos = [
        SlotInfo("embed", 0),
        SlotInfo("L2", 2),
        SlotInfo("L4", 4),
        SlotInfo("L6", 6, verifier=True),
    ]
    sc = serving_config((1, 2, 0), infos).to_dict()  # the report's JSON
    assert sc["ascending"] is False and sc["reproducible"] is False
    assert sc["vllm"]["config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]
    assert "no config reproduces" in " ".join(sc["problems"])
    assert serving_config((1, 2, 3), infos).reproducible is True
    unknown = serving_config((0, 1, 2), [SlotInfo("s0"), SlotInfo("s1"), SlotInfo("s2")]).to_dict()
    assert unknown["reproducible"] is None and "--slot-layers" in unknown["problems"][0]
    assert ascending_order((2, 0, 1), [4, 0, 2]) == [1, 2, 0]


def test_findings_sorted_by_severity():
    fs = [
        Finding("alignment", "info", ""),
        Finding("rope", "error", ""),
        Finding("vocab_map", "warning", ""),
        Finding("wiring", "error", ""),
    ]
    assert [f.kind for f in sort_findings(fs)] == ["rope", "wiring", "vocab_map", "alignment"]


# --- --write-fixed -----------------------------------------------------------------------------
def test_write_fixed_permutes_and_verifies(syn, tmp_path):
    ev = _ev(*syn)
    report = diagnose(ev, DiagnoseSettings(2))
    report.recommended_wiring = (2, 0, 1)  # force a non-ascending wiring: [L4, embed, L2]
    before = _digest(syn[0])
    res = write_fixed(ev, report, tmp_path / "out")
    assert _digest(syn[0]) == before  # the input is never written
    assert res.verified and res.verification.positions_differing == 0
    assert res.plan.fixed_wiring == (0, 1, 2) and res.plan.block_order == (1, 2, 0)
    assert res.to_dict()["wiring"] == [0, 1, 2] and res.to_dict()["block_order"] == [1, 2, 0]
    fixed = load_draft(tmp_path / "out")
    assert fixed.config.aux_layer_ids == (0, 2, 4)
    orig = load_draft(syn[0])
    for k in range(3):
        torch.testing.assert_close(fixed.fc_block(k), orig.fc_block([1, 2, 0][k]))
    # Same predictions, position by position, on a sample the doctor did not use.
    fev = Evaluator(fixed, SampleSet(syn[1]))
    a = ev.predict(2, Wiring((2, 0, 1))).steps[0].pred_target
    b = fev.predict(2, Wiring((0, 1, 2))).steps[0].pred_target
    assert (a == b).all()
    with pytest.raises(InputError, match="not empty"):
        write_fixed(ev, report, tmp_path / "out")
    with pytest.raises(InputError, match="outside"):
        write_fixed(ev, report, syn[0] / "sub")


# --- the report and the CLI --------------------------------------------------------------------
def test_report_contract(syn):
    ev = _ev(*syn)
    calls = []
    report = diagnose(
        ev,
        DiagnoseSettings(2),
        progress=lambda stage, done, total: calls.append((stage, done, total)),
    )
    d = json.loads(json.dumps(report.to_dict()))
    assert set(d) >= {"best_wiring", "wirings", "findings", "serving_config"}
    assert len(d["wirings"]) == 24 and d["best_wiring"] == d["wirings"][0]["wiring"]
    assert set(d["wirings"][0]) >= {"wiring", "all_tok"} and set(d["wirings"][0]["all_tok"]) == {
        "hits",
        "total",
        "acc",
    }
    assert {"kind", "severity", "summary", "evidence", "fix", "config_fix", "vocab_repair"} <= set(
        d["findings"][0]
    )
    assert set(d["serving_config"]) >= {"sglang", "vllm"}
    kinds = {f["kind"] for f in d["findings"]}
    assert kinds >= {
        "wiring",
        "fc_fingerprint",
        "norm_before_residual",
        "rope",
        "head_dim",
        "vocab_map",
        "alignment",
        "serving_config",
    }
    sev = [f["severity"] for f in d["findings"]]
    assert sev == sorted(sev, key=["error", "warning", "info"].index)
    assert {c[0] for c in calls} >= {"wiring search", "alignment"}
    assert report.finding("wiring").wiring == report.recommended_wiring


def test_cli_json_and_table(syn, capsys):
    rc = main(["doctor", str(syn[0]), str(syn[1]), "--samples", "2", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc in (0, 1) and len(d["wirings"]) == 24
    rc = main(["doctor", str(syn[0]), str(syn[1]), "--samples", "1", "--slot-layers", "0,3,5,7"])
    out = capsys.readouterr().out
    assert "wiring" in out and "serving config" in out and "L7" in out
    assert main(["doctor", str(syn[0]), str(syn[1]), "--slot-layers", "0,1"]) == 2
