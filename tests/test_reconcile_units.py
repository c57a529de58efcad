"""reconcile's rules on hand-built replays and logs: equality by counts and by rounding, each
verdict and what its words quote (`Reconciliation.said`; the words themselves are
tests/test_reconcile_words.py's), the first shortfall, which fault classes fit, pairing
requests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inspector.doctor.reconcile.matching import ROUNDING, WINDOW_TOLERANCE
from inspector.doctor.reconcile.pipeline import Verdict, pair_requests, reconcile, token_key
from inspector.doctor.reconcile.shortfall import ENGINE_FAULTS
from inspector.doctor.reconcile.words import (
    BelowEvery,
    BestOfTried,
    Fed,
    Logged,
    MatchesNone,
    WorseOfTried,
)
from inspector.formats.engine_log import EngineLog, RequestFigures
from inspector.formats.samples import v1_slot_info
from inspector.serving.replay import AcceptReport, SampleReplay, WiringAccept
from inspector.serving.spec import DraftSpec
from inspector.wiring import Wiring

SLOTS = v1_slot_info([0, 2, 4, 6])
FAULT = dict(ENGINE_FAULTS)
# the wirings as a verdict names them, with the replays' accept lengths
TRAIN_GOOD, TRAIN_BAD = Fed("[embed, L2, L4]", 1 + 13 / 7), Fed("[embed, L2, L4]", 1 + 2 / 7)
SERVE_GOOD, SERVE_BAD = Fed("[L2, L4, L6]", 1 + 13 / 7), Fed("[L2, L4, L6]", 1 + 2 / 7)
SERVE_MID = Fed("[L2, L4, L6]", 1 + 6 / 7)


def _sample(index: int, accepted: list[int], starts: list[int] | None = None) -> SampleReplay:
    starts = starts if starts is not None else [10 + 3 * i for i in range(len(accepted))]
    a = np.array(accepted, dtype=np.int64)
    return SampleReplay(
        index,
        f"data_{index}.pt",
        np.array(starts, dtype=np.int64),
        a,
        a + 1,
        np.zeros(100, dtype=np.int64),
        3,
    )


def _report(per_wiring: dict[tuple[int, ...], list[list[int]]], starts=None) -> AcceptReport:
    names = {(0, 1, 2): "configured [embed, L2, L4]", (1, 2, 3): "serve [L2, L4, L6]"}
    wirings = []
    for w, samples in per_wiring.items():
        wa = WiringAccept(Wiring(w), names.get(w, str(list(w))), 3)
        wa.per_sample = [
            _sample(i, acc, None if starts is None else starts[i]) for i, acc in enumerate(samples)
        ]
        wirings.append(wa)
    return AcceptReport(
        spec=DraftSpec(3),
        mode="replay",
        checkpoint="draft",
        samples=2,
        device="cpu",
        dtype="float32",
        slots=SLOTS,
        wirings=wirings,
    )


GOOD = [[2, 3, 0, 1], [3, 3, 1]]  # 13 accepted in 7 rounds: 1 + 13/7
BAD = [[0, 1, 0, 0], [1, 0, 0]]  # 2 in 7
MID = [[1, 1, 0, 1], [1, 1, 1]]  # 6 in 7


def _log(rounds=None, accepted=None, al=None, **kw) -> EngineLog:
    if al is None and rounds:
        al = 1 + accepted / rounds
    return EngineLog(
        Path("vllm.log"),
        kw.pop("engine", "vllm"),
        kw.pop("source", "log"),
        accept_length=al,
        rounds=rounds,
        accepted=accepted,
        lines=1,
        **kw,
    )


def test_counts_decide_exactly_and_a_mean_within_its_rounding():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): BAD})
    log = _log(7, 13)
    r = reconcile(log, rep)
    assert r.verdict is Verdict.AS_IS and r.matched == r.best == "configured [embed, L2, L4]"
    assert [c.equal for c in r.checks] == [True, False]
    assert r.fix is None and r.gap is None and r.faults == []
    assert r.said == BestOfTried(Logged.of(log), TRAIN_GOOD)  # and no config's wiring to note
    assert r.said.logged == Logged("vLLM", "2.86 (13 accepted in 7 rounds, vLLM 1 log line)")
    # one accepted token off is no longer equal, though the mean rounds the same
    assert not reconcile(_log(7, 12, al=1 + 13 / 7), rep).checks[0].equal
    # a rounded mean: equal within half its last digit, not beyond
    at = 1 + 13 / 7
    for delta, eq in ((ROUNDING - 1e-6, True), (ROUNDING + 1e-4, False)):
        log = _log(al=at + delta, rounded=True)
        assert reconcile(log, rep).checks[0].equal is eq, delta
    # SGLang's windows: a looser tolerance
    sg = _log(al=at + WINDOW_TOLERANCE - 1e-6, engine="sglang", rounded=True)
    assert reconcile(sg, rep).checks[0].equal
    sg = _log(al=at + WINDOW_TOLERANCE + 1e-3, engine="sglang", rounded=True)
    assert not reconcile(sg, rep).checks[0].equal
    assert reconcile(sg, rep).said.logged.by == "SGLang"


def test_another_wirings_figure_names_the_wrong_layers_and_the_fix(tmp_path):
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): BAD})
    log = _log(7, 2)
    r = reconcile(log, rep)
    assert r.verdict is Verdict.WRONG_WIRING
    assert r.matched == "serve [L2, L4, L6]" and r.best == "configured [embed, L2, L4]"
    # the best is the wiring the config names
    assert r.said == WorseOfTried(Logged.of(log), SERVE_BAD, TRAIN_GOOD, configured=True)
    # no target read: SGLang's ids depend on the target's model file, both readings given
    assert r.fix == (
        "serve it fed [embed, L2, L4]: eagle_aux_hidden_state_layer_ids [0, 2, 4] for vLLM, "
        "eagle_config ids for SGLang 0.5.23 by the target's model file (target class unknown): "
        "[-1, 1, 3] where it adds 1 to every id (Llama, Qwen, Gemma), [0, 2, 4] where it adds 1 "
        "only when the first id is 1 (DeepSeek-V2/V3)"
    )
    assert r.serving_config["hf_indices"] == [0, 2, 4]
    assert r.serving_config["sglang"]["layer_ids_by_rule"] == {
        "every": [-1, 1, 3],
        "first-is-1": [0, 2, 4],
    }
    # the report's target (the folder its head was read from) names the class: its model file's
    # rule (SGLang 0.5.23 srt/models/llama.py 929-941, deepseek_v2.py 3458-3473)
    for arch, ids, how in (
        ("LlamaForCausalLM", [-1, 1, 3], "Llama: SGLang adds 1 to every id"),
        (
            "DeepseekV3ForCausalLM",
            [0, 2, 4],
            "DeepSeek-V2/V3: SGLang adds 1 only when the first id is 1",
        ),
    ):
        (tmp_path / arch).mkdir()
        (tmp_path / arch / "config.json").write_text(f'{{"architectures": ["{arch}"]}}')
        rep.verifier = str(tmp_path / arch)
        r = reconcile(_log(7, 2), rep)
        assert r.fix == (
            "serve it fed [embed, L2, L4]: eagle_aux_hidden_state_layer_ids [0, 2, 4] for vLLM, "
            f"eagle_config ids {ids} for SGLang 0.5.23 ({how})"
        )
        assert r.serving_config["sglang"]["target_class"] == arch
    # the best wiring is not the configured one: the summary says which is which
    rep2 = _report({(0, 1, 2): BAD, (1, 2, 3): GOOD})
    r2 = reconcile(_log(7, 2), rep2)
    assert r2.verdict is Verdict.WRONG_WIRING
    assert r2.said == WorseOfTried(r2.said.logged, TRAIN_BAD, SERVE_GOOD, configured=False)
    assert "[L2, L4, L6]" in r2.fix
    r3 = reconcile(_log(7, 13), rep2)
    assert r3.verdict is Verdict.AS_IS
    assert r3.said == BestOfTried(r3.said.logged, SERVE_GOOD, configured=TRAIN_BAD)
    assert r3.serving_config is not None and r3.fix is None


def test_below_every_wiring_is_an_engine_fault_with_its_first_shortfall():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): MID}, starts=[[5, 8, 12, 13], [3, 7, 1500]])
    reqs = [
        RequestFigures("requests.jsonl:1", per_step_accepted=[2, 0, 0, 0]),
        RequestFigures("requests.jsonl:2", per_step_accepted=[0, 0, 0]),
    ]
    log = _log(7, 2, source="requests")
    log.requests = reqs
    r = reconcile(log, rep, pairs={0: reqs[0], 1: reqs[1]})
    assert r.verdict is Verdict.ENGINE_FAULT
    g = r.gap
    assert (g.sample, g.round, g.engine, g.replay, g.position) == (0, 1, 0, 3, 8)
    assert g.request == "requests.jsonl:1"
    # lowest the serve wiring's, the shortfall measured against the configured one's
    assert r.said == BelowEvery(Logged.of(log), SERVE_MID, TRAIN_GOOD, g)
    assert r.said.logged == Logged("vLLM", "1.29 over 2 requests")
    # the median shortfall lies before 1K tokens, the first not in round 0: batching first
    assert r.faults == [FAULT["batch"], FAULT["early"], FAULT["late"]]
    assert r.to_dict()["first_gap"]["engine_accepted"] == 0
    assert [c.requests_equal for c in r.checks] == [0, 0]
    assert r.fix is None


def test_which_fault_classes_fit_where_the_engine_fell_short():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): MID}, starts=[[5, 8, 12, 13], [1100, 1200, 1500]])
    early = RequestFigures("r:1", per_step_accepted=[0, 3, 0, 1])
    late = RequestFigures("r:2", per_step_accepted=[0, 0, 0])
    log = _log(7, 4, source="requests")
    r = reconcile(log, rep, pairs={0: early, 1: late})
    assert r.gap.round == 0 and r.gap.sample == 0
    # the first shortfall in round 0 and the median one past 1K tokens
    assert r.faults == [FAULT["early"], FAULT["late"], FAULT["batch"]]
    fine = RequestFigures("r:1", per_step_accepted=[2, 3, 0, 1])
    r = reconcile(_log(8, 4, source="requests"), rep, pairs={0: fine, 1: late})
    assert r.gap.position == 1100 and r.gap.round == 0
    assert r.faults == [FAULT["early"], FAULT["late"], FAULT["batch"]]
    late_only = RequestFigures("r:2", per_step_accepted=[3, 0, 0])
    r = reconcile(_log(8, 4, source="requests"), rep, pairs={0: fine, 1: late_only})
    assert (r.gap.position, r.gap.round) == (1200, 1)
    assert r.faults == [FAULT["late"], FAULT["batch"], FAULT["early"]]
    # pooled only: every class, in the catalogue's order
    r = reconcile(_log(7, 1), rep)
    assert r.gap is None and r.faults == [FAULT["early"], FAULT["late"], FAULT["batch"]]


def test_a_figure_matching_no_replay_is_other_data():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): BAD})
    between = reconcile(_log(7, 6), rep)
    assert between.verdict is Verdict.OTHER_DATA
    assert between.said == MatchesNone(between.said.logged, (TRAIN_GOOD, SERVE_BAD))
    assert reconcile(_log(7, 20), rep).verdict is Verdict.OTHER_DATA  # above every replay
    with pytest.raises(ValueError):
        reconcile(_log(), rep)


def test_a_per_request_match_decides_what_a_pooled_figure_cannot():
    # both wirings pool to 6 accepted in 4 rounds; only one has the engine's rounds
    rep = _report({(0, 1, 2): [[3, 0], [1, 2]], (1, 2, 3): [[0, 3], [2, 1]]})
    reqs = [
        RequestFigures("r:1", per_step_accepted=[0, 3]),
        RequestFigures("r:2", per_step_accepted=[2, 1]),
    ]
    log = _log(4, 6, source="requests")
    r = reconcile(log, rep, pairs={0: reqs[0], 1: reqs[1]})
    assert [c.equal for c in r.checks] == [True, True]
    assert [c.requests_equal for c in r.checks] == [0, 2]
    assert r.matched == "serve [L2, L4, L6]"


def test_a_lower_bound_replay_equals_a_count_at_or_above_it():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): BAD})
    rep.wirings[0].per_sample[1].bounded[-1] = True
    assert reconcile(_log(7, 14), rep).checks[0].equal
    assert not reconcile(_log(7, 12), rep).checks[0].equal
    assert not reconcile(_log(8, 14), rep).checks[0].equal
    r = reconcile(_log(7, 14), rep)
    assert any("lower bounds" in n for n in r.notes)
    d = r.to_dict()["wirings"][0]
    assert d["accept_length_is_lower_bound"] and d["equal"]


def test_requests_pair_with_samples_by_tokens_else_by_order():
    samples = [(0, token_key([1, 2, 3, 4])), (1, token_key([5, 6, 7]))]
    a = RequestFigures("f:1", prompt_ids=[5], output_ids=[6, 7], per_step_accepted=[1])
    b = RequestFigures("f:2", prompt_ids=[1, 2], output_ids=[3, 4], per_step_accepted=[0])
    c = RequestFigures("f:3", prompt_ids=[9], output_ids=[9], per_step_accepted=[0])
    log = _log(2, 1, source="requests")
    log.requests = [a, b, c]
    pairs, notes = pair_requests(log, samples)
    assert pairs == {1: a, 0: b}
    assert notes == [
        "1 of 3 engine requests match no sample's tokens (prompt + output): left out of the "
        "per-request comparison"
    ]
    log.requests = [RequestFigures("f:1", per_step_accepted=[1]), RequestFigures("f:2")]
    pairs, notes = pair_requests(log, samples)
    assert list(pairs) == [0, 1] and pairs[0].where == "f:1" and "by order" in notes[0]
    log.requests = [RequestFigures("f:1")]
    pairs, notes = pair_requests(log, samples)
    assert pairs == {} and "pooled figures only" in notes[0]
    log.requests = []
    assert pair_requests(log, samples) == ({}, [])


def test_sglangs_per_request_counts_leave_the_round_after_the_stop_out():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): BAD})
    for wa in rep.wirings:  # each request's last round is SGLang's overlap round
        for smp in wa.per_sample:
            smp.after_stop[-1] = True
            smp.emitted[-1] = 0
            smp.completion_tokens = 1 + int(smp.emitted.sum())
    # GOOD without its overlap rounds: 12 accepted in 5 rounds
    reqs = [
        RequestFigures("r:1", rounds=3, accepted=5),
        RequestFigures("r:2", rounds=2, accepted=6),
    ]
    log = _log(5, 11, engine="sglang", source="requests")
    log.requests = reqs
    r = reconcile(log, rep, pairs={0: reqs[0], 1: reqs[1]})
    assert r.checks[0].stats.rounds == 5 and r.checks[0].stats.accepted == 11
    assert r.verdict is Verdict.AS_IS and r.said.logged.by == "SGLang"
    # the pooled log line counts the overlap rounds: the replay as it is
    line = _log(al=1 + 13 / 7, engine="sglang", rounded=True)
    assert reconcile(line, rep).checks[0].equal
    # spec_accept_length only: completion tokens per verify round
    comp = [1 + 3 + 4 + 1, 1 + 4 + 4]  # GOOD's emitted without the overlap rounds, + the prefill's
    reqs = [
        RequestFigures("r:1", rounds=3, accepted=comp[0] - 3, per_request_figure=True),
        RequestFigures("r:2", rounds=2, accepted=comp[1] - 2, per_request_figure=True),
    ]
    log = _log(5, sum(comp) - 5, engine="sglang", source="requests", figure="spec_accept_length")
    log.requests = reqs
    r = reconcile(log, rep, pairs={0: reqs[0], 1: reqs[1]})
    assert r.checks[0].equal and r.verdict is Verdict.AS_IS
    assert r.said.logged == Logged("SGLang", "spec_accept_length 3.60 over 2 requests")


def test_the_json_holds_every_figure():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): MID}, starts=[[5, 8, 12, 13], [3, 7, 1500]])
    reqs = [
        RequestFigures("requests.jsonl:1", per_step_accepted=[2, 0, 0, 0]),
        RequestFigures("requests.jsonl:2", per_step_accepted=[0, 0, 0]),
    ]
    log = _log(7, 2, source="requests", accepted_per_pos=[1, 1, 0])
    log.requests = reqs
    r = reconcile(log, rep, pairs={0: reqs[0], 1: reqs[1]}, notes=["a note"])
    d = r.to_dict()
    assert d["engine_log"] == {
        "path": "vllm.log",
        "engine": "vllm",
        "source": "requests",
        "accept_length": 1 + 2 / 7,
        "rounds": 7,
        "accepted": 2,
        "accepted_per_pos": [1, 1, 0],
        "lines": 1,
        "requests": 2,
        "build": None,  # per-request JSON lines name no build
    }
    assert d["requests_matched"] == 2 and d["verdict"] == "engine_fault"
    assert d["matched"] is None and d["best"] == "configured [embed, L2, L4]"
    assert d["first_gap"] == {
        "request": "requests.jsonl:1",
        "sample": 0,
        "round": 1,
        "engine_accepted": 0,
        "replay_accepted": 3,
        "position": 8,
    }
    assert d["wirings"][0] == {
        "label": "configured [embed, L2, L4]",
        "wiring": [0, 1, 2],
        "accept_length": 1 + 13 / 7,
        "accept_length_is_lower_bound": False,
        "rounds": 7,
        "accepted": 13,
        "equal": False,
        "requests_equal": 0,
    }
    assert d["wirings"][1]["wiring"] == [1, 2, 3] and d["wirings"][1]["accepted"] == 6
    assert d["engine_fault_classes"] == [FAULT["batch"], FAULT["early"], FAULT["late"]]
    assert d["notes"] == ["a note"] and d["fix"] is None and d["serving_config"] is None
    assert d["summary"] == str(r.said) == r.summary
    assert r.said == BelowEvery(Logged.of(log), SERVE_MID, TRAIN_GOOD, r.gap)


def test_fix_text_names_sglangs_ids_once_when_both_readings_agree():
    # HF [2, 4, 6]: ids [1, 3, 5] where SGLang adds 1 to every id, and where it adds 1 only when
    # the first id is 1 (it is): the same ids whatever the target's class
    rep = _report({(1, 2, 3): GOOD, (0, 1, 2): BAD})
    r = reconcile(_log(7, 2), rep)
    assert r.verdict is Verdict.WRONG_WIRING
    assert r.fix == (
        "serve it fed [L2, L4, L6]: eagle_aux_hidden_state_layer_ids [2, 4, 6] for vLLM, "
        "eagle_config ids [1, 3, 5] for SGLang 0.5.23 (every reading; target class unknown)"
    )


def test_requests_with_half_their_ids_pair_by_order():
    samples = [(0, token_key([1, 2, 3, 4])), (1, token_key([5, 6, 7]))]
    log = _log(2, 1, source="requests")
    log.requests = [
        RequestFigures("f:1", prompt_ids=[5]),  # a prompt without its output
        RequestFigures("f:2", output_ids=[3, 4]),
    ]
    pairs, notes = pair_requests(log, samples)
    assert pairs == {0: log.requests[0], 1: log.requests[1]}
    assert notes == ["the log gives no token ids: requests are paired with samples by order"]
    log.requests = log.requests[:1]
    pairs, notes = pair_requests(log, samples)
    assert pairs == {}
    assert notes == ["the log gives no token ids and 1 requests for 2 samples: pooled figures only"]


def test_the_first_shortfall_is_the_logs_first_in_its_own_order():
    """Line 10 comes after line 2 (not before, as text would sort), and a request the log gives
    no rounds for is passed over, not the end of the search."""
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): MID}, starts=[[5, 8, 12, 13], [3, 7, 1500]])
    blank = RequestFigures("f:2", line=2)
    late = RequestFigures("f:10", line=10, per_step_accepted=[0, 0, 0])
    r = reconcile(_log(7, 1, source="requests"), rep, pairs={0: late, 1: blank})
    assert r.gap is not None and r.gap.request == "f:10" and r.gap.sample == 0
    early = RequestFigures("f:2", line=2, per_step_accepted=[3, 0, 0])
    r = reconcile(_log(7, 1, source="requests"), rep, pairs={0: late, 1: early})
    assert (r.gap.request, r.gap.sample, r.gap.round) == ("f:2", 1, 1)


def test_tolerances_at_their_edges():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): MID})
    mid = 1 + 6 / 7
    # SGLang's windows: just under the lowest replay but within the tolerance is not "below"
    sg = _log(al=mid - WINDOW_TOLERANCE + 1e-3, engine="sglang", rounded=True)
    assert reconcile(sg, rep).verdict is Verdict.WRONG_WIRING
    sg = _log(al=mid - 2 * ROUNDING, engine="sglang", source="server-info", rounded=True)
    assert reconcile(sg, rep).verdict is Verdict.ENGINE_FAULT
    # vLLM's rounded mean: below by more than its rounding is a fault
    assert reconcile(_log(al=mid - 2 * ROUNDING, rounded=True), rep).verdict is Verdict.ENGINE_FAULT
    # a lower-bound replay: equal to a count at it, and to a mean down to its rounding
    rep.wirings[0].per_sample[1].bounded[-1] = True
    good = 1 + 13 / 7
    assert reconcile(_log(7, 13), rep).checks[0].equal
    assert reconcile(_log(al=good - ROUNDING + 1e-6, rounded=True), rep).checks[0].equal
    assert reconcile(_log(al=good, rounded=True), rep).checks[0].equal
    assert not reconcile(_log(al=good - 2 * ROUNDING, rounded=True), rep).checks[0].equal


def test_a_wiring_without_rounds_equals_nothing():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): [[], []]})
    r = reconcile(_log(7, 13), rep)
    assert [c.equal for c in r.checks] == [True, False] and r.verdict is Verdict.AS_IS
    assert r.checks[1].stats.accept_length is None
    with pytest.raises(ValueError, match="nothing to reconcile: no rounds replayed or no figure"):
        reconcile(_log(), rep)


def test_paired_requests_restrict_the_pooled_figures_to_their_samples():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): BAD})
    only = RequestFigures("f:1", line=1, per_step_accepted=[3, 3, 1])
    r = reconcile(_log(3, 7, source="requests"), rep, pairs={1: only})
    assert r.checks[0].stats.rounds == 3 and r.checks[0].stats.accepted == 7
    assert r.checks[0].equal and r.checks[0].requests_equal == 1
    assert r.requests_matched == 1
    # without pairs, no per-request count at all
    assert [c.requests_equal for c in reconcile(_log(7, 13), rep).checks] == [None, None]


def test_the_serving_config_names_the_last_layers_caveats_and_the_steps():
    rep = _report({(1, 2, 3): GOOD, (0, 1, 2): BAD})  # the best wiring feeds L6, the last layer
    cfg = reconcile(_log(7, 2), rep).serving_config
    assert cfg["hf_indices"] == [2, 4, 6]
    assert any("id 6 (last layer, pre-norm)" in c for c in cfg["vllm"]["caveats"])
    assert any("HF index 6 is the last layer's output" in c for c in cfg["sglang"]["caveats"])
    assert '"num_speculative_tokens": 3' in cfg["vllm"]["launch"]


def test_fault_classes_at_1k_tokens():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): MID}, starts=[[5, 8, 12, 1024], [1024, 1100, 1500]])
    # the first shortfall at exactly 1024 (round 3 of sample 0): late first
    a = RequestFigures("r:1", line=1, per_step_accepted=[2, 3, 0, 0])
    b = RequestFigures("r:2", line=2, per_step_accepted=[3, 3, 1])
    r = reconcile(_log(8, 4, source="requests"), rep, pairs={0: a, 1: b})
    assert r.gap.position == 1024 and r.faults[0] == FAULT["late"]
    # the first shortfall before 1K tokens, the median one past it
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): MID}, starts=[[5, 8, 12, 13], [1024, 1100, 1500]])
    a = RequestFigures("r:1", line=1, per_step_accepted=[2, 0, 0, 1])
    b = RequestFigures("r:2", line=2, per_step_accepted=[0, 0, 0])
    r = reconcile(_log(8, 4, source="requests"), rep, pairs={0: a, 1: b})
    # shortfalls at 8, 1024, 1100, 1500: the median (index 2) is 1100
    assert r.gap.position == 8 and r.faults == [FAULT["late"], FAULT["batch"], FAULT["early"]]
    a = RequestFigures("r:1", line=1, per_step_accepted=[2, 0, 0, 1])
    b = RequestFigures("r:2", line=2, per_step_accepted=[0, 3, 1])
    r = reconcile(_log(8, 4, source="requests"), rep, pairs={0: a, 1: b})
    # shortfalls at 8 and 1024: the median (index 1) is 1024 exactly
    assert r.faults == [FAULT["late"], FAULT["batch"], FAULT["early"]]


def test_without_a_configured_wiring_the_best_is_the_reference():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): BAD})
    r = reconcile(_log(7, 2), rep, configured=None)
    assert r.verdict is Verdict.WRONG_WIRING
    assert r.said == WorseOfTried(r.said.logged, SERVE_BAD, TRAIN_GOOD, configured=False)
    r = reconcile(_log(7, 13), rep, configured=None)
    assert r.verdict is Verdict.AS_IS
    assert r.said == BestOfTried(r.said.logged, TRAIN_GOOD, configured=None)
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): MID}, starts=[[5, 8, 12, 13], [3, 7, 1500]])
    reqs = {0: RequestFigures("r:1", line=1, per_step_accepted=[0, 0, 0, 0])}
    r = reconcile(_log(4, 0, source="requests"), rep, configured=None, pairs=reqs)
    assert r.verdict is Verdict.ENGINE_FAULT and r.gap.replay == 2
    # sample 0's replays alone: serve 3 accepted in 4 rounds, the best (the reference) 6 in 4
    lowest, best = Fed("[L2, L4, L6]", 1 + 3 / 4), Fed("[embed, L2, L4]", 1 + 6 / 4)
    assert r.said == BelowEvery(r.said.logged, lowest, best, r.gap)


def test_a_first_shortfall_at_1k_tokens_fits_the_late_class_whatever_the_median():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): MID}, starts=[[5, 8, 12, 1024], [3, 7, 9]])
    a = RequestFigures("r:1", line=1, per_step_accepted=[2, 3, 0, 0])  # short at 1024 only
    b = RequestFigures("r:2", line=2, per_step_accepted=[0, 0, 0])  # short at 3, 7, 9
    r = reconcile(_log(8, 4, source="requests"), rep, pairs={0: a, 1: b})
    assert (r.gap.position, r.gap.round) == (1024, 3)  # the median shortfall is at 9
    assert r.faults == [FAULT["late"], FAULT["batch"], FAULT["early"]]
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): MID}, starts=[[5, 8, 12, 1023], [3, 7, 9]])
    r = reconcile(_log(8, 4, source="requests"), rep, pairs={0: a, 1: b})
    assert r.faults == [FAULT["batch"], FAULT["early"], FAULT["late"]]  # 1023: not late


def test_counts_or_means_whichever_the_log_gives():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): BAD})
    good = 1 + 13 / 7
    # a mean without counts, not rounded (one server-info rank): within the rounding
    info = EngineLog(Path("i.json"), "sglang", "server-info", accept_length=good + 0.004)
    assert reconcile(info, rep).checks[0].equal
    # rounds without accepted: the mean decides
    assert reconcile(_log(7, None, al=good + 0.004), rep).checks[0].equal
    assert not reconcile(_log(7, None, al=good + 0.01), rep).checks[0].equal


def test_of_two_equal_replays_the_best_is_the_verdict():
    # pooled 2.003 and 2.006 (rounded log 2.005): both equal; the better one is served as is
    rep = _report({(0, 1, 2): [[2] * 501 + [1] + [0] * 498], (1, 2, 3): [[2] * 503 + [0] * 497]})
    a, b = (1 + 1003 / 1000), (1 + 1006 / 1000)
    assert a < b and abs(a - 2.005) < ROUNDING and abs(b - 2.005) < ROUNDING
    r = reconcile(_log(al=2.005, rounded=True), rep)
    assert [c.equal for c in r.checks] == [True, True]
    assert r.verdict is Verdict.AS_IS and r.matched == r.best == "serve [L2, L4, L6]"
    # the config's wiring, equal too, is named as the one this engine does not feed
    assert r.said == BestOfTried(
        Logged("vLLM", "2.00 (vLLM 1 log line)"),
        Fed("[L2, L4, L6]", b),
        configured=Fed("[embed, L2, L4]", a),
    )


def test_what_each_verdict_quotes():
    rep = _report({(0, 1, 2): BAD, (1, 2, 3): GOOD})
    log = _log(7, 2)
    r = reconcile(log, rep)
    assert r.said == WorseOfTried(Logged.of(log), TRAIN_BAD, SERVE_GOOD, configured=False)
    assert r.summary == str(r.said)
    log = _log(7, 6)
    r = reconcile(log, rep)
    # every replay, in the report's order, none adaptive
    assert r.said == MatchesNone(Logged.of(log), (TRAIN_BAD, SERVE_GOOD), adaptive=False)
    assert r.said.logged == Logged("vLLM", "1.86 (6 accepted in 7 rounds, vLLM 1 log line)")
    assert r.summary == str(r.said)
    assert r.notes == []
    rep.wirings[0].per_sample[0].bounded[-1] = True
    assert reconcile(_log(7, 6), rep).notes == [
        "some replayed requests end in a round drafted past what their samples hold of the "
        "target's continuation: those accept lengths are lower bounds"
    ]


def test_sglangs_per_request_figure_is_exact_even_where_the_replay_is_a_bound():
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): BAD})
    for wa in rep.wirings:
        for smp in wa.per_sample:
            smp.completion_tokens = 1 + int(smp.emitted.sum())
            smp.bounded[-1] = True  # no continuation: the count is a bound, the tokens are not
    comp = [1 + 3 + 4 + 1 + 2, 1 + 4 + 4 + 2]
    reqs = [
        RequestFigures("r:1", rounds=4, accepted=comp[0] - 4, per_request_figure=True),
        RequestFigures("r:2", rounds=3, accepted=comp[1] - 3, per_request_figure=True),
    ]
    log = _log(7, sum(comp) - 7, engine="sglang", source="requests", figure="spec_accept_length")
    log.requests = reqs
    r = reconcile(log, rep, pairs={0: reqs[0], 1: reqs[1]})
    assert r.checks[0].equal and not r.checks[0].stats.is_bound and r.notes == []


def test_the_serving_config_launches_the_logs_steps():
    rep = _report({(1, 2, 3): GOOD, (0, 1, 2): BAD})
    rep.spec = DraftSpec(5)
    cfg = reconcile(_log(7, 2), rep).serving_config
    assert '"num_speculative_tokens": 5' in cfg["vllm"]["launch"]
    assert "--speculative-num-steps 5" in cfg["sglang"]["launch"]


def test_the_shortfall_is_measured_against_the_configured_wiring():
    # the config names the weaker wiring; the engine falls below both: its rounds are held
    # against the configured one's, not the best's
    rep = _report({(0, 1, 2): MID, (1, 2, 3): GOOD}, starts=[[5, 8, 12, 13], [3, 7, 1500]])
    reqs = {0: RequestFigures("r:1", line=1, per_step_accepted=[1, 0, 0, 0])}
    r = reconcile(_log(4, 1, source="requests"), rep, configured=0, pairs=reqs)
    assert r.verdict is Verdict.ENGINE_FAULT
    assert (r.gap.round, r.gap.replay) == (1, 1)  # MID's round 1 accepts 1 (GOOD's: 3)
    with pytest.raises(ValueError) as e:
        reconcile(_log(), rep)
    assert str(e.value) == "nothing to reconcile: no rounds replayed or no figure logged"


def test_a_serving_config_without_a_pre_norm_verifier_slot():
    rep = _report({(1, 2, 3): GOOD, (0, 1, 2): BAD})
    rep.slots = v1_slot_info([0, 2, 4, None])  # the last slot: the post-norm state
    cfg = reconcile(_log(7, 2), rep).serving_config
    assert cfg is None  # the wiring feeds the post-norm state: no engine captures it
    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): BAD})
    rep.slots = v1_slot_info([0, 2, 4, None])
    cfg = reconcile(_log(7, 2), rep).serving_config
    assert cfg["hf_indices"] == [0, 2, 4]
    assert not any("last layer" in c for c in cfg["vllm"]["caveats"])


def test_a_half_precision_log_is_the_wiring_it_drifts_near():
    """bf16 near-ties move an engine's greedy output, and its figure with it: within HALF_DRIFT
    of one replay and nearer it than half the gap to any other, it is that wiring's; float32
    stays count for count; a figure between two wirings (not twice as near one), or past the
    drift, matches none."""
    from inspector.doctor.reconcile.matching import HALF_DRIFT, near_match

    rep = _report({(0, 1, 2): GOOD, (1, 2, 3): BAD})  # 2.857 and 1.286
    drifted = _log(al=2.80, rounded=True)  # 2% below GOOD's replay
    assert reconcile(drifted, rep).verdict is not Verdict.AS_IS  # float32: no match
    r = reconcile(drifted, rep, engine_dtype="bfloat16")
    assert r.verdict is Verdict.AS_IS and r.matched == "configured [embed, L2, L4]"
    assert any("bfloat16" in n and "8%" in n for n in r.notes)
    good = 1 + 13 / 7
    edge = good * (1 - HALF_DRIFT)
    assert reconcile(_log(al=edge + 1e-6), rep, engine_dtype="float16").matched is not None
    assert reconcile(_log(al=edge - 1e-3), rep, engine_dtype="float16").matched is None
    # halfway: past the drift of either
    checks = reconcile(_log(al=2.06), rep, engine_dtype="bfloat16").checks
    assert near_match(_log(al=2.06), checks) is None
    # a third wiring close by (12 in 7: 2.714): only a figure twice as near one is that one's
    rep3 = _report({(0, 1, 2): GOOD, (1, 2, 3): BAD, (0, 2, 3): [[2, 3, 0, 1], [3, 2, 1]]})
    checks3 = reconcile(_log(al=2.84), rep3, engine_dtype="bfloat16").checks
    assert near_match(_log(al=2.84), checks3).label == "configured [embed, L2, L4]"
    assert near_match(_log(al=2.80), checks3) is None
    assert near_match(_log(al=2.70), checks3).label == "[0, 2, 3]"
