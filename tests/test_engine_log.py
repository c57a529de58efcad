"""Reading what an engine logged: every format, pooled as its source pools, one line per fault."""

from __future__ import annotations

import json

import pytest

from inspector.errors import InputError
from inspector.formats.engine_log import read_engine_log

# vLLM's own format string (v1/spec_decode/metrics.py), filled in
VLLM = (
    "INFO 12-01 16:30:02 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: {mean}, "
    "Accepted throughput: 12.50 tokens/s, Drafted throughput: 30.00 tokens/s, Accepted: {acc} "
    "tokens, Drafted: {drafted} tokens, Per-position acceptance rate: {rates}, "
    "Avg Draft acceptance rate: 35.4%"
)


def test_vllm_log_lines_are_pooled_by_their_counts(tmp_path):
    f = tmp_path / "vllm.log"
    f.write_text(
        "INFO starting\n"
        + VLLM.format(mean="2.10", acc=220, drafted=600, rates="0.600, 0.350, 0.150")
        + "\nnoise\n"
        + VLLM.format(mean="2.02", acc=306, drafted=885, rates="0.590, 0.300, 0.147")
        + "\n"
    )
    log = read_engine_log(f)
    assert (log.engine, log.source, log.lines, log.steps) == ("vllm", "log", 2, 3)
    # drafts = drafted tokens / k: 200 + 295
    assert (log.rounds, log.accepted, log.drafted_tokens) == (495, 526, 1485)
    assert log.accept_length == pytest.approx(1 + 526 / 495)
    assert log.accepted_per_pos == [round(0.6 * 200 + 0.59 * 295), 70 + 88, 30 + 43]
    assert not log.rounded


# vLLM's start-up line (v1/engine/core.py), as its 0.32.0 CPU build writes it, shortened
START = (
    "(EngineCore pid=2656) INFO 12-03 07:08:49 [core.py:133] Initializing a V1 LLM engine "
    "(v{version}) with config: model='/m/target', speculative_config=SpeculativeConfig("
    "method='eagle3', model='/m/draft', num_spec_tokens=3), tokenizer='/m/target', "
    "dtype=torch.float32, max_seq_len=512, device_config={device}, seed=0"
)


def test_vllm_start_up_names_the_build_and_its_speculative_config(tmp_path):
    f = tmp_path / "vllm.log"
    line = VLLM.format(mean="1.03", acc=34, drafted=2949, rates="0.028, 0.004, 0.002")
    f.write_text("INFO starting\n" + START.format(version="0.32.0", device="cpu") + "\n" + line)
    log = read_engine_log(f)
    assert log.start is not None
    assert (log.start.version, log.start.device, log.start.method) == ("0.32.0", "cpu", "eagle3")
    assert (log.start.draft, log.start.spec_tokens) == ("/m/draft", 3)
    assert log.start.where == "vllm.log:2" and log.start.label == "vLLM 0.32.0 on cpu"
    assert (log.rounds, log.accepted, log.lines) == (983, 34, 1)
    # a local version suffix is dropped; a config without a speculative part leaves it unknown
    f.write_text(
        START.format(version="0.32.0+cpu", device="cuda").split(", speculative_config")[0]
        + ", device_config=cuda\n"
        + line
    )
    start = read_engine_log(f).start
    assert start is not None and (start.version, start.device) == ("0.32.0", "cuda")
    assert (start.method, start.draft, start.spec_tokens) == (None, None, None)
    # a start-up line of another form is not a fault: no build is known
    f.write_text("Initializing a V1 LLM engine with config: model='x'\n" + line)
    assert read_engine_log(f).start is None and read_engine_log(f).starts == []
    # two builds in one log: which logged the figures is not known
    f.write_text(
        START.format(version="0.32.0", device="cpu")
        + "\n"
        + line
        + "\n"
        + START.format(version="0.32.0", device="cuda")
        + "\n"
        + line
    )
    two = read_engine_log(f)
    assert len(two.starts) == 2 and two.start is None and two.lines == 2


def test_vllm_log_faults_name_the_line(tmp_path):
    f = tmp_path / "cut.log"
    good = VLLM.format(mean="2.10", acc=220, drafted=600, rates="0.600, 0.350, 0.150")
    f.write_text(good + "\n" + good[:90] + "\n")
    with pytest.raises(InputError) as e:
        read_engine_log(f)
    assert e.value.field == "line 2" and "truncated" in e.value.message
    f.write_text(VLLM.format(mean="2.10", acc=220, drafted=601, rates="0.600, 0.350, 0.150"))
    with pytest.raises(InputError, match="not a multiple of 3"):
        read_engine_log(f)
    f.write_text(
        good + "\n" + VLLM.format(mean="2.10", acc=220, drafted=600, rates="0.600, 0.350") + "\n"
    )
    with pytest.raises(InputError, match="2 per-position rates where earlier lines had 3"):
        read_engine_log(f)
    f.write_text("nothing here\n")
    with pytest.raises(InputError, match="no speculative-decoding figures"):
        read_engine_log(f)


