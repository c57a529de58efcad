"""Whom a bad log blames (`doctor.reconcile.blame`): logs written in the engines' own formats from
our own replay of the demo's held-out samples (`accept --json`), with a fault planted on the
engine's side, are named as that side's, with the point or the slot:

- a gate: vLLM's per-request `per_step_accepted` (and llama-server's slot lines) where from one
  round of one request on every round accepts 0 (TensorRT-LLM's SpeculationGate turning
  speculation off for good);
- a departing slot: llama-server's slot lines ("slot print_timing: id %2d | task %d | draft
  acceptance = ...", tools/server/server-context.cpp 646-650 under SLT_INF's prefix) for 8
  requests alternating slots 0 and 1, slot 1's zeroed (llama.cpp -np 2, issue #27572).

The honest logs (no plant) and a log that accepts nothing but in one request get neither."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")

from inspector.cli import main  # noqa: E402
from inspector.commands.exit_codes import for_verdict  # noqa: E402
from inspector.demo_paths import default_demo_root  # noqa: E402
from inspector.formats.engine_log import read_engine_log  # noqa: E402

DEMO = default_demo_root()
K = 3
START = "0.00.000.961 I srv  llama_server: initializing ..."
SLOT = "0.00.470.858 I slot print_timing: id {slot:2d} | task {task} | "


def _json(argv: list[str]) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> Path:
    """Eight of the demo's held-out samples: the requests."""
    out = tmp_path_factory.mktemp("blame") / "samples"
    out.mkdir()
    held = DEMO / "samples" / "held"
    for i in range(8):
        shutil.copy(held / f"data_{i}.pt", out / f"data_{i}.pt")
    return out


def _replay(samples: Path, engine: str) -> list[dict]:
    """The configured wiring's rounds per sample, as `engine` schedules them."""
    argv = ["accept", str(DEMO / "draft"), str(samples), "--engine", engine, "--steps", str(K)]
    argv += ["--wiring", "train"]
    doc = _json([*argv, "--json", "--device", "cpu"])
    return doc["wirings"][0]["per_sample"]


@pytest.fixture(scope="module")
def vllm_rounds(samples) -> list[list[int]]:
    return [list(s["accepted"]) for s in _replay(samples, "vllm")]


@pytest.fixture(scope="module")
def llama_rounds(samples) -> list[tuple[list[int], list[int]]]:
    """(accepted, drafted) per round of each sample under llama-server's schedule, the rounds
    it counts (a round with no room to draft is a plain decode)."""
    out = []
    for s in _replay(samples, "llamacpp"):
        rounds = zip(s["accepted"], s.get("drafted", [K] * len(s["accepted"])), strict=True)
        kept = [(a, d) for a, d in rounds if d]
        out.append(([a for a, _ in kept], [d for _, d in kept]))
    return out


