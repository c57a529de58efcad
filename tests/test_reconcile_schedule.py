"""reconcile under the engine's own schedule: a live run with llama.cpp's early stop (p-min)
written out as vLLM's detailed per-request JSON lines (per_step_accepted, per_step_drafted),
reconciled with the same requests captured by `capture --generate`: count for count under the
schedule, unequal at a fixed K without it, a bound with --adaptive; and synthetic acceptance named
from the command line."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from support import capture_generated, reconcile_json  # noqa: E402

from inspector.cli import main  # noqa: E402

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"
P_MIN = 0.5  # on the demo: rounds drafting 0, 1, 2 and 3 tokens


def _json(argv: list[str]) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    return capture_generated(tmp_path_factory.mktemp("gen") / "gen", 40)


@pytest.fixture(scope="module")
def early_stop_log(tmp_path_factory) -> tuple[Path, dict]:
    """The demo's live loop under --p-min, as vLLM's detailed per-request JSON lines (a round
    that drafted nothing kept as a 0, which vLLM itself would leave out), and the loop's report."""
    import torch

    tmp = tmp_path_factory.mktemp("live")
    argv = ["accept", "--live", str(DEMO / "draft"), "--target", str(DEMO / "target")]
    argv += ["--prompts", str(DEMO / "prompts.jsonl"), "--max-new", "40", "--dtype", "float32"]
    argv += ["--device", "cpu", "--json", "--wiring", "train", "--p-min", str(P_MIN)]
    doc = _json([*argv, "--out", str(tmp / "live")])
    assert doc["config"]["p_min"] == P_MIN
    rows = []
    for s in doc["wirings"][0]["per_sample"]:
        d = torch.load(s["path"], weights_only=True)
        ids, mask = d["input_ids"].tolist(), d["loss_mask"].tolist()
        p = mask.index(1)
        rows.append(
            {
                "prompt_token_ids": ids[:p],
                "output_token_ids": ids[p:],
                "spec_decode_metrics": {
                    "num_spec_tokens": 3,
                    "per_step_accepted": s["accepted"],
                    "per_step_drafted": s["drafted"],
                },
            }
        )
    log = tmp / "requests.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return log, doc


def test_the_live_loop_stops_drafting_where_the_draft_is_unsure(early_stop_log):
    _, doc = early_stop_log
    w = doc["wirings"][0]
    drafted = [d for s in w["per_sample"] for d in s["drafted"]]
    assert set(drafted) == {0, 1, 2, 3}  # every length, and rounds without a draft
    # its own counts leave the rounds without a draft out, as vLLM and llama.cpp count
    pairs = [zip(s["accepted"], s["drafted"], strict=True) for s in w["per_sample"]]
    counted = [a for p in pairs for a, d in p if d]
    assert w["rounds"] == len(counted) and w["accepted"] == sum(counted)
    assert w["rounds_without_draft"] == drafted.count(0)
    assert all(
        a <= d for s in w["per_sample"] for a, d in zip(s["accepted"], s["drafted"], strict=True)
    )


def test_a_logged_schedule_is_replayed_count_for_count(capsys, generated, early_stop_log):
    log, doc = early_stop_log
    live = doc["wirings"][0]
    r = reconcile_json(capsys, generated, log)
    assert r["verdict"] == "as_is", r["summary"]
    assert r["scheduled_requests"] == 8 and r["requests_matched"] == 8
    assert not r["replay_is_upper_bound"]
    conf = r["wirings"][0]
    assert conf["label"].startswith("configured") and conf["equal"]
    assert conf["requests_equal"] == 8  # every request, round for round
    assert (conf["rounds"], conf["accepted"]) == (live["rounds"], live["accepted"])
    assert (r["engine_log"]["rounds"], r["engine_log"]["accepted"]) == (
        live["rounds"],
        live["accepted"],
    )
    assert "exactly what this draft gives fed [embed, L2, L4]" in r["summary"]


def test_without_the_schedule_a_fixed_k_replay_is_no_equal_and_adaptive_a_bound(
    capsys, generated, early_stop_log, tmp_path
):
    log, _ = early_stop_log
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    for row in rows:
        del row["spec_decode_metrics"]["per_step_drafted"]
    plain = tmp_path / "plain.jsonl"
    plain.write_text("\n".join(json.dumps(x) for x in rows) + "\n")
    r = reconcile_json(capsys, generated, plain)
    assert r["verdict"] == "other_data", r["summary"]
    assert r["scheduled_requests"] == 0
    assert not any(w["equal"] for w in r["wirings"])
    assert all(w["requests_equal"] == 0 for w in r["wirings"])
    fixed = r["wirings"][0]["accept_length"]
    assert r["engine_log"]["accept_length"] < fixed  # the rounds without a draft count as 0 here
    b = reconcile_json(capsys, generated, plain, "--adaptive")
    assert b["verdict"] == "as_is" and b["replay_is_upper_bound"] is True
    assert b["adaptive"] == "--adaptive" and b["wirings"][0]["equal"]
    assert "an upper bound of what the engine drafts and accepts" in b["summary"]
    assert "at most what this draft gives fed [embed, L2, L4]" in b["summary"]


def test_synthetic_rates_from_the_command_line(capsys, generated, tmp_path):
    # 1 + 0.9 + 0.7 + 0.5 = 3.1, above what this draft gives: never blamed on it
    line = (
        "INFO 12-01 16:29:19 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
        "3.10, Accepted throughput: 54.57 tokens/s, Drafted throughput: 154.05 tokens/s, "
        "Accepted: 1056 tokens, Drafted: 1500 tokens, Per-position acceptance rate: 0.904, "
        "0.698, 0.510, Avg Draft acceptance rate: 70.4%"
    )
    log = tmp_path / "vllm.log"
    log.write_text(line + "\n")
    capsys.readouterr()
    argv = ["reconcile", str(DEMO / "draft"), str(generated), "--engine-log", str(log)]
    argv += ["--device", "cpu", "--synthetic-rates", "0.9,0.7,0.5"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "synthetic" in out and "says nothing about the draft" in out
    assert "SGLANG" not in out and "rejection_sample_method" in out