def test_prometheus_counters_are_summed_over_label_sets(tmp_path):
    f = tmp_path / "metrics.prom"
    f.write_text(
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.\n"
        "# TYPE vllm:spec_decode_num_drafts_total counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="t"} 300.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="t"} 195.0\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="t"} 1485.0\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="t"} 526.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 300.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 76.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 150.0\n'
        "vllm:num_requests_running 0.0\n"
    )
    log = read_engine_log(f)
    assert (log.source, log.rounds, log.accepted, log.drafted_tokens) == (
        "prometheus",
        495,
        526,
        1485,
    )
    assert log.accepted_per_pos == [300, 150, 76] and log.steps == 3
    assert log.accept_length == pytest.approx(1 + 526 / 495)
    f.write_text('vllm:spec_decode_num_drafts_total{engine="0"} 3.0\n')
    with pytest.raises(InputError) as e:
        read_engine_log(f)
    assert e.value.field == "vllm:spec_decode_num_accepted_tokens"
    assert (log.path, log.engine, log.lines) == (f, "vllm", 7)  # the counters read
    f.write_text(
        "# HELP x\n"
        'vllm:spec_decode_num_drafts_total{engine="0"} 3.0\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} abc\n'
    )
    with pytest.raises(InputError) as e:
        read_engine_log(f)
    assert (e.value.path, e.value.field) == (str(f), "line 3")
    assert e.value.message == "vllm:spec_decode_num_accepted_tokens: value 'abc'"
    f.write_text(
        'vllm:spec_decode_num_drafts_total{engine="0"} 3.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0"} 1.0\n'
    )
    with pytest.raises(InputError) as e:
        read_engine_log(f)
    assert (e.value.field, e.value.message) == (
        "line 2",
        "accepted_tokens_per_pos without position",
    )


def test_per_request_json_lines_of_both_engines(tmp_path):
    f = tmp_path / "requests.jsonl"
    rows = [
        {
            "prompt_token_ids": [1, 2],
            "output_token_ids": [3, 4, 5],
            "spec_decode_metrics": {"per_step_accepted": [2, 0], "per_step_drafted": [3, 3]},
        },
        {"per_step_accepted": [1], "prompt_token_ids": [7], "output_token_ids": [8, 9]},
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    log = read_engine_log(f)
    assert (log.engine, log.source, log.rounds, log.accepted) == ("vllm", "requests", 3, 3)
    assert log.requests[0].per_step_accepted == [2, 0]
    assert log.requests[0].output_ids == [3, 4, 5] and log.requests[1].where.endswith(":2")
    assert log.accept_length == pytest.approx(2.0)
    f.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[0])[:30] + "\n")
    with pytest.raises(InputError) as e:
        read_engine_log(f)
    assert e.value.field == "line 2" and "truncated" in e.value.message
    f.write_text(json.dumps({"spec_decode_metrics": {"per_step_accepted": [1, -1]}}) + "\n")
    with pytest.raises(InputError, match="per_step_accepted: expected a list of non-negative"):
        read_engine_log(f)
    # SGLang's meta_info: rounds are spec_verify_ct, accepted spec_num_correct_drafts
    sg = [
        {"meta_info": {"spec_verify_ct": 4, "completion_tokens": 11, "spec_num_correct_drafts": 7}},
        {"meta_info": {"spec_verify_ct": 2, "completion_tokens": 5, "spec_num_correct_drafts": 2}},
    ]
    f.write_text("\n".join(json.dumps(r) for r in sg))
    log = read_engine_log(f)
    assert (log.engine, log.rounds, log.accepted, log.figure) == ("sglang", 6, 9, "accept_length")
    assert log.accept_length == pytest.approx(1 + 9 / 6)
    # without the count: the figure is spec_accept_length, completion / verify rounds, pooled
    old = [
        {"meta_info": {"spec_verify_ct": 4, "completion_tokens": 11, "spec_accept_length": 2.75}}
    ]
    old.append({"spec_verify_ct": 2, "completion_tokens": 5})
    f.write_text("\n".join(json.dumps(r) for r in old))
    log = read_engine_log(f)
    assert log.figure == "spec_accept_length" and log.accept_length == pytest.approx(16 / 6)
    assert log.requests[0].spec_accept_length == 2.75 and log.requests[1].accepted == 3
    f.write_text(json.dumps(sg[0]) + "\n" + json.dumps(old[1]) + "\n")
    with pytest.raises(InputError, match="some requests count their correct drafts, some do not"):
        read_engine_log(f)
    f.write_text(json.dumps({"meta_info": {"completion_tokens": 3}}))
    with pytest.raises(InputError, match="meta_info without spec_verify_ct"):
        read_engine_log(f)
    f.write_text(json.dumps(rows[0]) + "\n" + json.dumps(sg[0]) + "\n")  # vLLM, then SGLang
    with pytest.raises(InputError, match="mixes vLLM and SGLang"):
        read_engine_log(f)