def _reconcile(capsys, samples: Path, log: Path) -> dict:
    capsys.readouterr()
    argv = ["reconcile", str(DEMO / "draft"), str(samples), "--engine-log", str(log)]
    rc = main([*argv, "--steps", str(K), "--json", "--device", "cpu"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == for_verdict(doc["verdict"])
    return doc


def _vllm_requests(path: Path, rounds: list[list[int]]) -> Path:
    rows = [{"spec_decode_metrics": {"per_step_accepted": r}} for r in rounds]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _slot_lines(slot: int, task: int, accepted: list[int], drafted: list[int]) -> list[str]:
    """One request's slot lines, as llama-server prints them (mean len, then acc per pos)."""
    acc, gen, n = sum(accepted), sum(drafted), len(accepted)
    per_pos = [sum(1 for a in accepted if a > i) for i in range(K)]
    head = SLOT.format(slot=slot, task=task)
    return [
        head + f"draft acceptance = {acc / gen:0.5f} ({acc:5d} accepted / {gen:5d} generated), "
        f"mean len = {1 + acc / n:5.2f}",
        head + "     acc per pos = (" + ", ".join(f"{c / n:.3f}" for c in per_pos) + ")",
    ]


def _llama_log(path: Path, rounds, zeroed) -> Path:
    """Eight requests on slots 0/1 alternately (task ids in arrival order), each pair's lines
    written in the order they finished (slot 1's first); `zeroed(i)`: request i accepted
    nothing (each round then emits one token: as many rounds as tokens, k drafted each)."""
    per: list[list[str]] = []
    for i, (acc, drafted) in enumerate(rounds):
        if zeroed(i):
            n = sum(acc) + len(acc)  # the tokens the replay's rounds emit
            acc, drafted = [0] * n, [K] * n
        per.append(_slot_lines(i % 2, i + 1, acc, drafted))
    lines = [START]
    for i in range(0, len(per), 2):
        lines += per[i + 1] + per[i]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_slot_lines_carry_their_slot_in_arrival_order(tmp_path, llama_rounds):
    log = read_engine_log(_llama_log(tmp_path / "server.log", llama_rounds, lambda i: False))
    reqs = log.slot_requests
    assert [r.slot for r in reqs] == [0, 1] * 4 and [r.task for r in reqs] == list(range(1, 9))
    assert [r.accepted for r in reqs] == [sum(a) for a, _ in llama_rounds]
    assert [r.rounds for r in reqs] == [len(a) for a, _ in llama_rounds]


def test_an_honest_log_blames_neither(capsys, tmp_path, samples, vllm_rounds, llama_rounds):
    r = _reconcile(capsys, samples, _vllm_requests(tmp_path / "req.jsonl", vllm_rounds))
    assert r["verdict"] == "as_is" and r["blame"] is None, r["summary"]
    log = _llama_log(tmp_path / "server.log", llama_rounds, lambda i: False)
    r = _reconcile(capsys, samples, log)
    assert r["verdict"] == "as_is" and r["blame"] is None, r["summary"]


def test_a_gate_that_switched_speculation_off_is_the_engines(
    capsys, tmp_path, samples, vllm_rounds
):
    # from request 3, round x on (a round after one the replay accepts in), nothing accepted
    j = 3
    x = next(k for k in range(4, len(vllm_rounds[j])) if vllm_rounds[j][k - 1] > 0)
    planted = [list(r) for r in vllm_rounds]
    planted[j][x:] = [0] * (len(planted[j]) - x)
    for i in range(j + 1, len(planted)):
        planted[i] = [0] * len(planted[i])
    f = _vllm_requests(tmp_path / "gated.jsonl", planted)
    r = _reconcile(capsys, samples, f)
    assert r["verdict"] == "engine_gate", r["summary"]
    blame = r["blame"]
    assert (blame["side"], blame["kind"], blame["slot"]) == ("engine", "gate", None)
    gate = blame["gate"]
    assert (gate["request"], gate["sample"], gate["round"]) == (f"{f.name}:{j + 1}", j, x)
    after = vllm_rounds[j][x:] + [a for r in vllm_rounds[j + 1 :] for a in r]
    assert gate["engine_accepted_after"] == 0 and gate["engine_accept_length_after"] == 1.0
    assert gate["replay_accepted_after"] == sum(after) > 0
    assert gate["replay_rounds_after"] == len(after)
    assert gate["requests_after"] == len(vllm_rounds) - j
    # before the switch the engine accepted what the replay does
    assert gate["engine_accept_length_before"] == pytest.approx(gate["replay_accept_length_before"])
    assert (
        f"from round {x} at position {gate['position']} of request {f.name}:{j + 1}"
        in (r["summary"])
    )
    assert "switched off part-way on the engine's side" in r["summary"]
    assert len(r["engine_fault_classes"]) == 1 and "gate" in r["engine_fault_classes"][0]


def test_a_gate_in_llama_servers_slot_lines(capsys, tmp_path, samples, llama_rounds):
    """The last four requests (both slots) accepted nothing: a gate at the first of their lines
    in the log's (completion) order, request 5's."""
    log = _llama_log(tmp_path / "gated.log", llama_rounds, lambda i: i >= 4)
    r = _reconcile(capsys, samples, log)
    assert r["verdict"] == "engine_gate", r["summary"]
    gate = r["blame"]["gate"]
    assert (gate["sample"], gate["round"], gate["requests_after"]) == (5, None, 4)
    assert gate["request"] == f"{log.name}:{1 + 2 * 4 + 1}"  # after the start and 4 lines
    assert gate["replay_accepted_after"] == sum(sum(a) for a, _ in llama_rounds[4:])
    assert gate["engine_rounds_after"] > 0 and gate["engine_accepted_after"] == 0
    assert r["blame"]["paired_by"] == "llama-server's task order"


def test_one_slot_departing_is_named(capsys, tmp_path, samples, llama_rounds):
    log = _llama_log(tmp_path / "slots.log", llama_rounds, lambda i: i % 2 == 1)
    r = _reconcile(capsys, samples, log)
    assert r["verdict"] == "engine_slot", r["summary"]
    blame = r["blame"]
    assert (blame["side"], blame["kind"], blame["slot"], blame["gate"]) == (
        "engine",
        "slot",
        1,
        None,
    )
    s0, s1 = blame["slots"]
    odd = [sum(a) for a, _ in llama_rounds[1::2]]
    even = [sum(a) for a, _ in llama_rounds[0::2]]
    assert (s1["slot"], s1["requests"], s1["engine_accepted"]) == (1, 4, 0)
    assert s1["replay_accepted"] == sum(odd) > 0 and s1["departs"] and not s1["equal"]
    assert s1["engine_accept_length"] == 1.0
    assert (s0["engine_accepted"], s0["replay_accepted"]) == (sum(even), sum(even))
    assert s0["equal"] and not s0["departs"]
    assert s0["engine_accept_length"] == pytest.approx(s0["replay_accept_length"])
    assert f"slot 1: 0 of {s1['engine_drafted']} drafted tokens accepted" in r["summary"]
    assert f"where the replay of those requests accepts {sum(odd)}" in r["summary"]
    assert "slot 0 equals the replay" in r["summary"]
    assert "slot" in r["engine_fault_classes"][0]


def test_a_log_short_everywhere_but_one_request_is_no_gate(capsys, tmp_path, samples, vllm_rounds):
    planted = [r if i == 3 else [0] * len(r) for i, r in enumerate(vllm_rounds)]
    r = _reconcile(capsys, samples, _vllm_requests(tmp_path / "short.jsonl", planted))
    assert r["verdict"] == "engine_fault" and r["blame"] is None, r["summary"]


def _sglang_windows(path: Path, values: list[str], interval: int = 40) -> Path:
    """SGLang's start-up line (its decode_log_interval) and one decode line per window, a GPU
    run (cuda graph), one request running."""
    lines = [f"[2026-12-01 16:29:50] server_args={{'decode_log_interval': {interval}}}"]
    lines += [
        f"[2026-12-01 16:30:{i:02d}] Decode batch, #running-req: 1, #token: 900, token usage: "
        f"0.01, accept len: {v}, accept rate: 0.30, cuda graph: True, gen throughput "
        "(token/s): 300.10, #queue-req: 0"
        for i, v in enumerate(values)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """The demo target's continuations of its 8 prompts (128 tokens, past each stop too): no
    replayed round is a lower bound, so a pooled figure above a wiring's is not that wiring's."""
    pytest.importorskip("transformers")
    from support import capture_generated

    return capture_generated(tmp_path_factory.mktemp("gen") / "gen", 128)


def test_a_gate_in_sglangs_windowed_lines(capsys, tmp_path, generated):
    """Four windows at the replay's figure, then three at accept len 1.00: a gate at the first
    1.00 line; the same lines with the replay's figure throughout blame nothing, and lines short
    of the replay before the 1.00s are no gate (the engine never matched the draft)."""
    probe = _reconcile(capsys, generated, _sglang_windows(tmp_path / "probe.log", ["1.50"]))
    al = next(w for w in probe["wirings"] if w["label"] == probe["best"])["accept_length"]
    assert al > 1.5
    text = f"{al:.2f}"
    log = _sglang_windows(tmp_path / "gated.log", [text] * 4 + ["1.00"] * 3)
    r = _reconcile(capsys, generated, log)
    assert r["verdict"] == "engine_gate", r["summary"]
    gate = r["blame"]["gate"]
    assert gate["request"] == f"{log.name}:6" and gate["windows_after"] == 3
    assert gate["sample"] is None and r["blame"]["paired_by"] == "windows"
    assert gate["replay_rounds_after"] == 3 * 40  # #running-req 1 x decode_log_interval 40
    assert gate["replay_accepted_after"] == round((al - 1) * 120)
    assert gate["engine_accept_length_before"] == pytest.approx(float(text), abs=1e-12)
    assert abs(float(text) - al) <= 0.005 + 1e-12  # the line prints the replay's figure
    assert "printed accept len 1.00 in every line (3 lines" in r["summary"]
    honest = _reconcile(capsys, generated, _sglang_windows(tmp_path / "ok.log", [text] * 7))
    assert honest["blame"] is None, honest["summary"]
    low = f"{(al - 1) / 2 + 1:.2f}"  # half the replay's accepted tokens before the 1.00s
    short = _reconcile(
        capsys, generated, _sglang_windows(tmp_path / "low.log", [low] * 4 + ["1.00"] * 3)
    )
    assert short["blame"] is None and short["verdict"] != "engine_gate", short["summary"]
