"""`accept --profile` and `sweep --profile` write speculation_profile.json: held to the fields
docs/reference/profile.md documents (its table, read here) and to the identities between them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from inspector.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reference" / "profile.md"
DEMO = ROOT / "assets" / "demo"


def documented_fields() -> dict[str, str]:
    """field -> whose, from the page's table."""
    rows = re.findall(r"(?m)^\| `(\w+)` \| (ModelOpt|ours) \|", DOC.read_text())
    return dict(rows)


def check(profile: dict, *, greedy: bool = True) -> None:
    assert set(profile) == set(documented_fields())
    k = profile["num_speculative_tokens"]
    marg, cond = profile["marginal_accept_rates"], profile["conditional_accept_rates"]
    assert len(marg) == len(cond) == k
    assert all(1 >= a >= b >= 0 for a, b in zip([1.0, *marg], marg, strict=False))
    before = 1.0
    for m, c in zip(marg, cond, strict=True):
        # each figure is rounded to 6 decimals: the ratio of two rounded figures is off by at
        # most half a unit over the denominator, plus the numerator's share of its error
        tol = 0.5e-6 * (1 / before + m / before**2) + 0.5e-6 if before else 1e-6
        assert c == pytest.approx(m / before if before else 0.0, abs=tol)
        before = m
    assert profile["mean_accept_length"] == pytest.approx(1 + sum(marg), abs=1e-5)
    hist = profile["acceptance_length_histogram"]
    assert list(hist) == [str(n) for n in range(1, k + 2)]
    ours = profile["eagle3_inspector"]
    assert sum(hist.values()) == ours["rounds"]
    if greedy:
        emitted = sum(int(n) * c for n, c in hist.items())
        assert emitted == ours["rounds"] + ours["accepted"]
        assert profile["mean_accept_length"] == pytest.approx(
            1 + ours["accepted"] / ours["rounds"], abs=1e-6
        )


def test_the_documented_fields_are_modelopts_and_ours():
    fields = documented_fields()
    assert fields["eagle3_inspector"] == "ours"
    assert {k for k, v in fields.items() if v == "ModelOpt"} >= {
        "num_speculative_tokens",
        "conditional_accept_rates",
        "marginal_accept_rates",
        "mean_accept_length",
        "acceptance_length_histogram",
        "measurement_conditions",
    }