def test_sglang_log_lines_and_server_info(tmp_path):
    f = tmp_path / "sglang.log"
    line = (
        "[2026-12-01 16:30:02] Decode batch, #running-req: 8, #token: 900, token usage: 0.01, "
        "accept len: {v}, accept rate: 0.44, cuda graph: True, gen throughput (token/s): 300.1, "
        "#queue-req: 0"
    )
    f.write_text(line.format(v="2.31") + "\n" + line.format(v="2.11") + "\n")
    log = read_engine_log(f)
    assert (log.engine, log.source, log.lines, log.rounded) == ("sglang", "log", 2, True)
    assert log.accept_length == pytest.approx(2.21) and log.rounds is None
    f.write_text(line.format(v="nan"))
    with pytest.raises(InputError, match="without a number"):
        read_engine_log(f)
    f.write_text(json.dumps({"internal_states": [{"avg_spec_accept_length": 2.5}]}))
    log = read_engine_log(f)
    assert (log.source, log.accept_length) == ("server-info", 2.5)
    f.write_text(json.dumps({"internal_states": [{"last_gen_throughput": 1.0}]}))
    with pytest.raises(InputError, match="no avg_spec_accept_length"):
        read_engine_log(f)


# SGLang 0.5.23's decode line (srt/managers/scheduler_components/metrics_reporter.py 963, 1005,
# 1039-1043 on a CPU device: "cpu graph") and prefill line (753-782), with its logger's
# "[%(asctime)s] " prefix (srt/utils/common.py 2630)
SGL_DECODE = (
    "[2026-12-01 16:30:{s:02d}] Decode batch, #running-req: {bs}, #token: {tok}, token usage: "
    "0.01, accept len: {al}, accept rate: {rate}, cpu graph: False, gen throughput (token/s): "
    "41.12, #queue-req: 0"
)
SGL_PREFILL = (
    "[2026-12-01 16:29:59] Prefill batch, #new-seq: 8, #new-token: 96, #cached-token: 0, "
    "#token: 96, token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, "
    "cpu graph: False, input throughput (token/s): 310.52"
)
# the start-up line (srt/entrypoints/engine.py 311: `server_args={resolved_dict()}`), shortened
SGL_START = (
    "[2026-12-01 16:29:10] server_args={{'model_path': '/m/target', 'speculative_algorithm': "
    "'EAGLE3', 'speculative_num_steps': 3, 'decode_log_interval': {interval}, 'device': 'cpu'}}"
)
# One batch of 8 requests, chain k=3, decode_log_interval 1: (batch size, correct drafts) of
# each decode iteration while the batch drains from 8 requests to 1; 455 rounds, 507 correct.
SGL_ITERATIONS = (
    [(8, 10)] * 30
    + [(7, 8)] * 10
    + [(6, 6)] * 8
    + [(5, 5)] * 8
    + [(4, 3)] * 6
    + [(3, 2)] * 6
    + [(2, 1)] * 5
    + [(1, 1), (1, 0), (1, 2), (1, 0), (1, 1)]
)


def _sglang_batch_log(start: str | None = None, running_req: bool = True) -> str:
    """The lines SGLang prints for SGL_ITERATIONS: per iteration `accept len` = (correct + bs) /
    bs, `accept rate` = correct / (bs * 3), both with two decimals (metrics_reporter.py 973-982,
    1005)."""
    lines = [start] if start else []
    lines.append(SGL_PREFILL)
    for i, (bs, correct) in enumerate(SGL_ITERATIONS):
        line = SGL_DECODE.format(
            s=i % 60,
            bs=bs,
            tok=96 + 3 * i,
            al=f"{(correct + bs) / bs:.2f}",
            rate=f"{correct / (bs * 3):.2f}",
        )
        lines.append(line if running_req else line.replace(f"#running-req: {bs}, ", ""))
    return "\n".join(lines) + "\n"


