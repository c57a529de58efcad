"""`eagle-inspect accept`: the table, the JSON contract, the flags' checks."""

from __future__ import annotations

import json

import pytest
from support import error_lines
from test_tui_support import needs_demo

from inspector.cli import main

WIRING_KEYS = {
    "wiring",
    "label",
    "rounds",
    "accepted",
    "emitted",
    "accept_length",
    "per_depth",
    "per_sample",
    "by_position",
    "synthetic_acceptance_rates",
}


def _run(capsys, args):
    rc = main(["accept", *map(str, args), "--device", "cpu"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_accept_table_names_the_engine_flags(tiny_synthetic, capsys):
    draft, samples = tiny_synthetic
    rc, out, err = _run(capsys, [draft, samples, "--steps", "2"])
    assert rc == 0
    assert "accept len" in out and ">=1" in out and ">=2" in out and ">=3" not in out
    assert "--speculative-num-steps 2" in out and "num_speculative_tokens 2" in out
    assert "train" in out and "serve" in out
    # without the target the realised output cannot be checked: said on stderr
    assert "--target" in err


def test_accept_json_contract_and_sums(tiny_synthetic, capsys):
    draft, samples = tiny_synthetic
    rc, out, _ = _run(
        capsys, [draft, samples, "--json", "--steps", "3", "--topk", "2", "--draft-tokens", "6"]
    )
    assert rc == 0
    doc = json.loads(out)
    # a tree: SGLang's convention by default
    assert doc["config"] == {
        "steps": 3,
        "topk": 2,
        "draft_tokens": 6,
        "mode": "replay",
        "engine": "sglang",
        "overlap_scheduler": True,
    }
    assert doc["conventions"]["engine"] == "sglang"
    assert doc["samples"] == 3 and len(doc["wirings"]) == 2
    for w in doc["wirings"]:
        assert WIRING_KEYS <= w.keys()
        a = [x for s in w["per_sample"] for x in s["accepted"]]
        assert w["rounds"] == len(a) and w["accepted"] == sum(a)
        assert w["accept_length"] == pytest.approx(1 + w["accepted"] / w["rounds"])
        assert w["per_depth"][0] == pytest.approx(sum(x >= 1 for x in a) / len(a))
        assert w["per_depth"][2] == pytest.approx(sum(x >= 3 for x in a) / len(a))
        assert [s["index"] for s in w["per_sample"]] == [0, 1, 2]
        assert w["by_position"][0]["start"] == 0 and w["by_position"][0]["end"] == 1024


def test_accept_limit_and_explicit_wiring(tiny_synthetic, capsys):
    draft, samples = tiny_synthetic
    rc, out, _ = _run(capsys, [draft, samples, "--json", "--limit", "1", "--wiring", "0,1,2"])
    doc = json.loads(out)
    assert rc == 0 and doc["samples"] == 1
    assert [w["wiring"] for w in doc["wirings"]] == [[0, 1, 2]]
    assert doc["config"]["steps"] == 3 and doc["config"]["draft_tokens"] == 4  # the defaults


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--topk", "4"], "--draft-tokens: required with --topk 4"),
        (["--steps", "2", "--draft-tokens", "5"], "a chain (topk 1) verifies steps + 1 = 3"),
        (["--steps", "2", "--topk", "2", "--draft-tokens", "9"], "2..7 tokens"),
    ],
)
def test_accept_refuses_settings_no_engine_has_in_one_line(tiny_synthetic, capsys, flags, message):
    draft, samples = tiny_synthetic
    rc, out, err = _run(capsys, [draft, samples, *flags])
    assert rc == 2 and out == ""
    assert message in err and len(error_lines(err)) == 1


@needs_demo
def test_accept_on_the_demo_says_when_samples_are_not_the_targets_output(capsys):
    rc, out, err = _run(capsys, ["--json", "--limit", "6"])
    doc = json.loads(out)
    assert rc == 0
    train, serve = doc["wirings"]
    assert train["accept_length"] > serve["accept_length"] + 0.5
    # the demo's training samples were sampled at temperature 0.7, not the target's greedy output
    off = train["off_target"]
    assert off == serve["off_target"] and off["share"] > 0.2
    assert "not the target's argmax" in err and "capture" in err


