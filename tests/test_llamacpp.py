"""llama.cpp as an engine convention: `llama-server`'s schedule (each round drafts min(k, remaining -
1), a round with no room a plain decode, not counted) replayed over the demo's generated requests
against the figures measured running llama.cpp@0c1e57098 (the llama-cpp-python 0.3.36 sdist's
vendored copy) on them, and its outputs read by `reconcile`.

The lines are written with llama.cpp's own format strings:
- slot line: tools/server/server-context.cpp 646-650 ("draft acceptance = %0.5f (%5d accepted /
  %5d generated), mean len = %5.2f" and the trace line "     acc per pos = (%s)", each "%.3f",
  642), prefixed by SLT_INF's "slot %12.*s: id %2d | task %d | " (tools/server/server-common.h 28);
  the later one-line form of PR #24536 ("..., mean acceptance length = ..., acceptance rate per
  position = (...)") too;
- statistics line: common/speculative.cpp 2962-2975 ("statistics %16s: #calls(b,g,a) = %4zu %6zu
  %6zu, #gen drafts = %6zu, #acc drafts = %5zu, #gen tokens = %6zu, #acc tokens = %5zu" + ",
  #mean acc len = %.2f, #acc rate/pos = (%.3f, ...)");
- /metrics: tools/server/server-task.cpp 1554-1615 (HELP / TYPE / value per counter, the
  per-position counter labelled position="i");
- per-request JSON: tools/server/server-common.cpp 99-102 (`timings.draft_n`,
  `timings.draft_n_accepted`).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from inspector.errors import InputError
from inspector.formats.engine_log import read_engine_log

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"
SLOT = "slot print_timing: id {slot:2d} | task {task} | "
# the figures llama-server's /metrics gave on the demo (k: drafts, accepted, per position)
SERVER = {1: (658, 350, None), 3: (491, 521, [263, 164, 94]), 5: (476, 535, None)}


def slot_lines(acc: int, gen: int, steps: int, per_pos: list[int], *, one_line: bool = False):
    mean = 1.0 + acc / steps
    rates = ", ".join(f"{c / steps:.3f}" for c in per_pos)
    head = (
        SLOT.format(slot=0, task=3)
        + f"draft acceptance = {acc / gen:0.5f} ({acc:5d} accepted / {gen:5d} generated)"
    )
    if one_line:
        return [
            head
            + f", mean acceptance length = {mean:.2f}, acceptance rate per position = ({rates})"
        ]
    return [
        head + f", mean len = {mean:5.2f}",
        SLOT.format(slot=0, task=3) + f"     acc per pos = ({rates})",
    ]


def stats_line(drafts: int, acc_drafts: int, gen: int, acc: int, per_pos: list[int]) -> str:
    rates = ", ".join(f"{c / drafts:.3f}" for c in per_pos)
    return (
        f"statistics {'draft-eagle3':>16s}: #calls(b,g,a) = {1:4d} {drafts:6d} {drafts:6d}, "
        f"#gen drafts = {drafts:6d}, #acc drafts = {acc_drafts:5d}, #gen tokens = {gen:6d}, "
        f"#acc tokens = {acc:5d}, #mean acc len = {1 + acc / drafts:.2f}, #acc rate/pos = ({rates})"
    )


def metrics_text(drafts: int, acc: int, tokens: int, per_pos: list[int] | None) -> str:
    out = []
    for name, desc, v in (
        ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", tokens),
        (
            "spec_decode_num_accepted_tokens_total",
            "Speculative: Total draft tokens accepted by the target model",
            acc,
        ),
        (
            "spec_decode_num_drafts_total",
            "Speculative: Total speculative decoding verification steps",
            drafts,
        ),
    ):
        out += [
            f"# HELP llamacpp:{name} {desc}",
            f"# TYPE llamacpp:{name} counter",
            f"llamacpp:{name} {v}",
        ]
    if per_pos:
        name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
        out += [f"# HELP {name} Accepted tokens per draft position", f"# TYPE {name} counter"]
        out += [f'{name}{{position="{i}"}} {c}' for i, c in enumerate(per_pos)]
    return "\n".join(out) + "\n"


def test_slot_lines_give_the_rounds_their_mean_and_rates_pin(tmp_path):
    p = tmp_path / "server.log"
    # the field's example: 167 accepted of 259 in 87 rounds, per position 70, 55, 42
    lines = slot_lines(167, 259, 87, [70, 55, 42]) + ["srv  update_slots: all slots are idle"]
    lines += slot_lines(167, 259, 87, [70, 55, 42], one_line=True)
    p.write_text("\n".join(lines) + "\n")
    log = read_engine_log(p)
    assert (log.engine, log.source, log.lines) == ("llamacpp", "log", 2)
    assert (log.rounds, log.accepted, log.drafted_tokens) == (174, 334, 518)
    assert log.accepted_per_pos == [140, 110, 84] and log.steps == 3 and not log.rounded
    assert log.accept_length == pytest.approx(1 + 167 / 87)
    assert log.description.startswith("llama.cpp 2 log lines")


def test_statistics_lines_are_cumulative_and_exact(tmp_path):
    p = tmp_path / "server.log"
    # printed after every request, cumulative over the server's life; a restart starts again
    lines = [stats_line(40, 30, 120, 70, [30, 25, 15]), stats_line(87, 70, 259, 167, [70, 55, 42])]
    lines += slot_lines(167, 259, 87, [70, 55, 42])
    lines += [stats_line(10, 5, 30, 6, [5, 1, 0])]
    p.write_text("\n".join(lines) + "\n")
    log = read_engine_log(p)
    assert (log.engine, log.rounds, log.accepted, log.drafted_tokens) == ("llamacpp", 97, 173, 289)
    assert not log.rounded


def test_the_logs_of_servers_one_after_another_are_summed(tmp_path):
    """A fresh server per request, their logs concatenated: each server's statistics start
    again at its start-up line, even where its counts exceed the previous server's."""
    p = tmp_path / "server.log"
    start = "0.00.003.631 I srv  llama_server: initializing ..."
    lines = [start, stats_line(40, 30, 120, 70, [30, 25, 15])]
    lines += [start, stats_line(50, 35, 150, 80, [35, 25, 20])]
    lines += ["0.00.037.284 I srv  llama_server: listening on http://127.0.0.1:8080"]
    lines += [stats_line(10, 5, 30, 6, [5, 1, 0]), stats_line(20, 9, 60, 12, [9, 2, 1])]
    p.write_text("\n".join(lines) + "\n")
    log = read_engine_log(p)
    assert (log.rounds, log.accepted, log.drafted_tokens) == (110, 162, 330)