def test_sglang_log_lines_are_weighted_by_running_requests(tmp_path):
    assert len(SGL_ITERATIONS) == 78
    rounds = sum(bs for bs, _ in SGL_ITERATIONS)
    correct = sum(c for _, c in SGL_ITERATIONS)
    assert (rounds, correct) == (455, 507)  # SGLang's pooled figure: 1 + 507 / 455 = 2.1143
    f = tmp_path / "sglang.log"
    f.write_text(_sglang_batch_log())
    log = read_engine_log(f)
    assert (log.engine, log.source, log.lines) == ("sglang", "log", 78)
    # the lines averaged alike read 2.0246; weighted by #running-req, 2.1140: the pooled 2.1143
    # to the lines' rounding. The log does not say how many iterations a line covers: no counts.
    assert log.weighting == "running-req" and log.rounded and log.rounds is None
    assert log.accept_length == pytest.approx(2.113978, abs=1e-6)
    assert abs(log.accept_length - (1 + 507 / 455)) < 0.005
    assert log.description == "SGLang 78 log lines by #running-req"
    assert log.decode_log_interval is None and "default 40" in (log.note or "")
    # decode_log_interval 1 (the start-up line says so): each line is one iteration, its counts
    # exact
    f.write_text(_sglang_batch_log(SGL_START.format(interval=1)))
    log = read_engine_log(f)
    assert (log.rounds, log.accepted, log.rounded) == (455, 507, False)
    assert log.accept_length == 1 + 507 / 455 and log.decode_log_interval == 1
    # ... or the caller says so for a log without its start-up
    f.write_text(_sglang_batch_log())
    log = read_engine_log(f, decode_log_interval=1)
    assert (log.rounds, log.accepted, log.rounded) == (455, 507, False)
    # the default window: weighted, approximate
    f.write_text(_sglang_batch_log(SGL_START.format(interval=40)))
    log = read_engine_log(f)
    assert log.decode_log_interval == 40 and log.rounds is None and log.rounded
    assert log.accept_length == pytest.approx(2.113978, abs=1e-6)
    with pytest.raises(InputError, match="decode_log_interval 40, but 1 was given"):
        read_engine_log(f, decode_log_interval=1)


def test_sglang_log_lines_without_running_requests_still_read(tmp_path):
    f = tmp_path / "sglang.log"
    f.write_text(_sglang_batch_log(running_req=False))
    log = read_engine_log(f)
    # each line alike, as before: 2.0246 where the engine pooled 2.1143
    assert log.weighting == "unweighted" and log.rounded and log.rounds is None
    assert log.accept_length == pytest.approx(157.92 / 78)
    assert log.description == "SGLang 78 log lines unweighted"
    assert "78 of 78 'accept len' lines state no #running-req" in (log.note or "")


def test_sglang_counts_only_where_one_count_prints_the_line(tmp_path):
    # decode_log_interval 1 at 120 running requests: "1.43" is 51 or 52 correct drafts
    # ((51 + 120) / 120 = 1.425, (52 + 120) / 120 = 1.4333); "1.50" at 2 requests is 1
    f = tmp_path / "sglang.log"
    big = SGL_DECODE.format(s=1, bs=120, tok=900, al="1.43", rate="0.14")
    small = SGL_DECODE.format(s=2, bs=2, tok=902, al="1.50", rate="0.17")
    f.write_text(SGL_START.format(interval=1) + "\n" + big + "\n" + small + "\n")
    log = read_engine_log(f)
    assert log.rounds is None and log.rounded
    assert log.accept_length == pytest.approx((1.43 * 120 + 1.5 * 2) / 122)
    assert "1 of 2 lines (the first at line 2)" in (log.note or "")


def test_sglang_decode_lines_say_where_the_engine_ran(tmp_path):
    """SGLang's decode lines print "cpu graph" on a CPU and "cuda graph" on a GPU: on a CPU it
    runs no overlap scheduler for speculative decoding (reconcile drops that round)."""
    line = (
        "[2026-12-04 05:52:35] Decode batch, #running-req: 1, #token: 300, token usage: 0.04, "
        "accept len: 2.00, accept rate: 0.33, {} graph: False, gen throughput (token/s): 4.95, "
        "#queue-req: 0\n"
    )
    for device in ("cpu", "cuda"):
        p = tmp_path / f"{device}.log"
        p.write_text(line.format(device) * 3)
        assert read_engine_log(p).device == device
    mixed = tmp_path / "mixed.log"
    mixed.write_text(line.format("cpu") + line.format("cuda"))
    assert read_engine_log(mixed).device is None