@needs_demo
def test_accept_live_on_the_demo_and_its_replay_agree_round_by_round(tmp_path, capsys):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the loop is many small forwards: threads only contend here
    try:
        out = tmp_path / "live"
        rc, text, err = _run(
            capsys, ["--live", "--max-new", "16", "--limit", "2", "--out", out, "--json"]
        )
        assert rc == 0, err
        live = json.loads(text)
        assert live["config"]["mode"] == "live" and live["samples"] == 2
        assert [w["label"].split(" ")[0] for w in live["wirings"]] == ["train", "serve"]
        assert "replays them" in err
        from inspector.demo_paths import demo_paths

        draft = demo_paths().draft
        rc, text, _ = _run(capsys, [draft, out / "train", "--wiring", "train", "--json"])
        replay = json.loads(text)
    finally:
        torch.set_num_threads(threads)
    assert rc == 0 and replay["config"]["mode"] == "replay"
    got = [s["accepted"] for s in replay["wirings"][0]["per_sample"]]
    assert got == [s["accepted"] for s in live["wirings"][0]["per_sample"]]
    assert replay["wirings"][0]["accept_length"] == live["wirings"][0]["accept_length"]


@needs_demo
def test_accept_live_at_a_temperature_prints_the_expectation_its_json_holds(capsys):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    args = ["--live", "--max-new", "16", "--limit", "2", "--temperature", "0.6", "--top-k", "20"]
    args += ["--wiring", "train", "--seed", "5"]
    try:
        rc, text, err = _run(capsys, [*args, "--json"])
        assert rc == 0, err
        rc, table, err = _run(capsys, args)
        assert rc == 0, err
    finally:
        torch.set_num_threads(threads)
    w = json.loads(text)["wirings"][0]
    e = w["expected"]
    assert json.loads(text)["config"]["sampling"]["verification"] == {"rule": "vllm-onehot"}
    row = next(line for line in table.splitlines() if line.startswith("│ train"))
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[2] == f"{w['accept_length']:.2f}"
    assert cells[-2] == f"{e['accept_length']:.2f} [{e['ci_low']:.2f}, {e['ci_high']:.2f}]"
    assert cells[-1] == f"{e['z']:+.2f}"
    assert "temperature 0.6, top-k 20, vllm-onehot verification" in " ".join(table.split())


def test_accept_live_needs_a_target_and_prompts(tiny_synthetic, capsys):
    draft, samples = tiny_synthetic
    rc, _, err = _run(capsys, [draft, "--live", "--prompts", "p.jsonl"])
    assert rc == 2 and "--target" in err
    rc, _, err = _run(capsys, [draft, samples, "--live", "--target", "t"])
    assert rc == 2 and "SAMPLES" in err and "--prompts" in err


@needs_demo
def test_doctor_quotes_the_accept_length_accept_replays(capsys):
    """The wiring finding: what an engine logs with the trained and with the served wiring, the
    very numbers `accept` gives over the doctor's samples (a chain of 3 steps)."""
    assert main(["doctor", "--json", "--device", "cpu"]) == 0
    doc = json.loads(capsys.readouterr().out)
    finding = next(f for f in doc["findings"] if f["kind"] == "wiring")
    best, serve = finding["evidence"]["best"], finding["evidence"]["named"]["serve"]
    used = finding["evidence"]["accept_samples"]
    assert used == doc["samples"]  # the demo's 8 samples fit the doctor's 4096-token budget
    rc, out, _ = _run(capsys, ["--json", "--limit", str(len(used))])
    train, served = json.loads(out)["wirings"]
    assert best["wiring"] == train["wiring"] and serve["wiring"] == served["wiring"]
    assert best["accept_length"] == pytest.approx(train["accept_length"], abs=1e-4)
    assert serve["accept_length"] == pytest.approx(served["accept_length"], abs=1e-4)
    # the demo's training samples hold no continuation past their stops: lower bounds, as
    # accept says
    assert best["accept_length_is_lower_bound"] is train["accept_length_is_lower_bound"] is True
    assert (
        serve.get("accept_length_is_lower_bound", False) is served["accept_length_is_lower_bound"]
    )

    def shown(w: dict) -> str:
        return (">=" if w.get("accept_length_is_lower_bound") else "") + f"{w['accept_length']:.2f}"

    assert (
        f"logs accept len {shown(serve)} instead of {shown(best)} at 3 steps, greedy"
        in finding["summary"]
    )