def test_metrics_text_and_request_timings(tmp_path):
    p = tmp_path / "metrics.txt"
    p.write_text(metrics_text(491, 521, 1473, [263, 164, 94]))
    log = read_engine_log(p)
    assert (log.engine, log.source, log.rounds, log.accepted, log.drafted_tokens) == (
        "llamacpp",
        "prometheus",
        491,
        521,
        1473,
    )
    assert log.accepted_per_pos == [263, 164, 94] and log.steps == 3
    q = tmp_path / "requests.jsonl"
    rows = [
        {
            "content": "x",
            "tokens": [5, 6],
            "prompt_token_ids": [1, 2],
            "timings": {"predicted_n": 2, "draft_n": 9, "draft_n_accepted": 4},
        },
        {"content": "y", "timings": {"draft_n": 3, "draft_n_accepted": 1}},
    ]
    q.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    log = read_engine_log(q)
    assert (log.engine, log.source, log.accepted, log.drafted_tokens) == (
        "llamacpp",
        "requests",
        5,
        12,
    )
    assert log.requests[0].output_ids == [5, 6] and log.requests[0].prompt_ids == [1, 2]
    assert log.accept_length is None  # the timings give no rounds


@pytest.mark.parametrize(
    "text,where",
    [
        (
            "slot print_timing: id  0 | task 3 | draft acceptance = 0.64479 (167 accepted / 259",
            "line 2",
        ),
        (
            "statistics draft-eagle3: #calls(b,g,a) = 1 87 87, #gen drafts = 87, #acc drafts",
            "line 2",
        ),
        ("slot print_timing: id  0 | task 3 |      acc per pos = (0.805, 0.6x2)", "line 2"),
        ("llamacpp:spec_decode_num_drafts_total abc", "line 2"),
    ],
)
def test_malformed_lines_name_the_file_and_line(tmp_path, text, where):
    p = tmp_path / "bad.log"
    first = "slot print_timing: id  0 | task 3 | draft acceptance = 0.5 (1 accepted / 2 generated), mean len =  2.00"
    if text.startswith("llamacpp:"):
        first = "llamacpp:spec_decode_num_accepted_tokens_total 1"
    p.write_text(first + "\n" + text + "\n")
    with pytest.raises(InputError) as e:
        read_engine_log(p)
    assert "bad.log" in str(e.value) and where in str(e.value)


pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    from support import capture_generated

    return capture_generated(tmp_path_factory.mktemp("gen") / "gen", 128)


def _json(argv: list[str]) -> dict:
    from inspector.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


