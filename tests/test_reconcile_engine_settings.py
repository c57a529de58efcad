"""How the engine drafted, where its figure depends on it: the per-step drafted counts vLLM logs
per request, an adaptive draft length (the replay at a fixed K then a bound), synthetic
acceptance (a coin, not the draft), and llama.cpp's early stop of a chain."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inspector.doctor.reconcile.pipeline import Verdict, reconcile
from inspector.doctor.reconcile.synthetic import SyntheticSetting, synthetic_check
from inspector.doctor.reconcile.words import (
    Adapts,
    BestOfTried,
    Bounded,
    Fed,
    Logged,
    MatchesNone,
    Synthetic,
)
from inspector.errors import InputError
from inspector.formats.engine_log import EngineLog, RequestFigures, read_engine_log
from inspector.formats.samples import v1_slot_info
from inspector.serving.live_draft import LiveDraft
from inspector.serving.replay import AcceptReport, SampleReplay, WiringAccept
from inspector.serving.spec import DraftSpec
from inspector.wiring import Wiring

SLOTS = v1_slot_info([0, 2, 4, 6])
# one request of a real vLLM 0.32 CPU run (per_request_spec_decode_metrics="detailed", k = 3), its
# lists shortened: the keys and their order as `RequestSpecDecodeMetrics.to_dict` writes them
# (v1/metrics/stats.py 397-421)
VLLM_DETAILED = (
    '{"prompt_token_ids": [501, 221, 49, 337], "output_token_ids": [199, 199, 479, 373, 395, 63], '
    '"spec_decode_metrics": {"mean_acceptance_length": 1.25, "draft_acceptance_rate": '
    '0.08333333333333333, "acceptance_histogram": [3, 1, 0, 0], "num_spec_steps": 4, '
    '"num_accepted_draft_tokens": 1, "num_draft_tokens": 12, "num_spec_tokens": 3, '
    '"per_step_accepted": [0, 1, 0, 0], "per_step_drafted": [3, 3, 3, 3]}}'
)


def test_vllms_detailed_per_request_metrics_give_the_schedule(tmp_path):
    f = tmp_path / "requests.jsonl"
    f.write_text(VLLM_DETAILED + "\n")
    log = read_engine_log(f)
    (r,) = log.requests
    assert r.per_step_drafted == [3, 3, 3, 3] and r.spec_tokens == 3
    assert (log.rounds, log.accepted, log.steps, log.most_drafted) == (4, 1, 3, 3)
    assert log.schedules and log.accept_length == pytest.approx(1.25)
    # a round that drafted nothing is no draft (vLLM never lists one; another log may)
    row = json.loads(VLLM_DETAILED)
    row["spec_decode_metrics"]["per_step_accepted"] = [0, 2, 0, 1, 0]
    row["spec_decode_metrics"]["per_step_drafted"] = [0, 2, 0, 3, 1]
    f.write_text(json.dumps(row) + "\n")
    log = read_engine_log(f)
    assert (log.rounds, log.accepted, log.most_drafted) == (3, 3, 3)
    assert log.requests[0].counted_accepted == [2, 1, 0]
    # the lists must line up, and no round accepts more than it drafted
    row["spec_decode_metrics"]["per_step_drafted"] = [3, 3]
    f.write_text(json.dumps(row) + "\n")
    with pytest.raises(InputError, match="per_step_drafted has 2 rounds, per_step_accepted 5"):
        read_engine_log(f)
    row["spec_decode_metrics"]["per_step_drafted"] = [3, 1, 3, 3, 3]
    f.write_text(json.dumps(row) + "\n")
    with pytest.raises(InputError, match="round 1 accepted more tokens than it drafted"):
        read_engine_log(f)
    # without per_step_drafted the field stays empty: a fixed-K replay
    del row["spec_decode_metrics"]["per_step_drafted"]
    f.write_text(json.dumps(row) + "\n")
    log = read_engine_log(f)
    assert log.requests[0].per_step_drafted is None and not log.schedules
    assert log.rounds == 5


VLLM_LINE = (
    "INFO 12-01 16:29:19 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: {mean}, "
    "Accepted throughput: 54.57 tokens/s, Drafted throughput: 154.05 tokens/s, Accepted: {acc} "
    "tokens, Drafted: {drafted} tokens, Per-position acceptance rate: {rates}, Avg Draft "
    "acceptance rate: 35.4%"
)


def test_the_logs_start_up_lines_say_the_draft_length_adapts(tmp_path):
    f = tmp_path / "vllm.log"
    dynamic = (
        "WARNING 12-01 16:29:01 [vllm.py:1049] Dynamic speculative decoding changes the target "
        "verification length at runtime. Overriding cudagraph_mode from FULL to PIECEWISE"
    )
    # 100 drafts at a mean of 2.50, 30 at 2.00: drafted tokens are no longer drafts x 3
    lines = [
        VLLM_LINE.format(mean="2.50", acc=150, drafted=250, rates="0.800, 0.500, 0.200"),
        VLLM_LINE.format(mean="2.00", acc=30, drafted=80, rates="0.600, 0.300, 0.100"),
    ]
    f.write_text("\n".join([dynamic, *lines]) + "\n")
    log = read_engine_log(f)
    assert log.adaptive is not None and "vllm.log:1" in log.adaptive
    assert log.rounds is None and log.accepted == 180 and log.rounded
    assert log.accept_length == pytest.approx((2.5 * 100 + 2.0 * 30) / 130)
    off = "WARNING Disabling num_speculative_tokens_per_batch_size and falling back to static"
    fixed = VLLM_LINE.format(mean="2.50", acc=150, drafted=300, rates="0.800, 0.500, 0.200")
    f.write_text("\n".join([dynamic, off, fixed]) + "\n")
    log = read_engine_log(f)
    assert log.adaptive is None and (log.rounds, log.accepted) == (100, 150)
    sg = tmp_path / "sglang.log"
    start = "[2026-12-01 16:29:00] server_args={'speculative_num_steps': 3, 'speculative_adaptive': True}"
    decode = (
        "[2026-12-01 16:30:02] Decode batch, #running-req: 8, #token: 900, token usage: 0.01, "
        "accept len: 2.31, accept rate: 0.44, cuda graph: True, gen throughput (token/s): 300.1, "
        "#queue-req: 0"
    )
    sg.write_text(start + "\n" + decode + "\n")
    assert "speculative_adaptive" in read_engine_log(sg).adaptive
    disabled = "[2026-12-01 16:29:00] speculative_adaptive disabled: no CUDA graphs. Falling back"
    sg.write_text("\n".join([start, disabled, decode]) + "\n")
    assert read_engine_log(sg).adaptive is None


def _report(per_sample: list[list[int]], names=("configured [embed, L2, L4]",)) -> AcceptReport:
    wa = WiringAccept(Wiring((0, 1, 2)), names[0], 3)
    for i, acc in enumerate(per_sample):
        a = np.array(acc, dtype=np.int64)
        starts = np.array([10 + 4 * k for k in range(len(acc))], dtype=np.int64)
        wa.per_sample.append(
            SampleReplay(i, f"data_{i}.pt", starts, a, a + 1, np.zeros(64, dtype=np.int64), 3)
        )
    bad = WiringAccept(Wiring((1, 2, 3)), "serve [L2, L4, L6]", 3)
    bad.per_sample = [
        SampleReplay(s.index, s.path, s.starts, s.accepted * 0, s.emitted * 0 + 1, s.a_by_start, 3)
        for s in wa.per_sample
    ]
    return AcceptReport(
        spec=DraftSpec(3),
        mode="replay",
        checkpoint="draft",
        samples=len(per_sample),
        device="cpu",
        dtype="float32",
        slots=SLOTS,
        wirings=[wa, bad],
    )


def _log(al: float, rounds=None, accepted=None, engine="vllm", **kw) -> EngineLog:
    return EngineLog(
        Path("x.log"),
        engine,
        kw.pop("source", "log"),
        accept_length=al,
        rounds=rounds,
        accepted=accepted,
        lines=kw.pop("lines", 1),
        **kw,
    )


GOOD = [[3, 3, 1, 2], [2, 3, 3]]  # 17 accepted in 7 rounds: 1 + 17/7 = 3.43


def test_adaptive_makes_the_fixed_k_replay_an_upper_bound():
    rep = _report(GOOD)
    below = _log(2.5, 14, 21)  # an engine that drafted fewer tokens in some rounds
    plain = reconcile(below, rep)
    assert plain.verdict is Verdict.OTHER_DATA and not any(c.equal for c in plain.checks)
    r = reconcile(below, rep, adaptive="--adaptive")
    assert r.verdict is Verdict.AS_IS and r.bound == "--adaptive"
    assert [c.equal for c in r.checks] == [True, False]  # at most the first, above the second
    # the best of those tried (GOOD's replay), its words closed by the bound the replay is
    said = BestOfTried(Logged.of(below), Fed("[embed, L2, L4]", 1 + 17 / 7))
    assert r.said == Bounded(said, Adapts("--adaptive", 3))
    assert any("upper bound" in n for n in r.notes)
    d = r.to_dict()
    assert d["replay_is_upper_bound"] is True and d["adaptive"] == "--adaptive"
    # above every replay, even a bound does not hold it
    above = reconcile(_log(3.6, 10, 26), rep, adaptive="--adaptive")
    assert above.verdict is Verdict.OTHER_DATA and isinstance(above.said, Bounded)
    assert isinstance(above.said.said, MatchesNone) and above.said.said.adaptive
    # a log that says so needs no flag; a rounded figure is a bound within its rounding
    r = reconcile(_log(1 + 17 / 7 + 0.004, rounded=True, adaptive="SGLang's x"), rep)
    assert r.bound == "SGLang's x" and r.checks[0].equal


def test_a_logged_schedule_is_replayed_count_for_count():
    rep = _report([[3, 3, 1, 2]])
    # a_by_start of the one sample: what the walk through x_2..x_14 reads
    s = rep.wirings[0].per_sample[0]
    a = np.zeros(15, dtype=np.int64)
    a[[2, 6, 10, 12]] = [3, 3, 1, 1]
    mask = np.zeros(15, dtype=int)
    mask[2:] = 1
    walked = SampleReplay.of(0, s.path, a, mask, 3)
    rep.wirings[0].per_sample = [walked]
    rep.wirings[1].per_sample = [SampleReplay.of(0, s.path, a * 0, mask, 3)]
    sched = walked.rescheduled([1, 0, 3, 2])  # then the depth: 3
    assert sched.drafted.tolist() == [1, 0, 3, 2, 3, 3, 3]
    assert sched.accepted.tolist() == [1, 0, 0, 2, 0, 1, 1]
    req = RequestFigures(
        "r:1",
        1,
        per_step_accepted=sched.accepted.tolist(),
        per_step_drafted=sched.drafted.tolist(),
        rounds=6,  # the round without a draft is none
        accepted=5,
    )
    log = _log(1 + req.accepted / req.rounds, req.rounds, req.accepted, source="requests")
    log.requests = [req]
    r = reconcile(log, rep, pairs={0: req}, adaptive="--adaptive")
    assert r.verdict is Verdict.AS_IS and r.bound is None and r.scheduled == 1
    assert r.checks[0].requests_equal == 1 and r.checks[0].stats.rounds == req.rounds
    assert any("replayed under its own schedule" in n for n in r.notes)
    # unpaired, the schedule cannot be drafted: drafts below K make the replay a bound
    r = reconcile(log, rep)
    assert r.bound is not None and "per_step_drafted" in r.bound


def test_vllms_synthetic_rates_name_the_figure_not_the_draft():
    rep = _report(GOOD)
    rates = (0.8, 0.6, 0.4)  # expected 1 + 0.8 + 0.6 + 0.4 = 2.8
    setting = SyntheticSetting.vllm(rates)
    assert setting.draw(3)[0] == pytest.approx(1.8)
    # 2000 rounds: sd of the mean sqrt(Var / 2000), Var = 1*.8 + 3*.6 + 5*.4 - 1.8^2 = 1.36
    log = _log(2.79, 2000, 3580, accepted_per_pos=[1610, 1190, 780])
    r = reconcile(log, rep, synthetic=setting)
    assert r.verdict is Verdict.SYNTHETIC and r.matched is None and r.fix is None
    assert r.serving_config is None and r.best is None
    assert isinstance(r.said, Synthetic) and r.said.logged == Logged.of(log)
    assert (r.said.setting, r.said.draws) == (setting.text, 2000)
    quoted = (r.said.expected, r.said.tolerance)
    assert quoted == (r.synthetic["expected_accept_length"], r.synthetic["tolerance"])
    assert "rejection_sample_method 'standard'" in r.said.off  # how to serve without it
    assert r.to_dict()["verdict"] == "synthetic"
    check = r.to_dict()["synthetic"]
    assert check["expected_accept_length"] == pytest.approx(2.8) and check["draws"] == 2000
    assert check["tolerance"] == pytest.approx(4 * (1.36 / 2000) ** 0.5)
    assert check["per_position_matches"] is True
    # beyond four standard deviations of 2000 rounds: the engine's own figure
    off = _log(2.65, 2000, 3300)
    r = reconcile(off, rep, synthetic=setting)
    assert r.verdict is not Verdict.SYNTHETIC
    assert any("is not what rejection_sample_method='synthetic'" in n for n in r.notes)
    # the mean alike but the per-position shares not
    skew = _log(2.8, 2000, 3600, accepted_per_pos=[2000, 1000, 600])
    assert reconcile(skew, rep, synthetic=setting).verdict is not Verdict.SYNTHETIC
    with pytest.raises(InputError, match="non-increasing"):
        SyntheticSetting.vllm((0.5, 0.6, 0.1))
    with pytest.raises(InputError, match="2 rates for 3 drafted tokens"):
        synthetic_check(log, SyntheticSetting.vllm((0.8, 0.6)), 3)


def test_sglangs_simulated_accept_length_names_the_figure_not_the_draft():
    rep = _report(GOOD)
    setting = SyntheticSetting.sglang(2.5)
    # one length per decode iteration, the batch alike: 2 or 3 with even odds, Var 0.25
    assert setting.draw(3) == pytest.approx((1.5, 0.25))
    lines = _log(2.52, engine="sglang", rounded=True, lines=5, decode_log_interval=40)
    r = reconcile(lines, rep, synthetic=setting)
    assert r.verdict is Verdict.SYNTHETIC and r.said.setting == "SGLANG_SIMULATE_ACC_LEN=2.5"
    assert "SGLANG_SIMULATE_ACC_LEN unset" in r.said.off
    assert r.synthetic["draws"] == 200
    assert r.synthetic["tolerance"] == pytest.approx(4 * (0.25 / 200) ** 0.5 + 0.005 + 1e-9)
    # 200 iterations cannot wander to 2.70; an X past steps + 1 is clamped there
    far = reconcile(_log(2.7, engine="sglang", rounded=True, lines=5), rep, synthetic=setting)
    assert far.verdict is not Verdict.SYNTHETIC
    assert SyntheticSetting.sglang(9.0).draw(3) == pytest.approx((3.0, 0.0))
    with pytest.raises(InputError, match="the log is another's"):
        synthetic_check(_log(2.5), setting, 3)


def test_llama_cpps_early_stop_keeps_the_chain_up_to_the_first_unsure_step():
    ld = LiveDraft.__new__(LiveDraft)  # the rule alone: no draft needed
    ld.spec = DraftSpec(4, p_min=0.5)
    ld.confidence = [0.9, 0.7, 0.4, 0.95]
    assert ld.kept() == 2  # the third step is below p_min: dropped, and drafting stops
    ld.confidence = [0.3, 0.9, 0.9, 0.9]
    assert ld.kept() == 0
    ld.confidence = [0.5, 0.5, 0.5, 0.5]  # at p_min: kept (llama.cpp drops p < p_min)
    assert ld.kept() == 4
    ld.spec = DraftSpec(4, p_min=0.5, n_min=3)
    ld.confidence = [0.9, 0.7, 0.4, 0.95]
    assert ld.kept() == 0  # fewer than n_min left: the whole draft dropped
    ld.spec = DraftSpec(4)
    assert ld.kept() == 4
    assert DraftSpec(3, p_min=0.4).to_dict()["p_min"] == 0.4
    assert "--spec-draft-p-min 0.4" in DraftSpec(3, p_min=0.4).flags()
    with pytest.raises(InputError, match="a probability"):
        DraftSpec(3, p_min=1.5)
    with pytest.raises(InputError, match="drafts chains"):
        DraftSpec(3, topk=2, draft_tokens=4, p_min=0.5)