def test_accept_writes_the_profile_of_its_first_wiring(tmp_path, capsys):
    out = tmp_path / "p" / "profile.json"
    argv = ["accept", str(DEMO / "draft"), str(DEMO / "samples" / "held"), "--steps", "4"]
    assert main([*argv, "--wiring", "serve", "--json", "--profile", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    profile = json.loads(out.read_text())
    check(profile)
    w = doc["wirings"][0]
    ours = profile["eagle3_inspector"]
    assert ours["wiring_label"] == w["label"] and ours["wiring"] == w["wiring"]
    assert (ours["rounds"], ours["accepted"]) == (w["rounds"], w["accepted"])
    assert profile["num_speculative_tokens"] == 4
    assert profile["marginal_accept_rates"] == [round(x, 6) for x in w["per_depth"]]
    assert profile["measurement_conditions"]["num_samples"] == 48
    per = [s["spec_accept_length"] for s in w["per_sample"]]
    assert len(ours["per_request"]) == len(per)


def test_sweep_writes_one_profile_per_checkpoint(tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(DEMO / "draft", run / "epoch_0_step_0")
    shutil.copytree(DEMO / "draft", run / "epoch_1_step_5")
    out = tmp_path / "profiles"
    argv = ["sweep", str(run), str(DEMO / "samples" / "held"), "--fresh", "--limit", "6"]
    assert main([*argv, "--json", "--profile", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "epoch_0_step_0.speculation_profile.json",
        "epoch_1_step_5.speculation_profile.json",
    ]
    for r in doc["checkpoints"]:
        profile = json.loads((out / f"{r['name']}.speculation_profile.json").read_text())
        check(profile)
        assert profile["mean_accept_length"] == pytest.approx(r["accept_length"], abs=1e-6)
        assert profile["mean_accept_length_per_request"] is None
        assert profile["measurement_conditions"] == {
            "dataset": str(DEMO / "samples" / "held"),
            "osl": None,
            "num_samples": None,
            "validation": "eagle3-inspector sweep (replay)",
        }
        assert profile["eagle3_inspector"] == {
            "checkpoint": r["path"],
            "step": r["step"],
            "engine": "vllm",
            "draft": {"steps": 3, "topk": 1, "draft_tokens": 4},
            "temperature": 0.0,
            "verification": "greedy",
            "wiring": "train",
            "rounds": r["rounds"],
            "accepted": r["accepted"],
            "accept_length_is_lower_bound": r["is_bound"],
        }


def test_a_profile_inside_the_run_is_refused(tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(DEMO / "draft", run / "epoch_0_step_0")
    argv = ["sweep", str(run), str(DEMO / "samples" / "held"), "--profile", str(run / "p")]
    assert main(argv) == 2
    assert "--profile" in capsys.readouterr().err


def test_the_conditions_and_the_per_request_mean(tmp_path, capsys):
    out = tmp_path / "profile.json"
    argv = ["accept", str(DEMO / "draft"), str(DEMO / "samples" / "held"), "--wiring", "train"]
    assert main([*argv, "--limit", "6", "--json", "--profile", str(out)]) == 0
    w = json.loads(capsys.readouterr().out)["wirings"][0]
    profile = json.loads(out.read_text())
    assert profile["measurement_conditions"] == {
        "dataset": str(DEMO / "samples" / "held"),
        "osl": None,
        "num_samples": 6,
        "validation": "eagle3-inspector accept (replay)",
    }
    per = [1 + sum(s["accepted"]) / len(s["accepted"]) for s in w["per_sample"] if s["accepted"]]
    assert profile["eagle3_inspector"]["per_request"] == [round(x, 6) for x in per]
    assert profile["mean_accept_length_per_request"] == pytest.approx(sum(per) / len(per), abs=1e-6)
    ours = profile["eagle3_inspector"]
    assert set(ours) == {
        "checkpoint",
        "engine",
        "draft",
        "temperature",
        "verification",
        "wiring",
        "wiring_label",
        "rounds",
        "accepted",
        "accept_length_is_lower_bound",
        "per_request",
    }
    assert ours["checkpoint"] == str(DEMO / "draft") and ours["engine"] == "vllm"
    assert ours["temperature"] == 0.0 and ours["verification"] == "greedy"
    assert ours["accept_length_is_lower_bound"] is w["accept_length_is_lower_bound"]
    assert ours["draft"] == {"steps": 3, "topk": 1, "draft_tokens": 4}


def test_at_a_temperature_the_rates_are_the_rules_expectation(tmp_path, capsys):
    out = tmp_path / "profile.json"
    argv = ["accept", str(DEMO / "draft"), str(DEMO / "samples" / "held"), "--wiring", "train"]
    argv += ["--limit", "3", "--target", str(DEMO / "target"), "--temperature", "0.7"]
    assert main([*argv, "--json", "--profile", str(out), "--device", "cpu"]) == 0
    w = json.loads(capsys.readouterr().out)["wirings"][0]
    profile = json.loads(out.read_text())
    check(profile, greedy=False)
    exp = w["expected"]
    rounds = profile["eagle3_inspector"]["rounds"]
    want = [round(x / rounds, 6) for x in exp["expected_accepted_per_pos"]]
    assert profile["marginal_accept_rates"] == want
    assert profile["mean_accept_length"] == pytest.approx(exp["accept_length"], abs=1e-5)
    assert profile["eagle3_inspector"]["temperature"] == 0.7
    assert profile["eagle3_inspector"]["verification"] == "vllm-onehot"


def test_the_live_loop_states_its_output_length(tmp_path, capsys):
    out = tmp_path / "profile.json"
    argv = ["accept", str(DEMO / "draft"), "--live", "--prompts", str(DEMO / "prompts.jsonl")]
    argv += ["--target", str(DEMO / "target"), "--max-new", "24", "--limit", "2"]
    assert main([*argv, "--wiring", "train", "--json", "--profile", str(out)]) == 0
    profile = json.loads(out.read_text())
    check(profile)
    cond = profile["measurement_conditions"]
    assert cond["osl"] == 24 and cond["dataset"] == str(DEMO / "prompts.jsonl")
    assert cond["validation"] == "eagle3-inspector accept (live)"
