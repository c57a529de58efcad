"""`eagle-inspect eval` on the golden speculators fixture: the table and the JSON contract."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from inspector.cli import main

STEP_KEYS = {"step", "all_tok", "in_vocab", "coverage", "cond_acc"}
POS_KEYS = {
    "sample",
    "step",
    "pos",
    "input",
    "true",
    "true_draft",
    "pred_draft",
    "pred_target",
    "p_pred",
    "p_true",
    "rank_true",
    "masked",
    "in_vocab",
    "hit",
}


def test_eval_table(golden, capsys):
    root = golden / "speculators-basic"
    assert main(["eval", str(root / "checkpoint"), str(root / "samples"), "--ttt-steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "[s0, s1, s2]" in out and "[s1, s2, s3]" in out
    assert "train" in out and "serve" in out and "all-tok s2" in out


def test_eval_json_contract(golden, capsys):
    root = golden / "speculators-basic"
    argv = [
        "eval",
        str(root / "checkpoint"),
        str(root / "samples"),
        "--json",
        "--positions",
        "--ttt-steps",
        "2",
        "--wiring",
        "train",
        "--wiring",
        "s2,s1,s0",
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"checkpoint", "samples", "device", "dtype", "wirings"} <= doc.keys()
    assert doc["samples"] == 3 and doc["device"] == "cpu" and doc["dtype"] == "float32"
    assert [w["wiring"] for w in doc["wirings"]] == [[0, 1, 2], [2, 1, 0]]
    for w in doc["wirings"]:
        assert {
            "wiring",
            "label",
            "steps",
            "acceptance_length",
            "per_sample",
            "positions",
        } <= w.keys()
        assert [s["step"] for s in w["steps"]] == [0, 1]
        for s in w["steps"]:
            assert STEP_KEYS <= s.keys() and {"hits", "total", "acc"} == s["all_tok"].keys()
        assert len(w["per_sample"]) == 3
        assert {"index", "path", "steps"} <= w["per_sample"][0].keys()
        # Totals are the sum over samples, and positions agree with them.
        for k in range(2):
            hits = sum(p["steps"][k]["all_tok"]["hits"] for p in w["per_sample"])
            assert hits == w["steps"][k]["all_tok"]["hits"]
            rows = [p for p in w["positions"] if p["step"] == k]
            assert POS_KEYS <= rows[0].keys()
            assert sum(p["hit"] and p["masked"] for p in rows) == hits
            assert sum(p["masked"] for p in rows) == w["steps"][k]["all_tok"]["total"]
    # T = 37, 50, 64: step 0 evaluates rows j = 0..T-3.
    assert sum(1 for p in doc["wirings"][0]["positions"] if p["step"] == 0) == 35 + 48 + 62


def test_eval_json_stdout_is_only_json(golden):
    root = golden / "speculators-basic"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "inspector",
            "eval",
            str(root / "checkpoint"),
            str(root / "samples"),
            "--json",
            "--limit",
            "1",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(proc.stdout)
    assert doc["samples"] == 1


def test_usage_errors(golden, capsys):
    root = golden / "speculators-basic"
    assert main(["eval", str(root / "checkpoint"), str(root / "samples"), "--wiring", "0,9,1"]) == 2
    assert "slot 9 does not exist" in capsys.readouterr().err
    assert main(["eval", str(root / "checkpoint"), str(root / "samples"), "--dtype", "float8"]) == 2
    assert "unknown dtype" in capsys.readouterr().err


def test_runtime_failure_exits_4_with_one_line(golden, capsys, monkeypatch):
    """Not 1: a run that could not finish found no problem in the draft (`ExitCode.FAILED`)."""
    from inspector.evaluate import evaluator as evaluator_module

    def oom(*a, **k):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")

    monkeypatch.setattr(evaluator_module, "iter_steps", oom)
    root = golden / "speculators-basic"
    assert main(["eval", str(root / "checkpoint"), str(root / "samples")]) == 4
    assert capsys.readouterr().err.strip() == (
        "eagle-inspect: failed: CUDA out of memory. Tried to allocate 2.00 GiB"
    )


def test_demo_build_subcommand_reaches_the_builder(monkeypatch, tmp_path):
    import inspector.demo.build as demo_build

    calls = []
    monkeypatch.setattr(demo_build, "build", lambda out, seed=0, **kw: calls.append((out, seed)))
    assert main(["demo", "build", "--out", str(tmp_path / "d"), "--seed", "3"]) == 0
    assert calls == [(tmp_path / "d", 3)]


def test_trainer_metrics_in_json_and_tables(capsys):
    """The demo (its config points at its verifier): every step object carries the trainers'
    metrics; the table shows the layout's trainer by default, all with --metrics all."""
    assert main(["eval", "--json", "--ttt-steps", "2", "--limit", "3", "--wiring", "train"]) == 0
    doc = json.loads(capsys.readouterr().out)
    w = doc["wirings"][0]
    for s in w["steps"]:
        t = s["trainer"]
        assert set(t) == {"speculators", "specforge"}
        assert set(t["speculators"]) == {"full_acc", "cond_acc"} and set(t["specforge"]) == {"acc"}
        assert set(t["speculators"]["full_acc"]) == {"hits", "total", "acc"}
    accs = [s["trainer"]["specforge"]["acc"]["acc"] for s in w["steps"]]
    assert w["specforge_simulated_acc_len"] == pytest.approx(accs[0] + accs[0] * accs[1])
    # one more row per sample and step than ours: the row after each sample's last token
    assert w["steps"][0]["trainer"]["speculators"]["full_acc"]["total"] == (
        w["steps"][0]["all_tok"]["total"] + 3
    )

    assert main(["eval", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "speculators' own metrics" in out and "full_acc_0" in out
    assert "SpecForge's own" not in out and "simulated_acc_len" not in out
    assert main(["eval", "--limit", "2", "--metrics", "all"]) == 0
    out = capsys.readouterr().out
    assert "full_acc_0" in out and "SpecForge's own" in out and "simulated_acc_len" in out
    assert main(["eval", "--limit", "2", "--metrics", "ours"]) == 0
    out = capsys.readouterr().out
    assert "full_acc_0" not in out and "all-tok" in out


def test_trainer_metrics_need_the_verifier(golden, capsys):
    root = golden / "specforge-basic"
    argv = ["eval", str(root / "checkpoint"), str(root / "samples")]
    argv += ["--embed", str(root / "target_embed.safetensors")]
    assert main([*argv, "--metrics", "specforge"]) == 0
    cap = capsys.readouterr()
    assert "acc_0" not in cap.out and "pass --target DIR" in cap.err
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "trainer" not in doc["wirings"][0]["steps"][0]
    assert "specforge_simulated_acc_len" not in doc["wirings"][0]


def test_memory_budget_flag(golden, capsys, monkeypatch):
    root = golden / "speculators-basic"
    argv = ["eval", str(root / "checkpoint"), str(root / "samples"), "--json"]
    assert main([*argv, "--memory-budget", "256M"]) == 0
    ref = json.loads(capsys.readouterr().out)
    assert main([*argv, "--memory-budget", "lots"]) == 2
    assert "--memory-budget" in capsys.readouterr().err
    monkeypatch.setenv("EAGLE_INSPECT_MEMORY_BUDGET", "1%")
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["wirings"] == ref["wirings"]


def _body_rows(table_text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("│").split("│")]
        for line in table_text.splitlines()
        if line.startswith("│")
    ]


def test_eval_tables_numbers_are_the_jsons(capsys):
    """Every count of eval's tables (ours, speculators', SpecForge's) against the JSON, per
    wiring and step: a swapped or mislabelled column fails here."""
    argv = ["eval", "--ttt-steps", "2", "--limit", "3", "--metrics", "all"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    out = capsys.readouterr().out
    ours_text, rest = out.split("speculators' own metrics", 1)
    spec_text, sf_text = rest.split("SpecForge's own", 1)
    ours, spec, sf = _body_rows(ours_text), _body_rows(spec_text), _body_rows(sf_text)

    def fmt(c: dict) -> str:
        return f"{c['hits']}/{c['total']} {100 * c['acc']:.1f}%"

    for i, w in enumerate(doc["wirings"]):
        steps = w["steps"]
        row = ours[i]
        assert row[0] == w["label"].split(" [")[0]
        assert row[2:4] == [fmt(s["all_tok"]) for s in steps]
        assert row[4] == fmt(steps[0]["in_vocab"])
        assert row[5] == f"{100 * steps[0]['coverage']:.1f}%"
        al = f"{w['acceptance_length']:.2f}"
        assert row[6] == (">=" + al if w["accept"]["accept_length_is_lower_bound"] else al)
        t = [s["trainer"] for s in steps]
        assert spec[i][1:] == [fmt(x["speculators"]["full_acc"]) for x in t] + [
            fmt(x["speculators"]["cond_acc"]) for x in t
        ]
        assert sf[i][1:3] == [fmt(x["specforge"]["acc"]) for x in t]
        assert sf[i][3] == f"{w['specforge_simulated_acc_len']:.3f}"