def test_doctor_replays_the_first_samples_up_to_its_token_budget(
    tiny_synthetic, capsys, monkeypatch
):
    import inspector.doctor.checks.accept_lengths as accept_lengths

    monkeypatch.setattr(accept_lengths, "ACCEPT_TOKENS", 50)  # 40-token samples: the first two
    draft, samples = tiny_synthetic
    assert main(["doctor", str(draft), str(samples), "--json", "--device", "cpu"]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    finding = next(f for f in doc["findings"] if f["kind"] == "wiring")
    assert finding["evidence"]["accept_samples"] == [0, 1] and doc["samples"] == [0, 1, 2]
    rc, out, _ = _run(capsys, [draft, samples, "--json", "--limit", "2", "--wiring", "0,1,2"])
    replayed = json.loads(out)["wirings"][0]["accept_length"]
    best = finding["evidence"]["best"]
    if best["wiring"] == [0, 1, 2]:
        assert best["accept_length"] == pytest.approx(replayed, abs=1e-4)


def _table_rows(out: str) -> dict[str, list[str]]:
    """wiring name -> its cells, from a rich table's body rows."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            rows[cells[0]] = cells
    return rows


@pytest.mark.parametrize(
    "extra", [[], ["--topk", "2", "--draft-tokens", "5"]], ids=["chain", "tree"]
)
def test_accept_tables_numbers_are_the_jsons(tiny_synthetic, capsys, extra):
    """Every number of the table against the JSON, per wiring (a swapped or mislabelled column
    fails here)."""
    draft, samples = tiny_synthetic
    _, out, _ = _run(capsys, [draft, samples, "--steps", "3", *extra])
    rc, js, _ = _run(capsys, [draft, samples, "--steps", "3", "--json", *extra])
    assert rc == 0
    doc = json.loads(js)
    rows = _table_rows(out)
    for w in doc["wirings"]:
        name = w["label"].split(" [")[0]
        cells = rows[name]
        al = f"{w['accept_length']:.2f}"
        assert cells[2] == (">=" + al if w["accept_length_is_lower_bound"] else al)
        assert cells[3:6] == [f"{100 * x:.1f}%" for x in w["per_depth"]]
        assert cells[6:9] == [
            f"{w['rounds']:,}",
            f"{w['accepted']:,}",
            f"{w['emitted_per_round']:.2f}",
        ]


SWEEP = ["--sweep", "--sweep-steps", "1,2,3", "--sweep-topk", "1,2", "--sweep-tokens", "3,5"]


def test_accept_sweep_json_equals_single_runs_and_ranks(tiny_synthetic, capsys):
    draft, samples = tiny_synthetic
    rc, out, err = _run(capsys, [draft, samples, *SWEEP, "--json"])
    assert rc == 0
    doc = json.loads(out)
    assert doc["config"]["mode"] == "sweep"
    assert doc["config"]["cost"] == {"draft": 0.05, "verify": 1.0, "per_token": 0.0}
    assert "speedup = accept_length / round cost" in doc["cost_model"]
    # chains 1-3, topk 2: steps 1 (N 3), steps 2-3 (N 3, 5); under train and serve
    settings = {
        (s["setting"]["steps"], s["setting"]["topk"], s["setting"]["draft_tokens"])
        for s in doc["settings"]
    }
    assert settings == {
        (1, 1, 2),
        (2, 1, 3),
        (3, 1, 4),
        (1, 2, 3),
        (2, 2, 3),
        (2, 2, 5),
        (3, 2, 3),
        (3, 2, 5),
    }
    assert len(doc["settings"]) == 16 and doc["skipped_settings"] == [
        "steps 1 topk 2 draft tokens 5"
    ]
    for label, best in doc["recommendation"].items():
        mine = [s for s in doc["settings"] if s["label"] == label]
        top = min(mine, key=lambda s: s["rank_speedup"])
        assert best["flags"] == top["flags"] and best["speedup"] == max(s["speedup"] for s in mine)
    # each setting's figures are the ones `accept` gives for it alone
    for steps, topk, n in [(3, 1, 4), (2, 2, 5), (3, 2, 3)]:
        argv = [draft, samples, "--json", "--steps", steps, "--topk", topk]
        _, single, _ = _run(capsys, argv + (["--draft-tokens", n] if topk > 1 else []))
        for w in json.loads(single)["wirings"]:
            row = next(
                s
                for s in doc["settings"]
                if s["label"] == w["label"]
                and (s["setting"]["steps"], s["setting"]["topk"], s["setting"]["draft_tokens"])
                == (steps, topk, n)
            )
            assert (row["rounds"], row["accepted"]) == (w["rounds"], w["accepted"])
            assert row["accept_length"] == w["accept_length"]
            assert row["engine"] == ("vllm" if topk == 1 else "sglang")
            assert [p["accepted"] for p in row["per_sample"]] == [
                sum(p["accepted"]) for p in w["per_sample"]
            ]
            cost = 0.05 * steps + 1.0
            assert row["round_cost"] == pytest.approx(cost)
            assert row["speedup"] == pytest.approx(w["accept_length"] / cost)


def test_accept_sweep_table_states_the_cost_model_and_recommends_flags(tiny_synthetic, capsys):
    draft, samples = tiny_synthetic
    rc, out, err = _run(capsys, [draft, samples, *SWEEP, "--cost", "draft=0.1,per_token=0.01"])
    assert rc == 0
    assert "speedup" in out and "accept len" in out
    assert "steps x 0.1 (draft forward) + 1 (verify) + 0.01 x (draft tokens - 1)" in out
    assert "recommended for train: SGLang --speculative-num-steps" in out
    assert "recommended for serve:" in out
    assert "left out 1 combinations" in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--live"], "--live"),
        (["--steps", "3"], "--sweep-steps"),
        (["--cost", "draft=fast"], "--cost"),
        (["--cost", "speed=1"], "--cost"),
        (["--sweep-topk", "4", "--sweep-steps", "1", "--sweep-tokens", "16"], "no valid setting"),
        (["--engine", "vllm", "--sweep-topk", "4"], "no valid setting"),
    ],
)
def test_accept_sweep_refuses_what_it_cannot_run_in_one_line(
    tiny_synthetic, capsys, flags, message
):
    draft, samples = tiny_synthetic
    rc, out, err = _run(capsys, [draft, samples, "--sweep", *flags])
    assert rc == 2 and out == "" and message in err and len(error_lines(err)) == 1


def test_accept_sweep_lists_are_positive_integers(capsys):
    with pytest.raises(SystemExit):
        main(["accept", "--sweep", "--sweep-steps", "1,0"])
    assert "comma-separated integers" in capsys.readouterr().err


def test_the_sweep_refuses_a_temperature(capsys):
    rc = main(["accept", "--sweep", "--temperature", "0.6"])
    assert rc == 2 and "not with --sweep" in capsys.readouterr().err


def test_sglang_without_its_overlap_scheduler_drops_the_round_after_each_stop(demo, capsys):
    """--sglang-overlap off (SGLang on CPU): every request's round after its stop is neither run
    nor counted; the other rounds are the same, so the counts differ by exactly those rounds."""
    held = demo.draft.parent / "samples" / "held"
    base = [demo.draft, held, "--json", "--engine", "sglang", "--limit", "6"]
    rc, on, _ = _run(capsys, base)
    assert rc == 0
    rc, off, _ = _run(capsys, [*base, "--sglang-overlap", "off"])
    assert rc == 0
    on, off = json.loads(on), json.loads(off)
    assert on["config"]["overlap_scheduler"] is True
    assert off["config"]["overlap_scheduler"] is False
    for a, b in zip(on["wirings"], off["wirings"], strict=True):
        assert a["rounds_after_stop"] > 0 and b["rounds_after_stop"] == 0
        assert b["rounds"] == a["rounds"] - a["rounds_after_stop"]
        for sa, sb in zip(a["per_sample"], b["per_sample"], strict=True):
            n = sa.get("rounds_after_stop", 0)
            assert sb["accepted"] == sa["accepted"][: len(sa["accepted"]) - n]
        assert b["accepted"] == sum(sum(s["accepted"]) for s in b["per_sample"])