@pytest.mark.parametrize("k", [1, 3, 5])
def test_accept_under_llama_server_counts_what_it_logged(generated, k):
    argv = ["accept", str(DEMO / "draft"), str(generated), "--engine", "llamacpp"]
    doc = _json([*argv, "--steps", str(k), "--wiring", "train", "--json", "--device", "cpu"])
    assert doc["config"]["engine"] == "llamacpp"
    w = doc["wirings"][0]
    drafts, accepted, per_pos = SERVER[k]
    assert (w["rounds"], w["accepted"]) == (drafts, accepted)
    if per_pos is not None:
        assert w["accepted_per_pos"] == per_pos
    # no round drafts past max tokens; the last token of a request is a plain decode
    for s in w["per_sample"]:
        assert all(d <= k for d in s.get("drafted", []))


def test_a_tree_is_refused_under_llamacpp(generated):
    from inspector.cli import main

    argv = ["accept", str(DEMO / "draft"), str(generated), "--engine", "llamacpp", "--topk", "2"]
    assert main([*argv, "--draft-tokens", "6", "--json", "--device", "cpu"]) != 0


def test_reconcile_of_llama_server_metrics(capsys, generated, tmp_path):
    from support import reconcile_json

    log = tmp_path / "metrics.txt"
    log.write_text(metrics_text(491, 521, 1473, [263, 164, 94]))
    r = reconcile_json(capsys, generated, log)
    assert r["verdict"] == "as_is", r["summary"]
    assert "llama.cpp" in r["summary"]


def test_reconcile_of_the_2_4_6_copy_under_llama_cpp(capsys, generated, tmp_path):
    """The copy configured [2, 4, 6]: llama-server logged 881 / 127 (a fresh server per
    request). Id 6 = the layer count feeds nothing on a Llama target: the replay of
    [L2, L4, nothing] (that fc block zeroed) under llama-server's schedule equals it, and the
    verdict names the wrong wiring, the trained one and the fix."""
    import shutil

    from inspector.cli import main

    folder = tmp_path / "deployed"
    shutil.copytree(DEMO / "draft", folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [2, 4, 6]
    (folder / "config.json").write_text(json.dumps(cfg))
    log = tmp_path / "metrics.txt"
    log.write_text(metrics_text(881, 127, 2643, None))
    capsys.readouterr()
    argv = ["reconcile", str(folder), str(generated), "--engine-log", str(log), "--steps", "3"]
    assert main([*argv, "--json", "--device", "cpu"]) == 1  # a problem found
    r = json.loads(capsys.readouterr().out)
    assert r["verdict"] == "wrong_wiring", r["summary"]
    assert "exactly what this draft gives fed [L2, L4, nothing]" in r["summary"]
    assert "trained on [embed, L2, L4]" in r["summary"]
    silent = next(c for c in r["wirings"] if c["label"].endswith("[L2, L4, nothing]"))
    assert (silent["rounds"], silent["accepted"]) == (881, 127)
    plain = next(c for c in r["wirings"] if c["label"].endswith("[L2, L4, L6]"))
    assert plain["accepted"] > 127  # fed L6, the draft does better than llama.cpp lets it


def test_the_live_loop_runs_llama_servers_schedule(tmp_path):
    """`accept --live --engine llamacpp`: each round drafts at most the room left less the
    bonus (llama-server's cap), a request's last token with no room is a plain decode and no
    round: the counts llama-server's /metrics gave (491 rounds, 521 accepted, 1459 drafted
    tokens at k = 3), and the temperature rule is llama.cpp's own."""
    doc = _json(
        [
            "accept",
            str(DEMO / "draft"),
            "--live",
            "--prompts",
            str(DEMO / "prompts.jsonl"),
            "--target",
            str(DEMO / "target"),
            "--engine",
            "llamacpp",
            "--steps",
            "3",
            "--wiring",
            "train",
            "--dtype",
            "float32",
            "--json",
            "--device",
            "cpu",
        ]
    )
    w = doc["wirings"][0]
    assert (w["rounds"], w["accepted"]) == SERVER[3][:2]
    assert w["accepted_per_pos"] == SERVER[3][2]
    drafted = [d for s in w["per_sample"] for d in s.get("drafted", [3] * len(s["accepted"]))]
    assert sum(drafted) == 1459 and max(drafted) == 3 and min(drafted) >= 1


def test_llamacpps_verification_rule_is_its_own():
    from inspector.serving.sampling_settings import VerifyRule, default_rule, parse_rule

    assert default_rule("llamacpp") is VerifyRule.LLAMACPP_TARGET_ONLY
    assert parse_rule(None, "llamacpp") is VerifyRule.LLAMACPP_TARGET_ONLY
    assert not VerifyRule.LLAMACPP_TARGET_ONLY.samples_drafts
    with pytest.raises(InputError, match="not llamacpp's rule"):
        parse_rule("vllm-onehot", "llamacpp")
