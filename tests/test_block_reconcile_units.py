"""`doctor.reconcile.block`'s verdicts on hand-made block replays and logs (no draft, no
training): which wiring a log equals, round for round or pooled, and what is said where none
does (what the verdict quotes, `Reconciliation.said`; its words are
tests/test_reconcile_words.py's). The CLI over a trained draft is tests/test_block_reconcile.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from inspector.doctor.reconcile.block import (
    BlockReplay,
    block_checks,
    first_departure,
    reconcile_block,
    replays_of,
)
from inspector.doctor.reconcile.result import Gap, Verdict
from inspector.doctor.reconcile.words import (
    BlockAsConfigured,
    BlockNoneEqual,
    BlockOtherLayers,
    Departure,
    OtherLength,
    RoundForRound,
    logged_text,
)
from inspector.doctor.wiring.block_feeds import AcceptRow
from inspector.engines import Engine
from inspector.formats.engine_log import EngineLog, RequestFigures

CONF = AcceptRow("configured", (1, 4, 6), ("vLLM 0.32",))
OTHER = AcceptRow("SGLang 0.5.23", (2, 3, 4), ("SGLang 0.5.23",))
# sample -> accepted per round, blocks of 4 rows (3 drafts a round)
GOOD = {0: [3, 1, 0, 2], 1: [1, 1, 3]}
BAD = {0: [0, 0, 1, 0, 0, 1], 1: [0, 1, 0, 0]}


def _replay(row: AcceptRow, rounds: dict[int, list[int]]) -> BlockReplay:
    return BlockReplay(row, f"{row.name} HF {list(row.layers)}", (0, 1, 2), 3, rounds)


def _requests(rounds: dict[int, list[int]]) -> dict[int, RequestFigures]:
    return {
        i: RequestFigures(f"r.jsonl:{i + 1}", per_step_accepted=list(a)) for i, a in rounds.items()
    }


def _log(rounds: dict[int, list[int]], engine: str = "vllm") -> EngineLog:
    n = sum(len(a) for a in rounds.values())
    acc = sum(sum(a) for a in rounds.values())
    reqs = list(_requests(rounds).values())
    return EngineLog(
        Path("r.jsonl"), engine, "requests", 1 + acc / n, n, acc, lines=len(reqs), requests=reqs
    )


def _pooled(rounds: int, accepted: int) -> EngineLog:
    return EngineLog(Path("vllm.log"), "vllm", "log", 1 + accepted / rounds, rounds, accepted)


REPLAYS = [_replay(CONF, GOOD), _replay(OTHER, BAD)]


def test_a_log_equal_round_for_round_to_the_configured_replay_is_as_is():
    r = reconcile_block(_log(GOOD), REPLAYS, _requests(GOOD), [])
    assert r.verdict is Verdict.AS_IS
    assert r.matched == r.best == r.configured == "configured HF [1, 4, 6]"
    assert r.requests_matched == 2
    assert [c.requests_equal for c in r.checks] == [2, 0]
    assert [c.equal for c in r.checks] == [True, False]
    assert (r.checks[0].stats.rounds, r.checks[0].stats.accepted) == (7, 11)
    assert (r.checks[1].stats.rounds, r.checks[1].stats.accepted) == (10, 3)
    figure = logged_text(r.log)
    assert r.said == BlockAsConfigured(figure, (1, 4, 6), RoundForRound(2, 2))
    assert r.fix is None and r.notes == []


def test_a_log_equal_to_another_wirings_replay_names_it_its_readers_and_the_fix():
    r = reconcile_block(_log(BAD), REPLAYS, _requests(BAD), [])
    assert r.verdict is Verdict.WRONG_WIRING
    assert r.matched == "SGLang 0.5.23 HF [2, 3, 4]"
    assert r.best == "configured HF [1, 4, 6]"
    assert r.said == BlockOtherLayers(
        logged_text(r.log),
        "SGLang 0.5.23",
        (2, 3, 4),
        ("SGLang 0.5.23",),
        (1, 4, 6),
        RoundForRound(2, 2),
    )
    assert r.fix.startswith("feed the trained layers HF [1, 4, 6]: set dflash_config.")
    assert "target_layer_ids to [0, 3, 5] (dflash_config names them already" in r.fix
    assert "fed HF [2, 3, 4]" in r.fix


def test_readers_are_counted_in_words():
    two = AcceptRow("stale", (2, 3, 4), ("vLLM 0.32", "SGLang 0.5.23"))
    r = reconcile_block(_log(BAD), [_replay(CONF, GOOD), _replay(two, BAD)], _requests(BAD), [])
    assert (r.said.name, r.said.fed_by) == ("stale", ("vLLM 0.32", "SGLang 0.5.23"))
    bare = AcceptRow("searched", (2, 3, 4))
    r = reconcile_block(_log(BAD), [_replay(CONF, GOOD), _replay(bare, BAD)], _requests(BAD), [])
    assert (r.said.name, r.said.fed_by, r.said.per_request) == ("searched", (), RoundForRound(2, 2))


def test_weights_trained_elsewhere_are_noted_and_the_fix_feeds_them():
    notes: list[str] = []
    r = reconcile_block(_log(BAD), REPLAYS, _requests(BAD), notes, trained=(2, 3, 4))
    assert r.verdict is Verdict.WRONG_WIRING
    assert (
        r.fix
        == "feed the trained layers HF [2, 3, 4]: set dflash_config.target_layer_ids to [1, 2, 3]"
    )
    assert notes == [
        "the weights fit HF [2, 3, 4], not the configured HF [1, 4, 6] (the doctor's wiring "
        "search): `eagle-inspect doctor` names the fix"
    ]
    assert reconcile_block(_log(GOOD), REPLAYS, _requests(GOOD), [], trained=(1, 4, 6)).notes == []


def test_pooled_counts_without_requests_decide_by_counts():
    r = reconcile_block(_pooled(7, 11), REPLAYS, {}, [])
    assert r.verdict is Verdict.AS_IS and r.requests_matched == 0
    assert [c.requests_equal for c in r.checks] == [None, None]
    assert r.said == BlockAsConfigured(logged_text(r.log), (1, 4, 6), per_request=None)
    r = reconcile_block(_pooled(10, 3), REPLAYS, {}, [])
    assert r.verdict is Verdict.WRONG_WIRING
    assert reconcile_block(_pooled(7, 12), REPLAYS, {}, []).verdict is Verdict.OTHER_DATA


def test_a_request_missing_from_a_replay_counts_as_unequal_and_unpooled():
    pairs = _requests({**GOOD, 5: [1]})
    checks = block_checks(_log(GOOD), REPLAYS, pairs)
    assert [c.requests_equal for c in checks] == [2, 0]
    only = {0: GOOD[0]}
    checks = block_checks(_log(only), REPLAYS, _requests(only))
    # pooled over the paired samples alone
    assert (checks[0].stats.rounds, checks[0].stats.accepted) == (4, 6)
    assert checks[0].equal


def test_a_request_with_pooled_counts_equals_a_replay_with_those_counts():
    req = {
        0: RequestFigures("r:1", rounds=4, accepted=6),
        1: RequestFigures("r:2", rounds=3, accepted=5),
    }
    checks = block_checks(_pooled(7, 11), REPLAYS, req)
    assert [c.requests_equal for c in checks] == [2, 0]
    # SGLang's per-request figure is not a count of accepted drafts: never equal
    sg = {
        i: RequestFigures(f"r:{i}", rounds=r.rounds, accepted=r.accepted, per_request_figure=True)
        for i, r in req.items()
    }
    assert [c.requests_equal for c in block_checks(_pooled(7, 11), REPLAYS, sg)] == [0, 0]
    none = {0: RequestFigures("r:1")}
    assert block_checks(_pooled(7, 11), REPLAYS, none)[0].requests_equal == 0


def test_below_every_replay_is_an_engine_fault_with_the_first_gap_and_known_faults():
    low = {0: [3, 1, 0, 1], 1: [1, 1, 3]}
    notes: list[str] = []
    r = reconcile_block(_log(low), [_replay(CONF, GOOD)], _requests(low), notes)
    assert r.verdict is Verdict.ENGINE_FAULT
    assert (r.gap.sample, r.gap.round, r.gap.engine, r.gap.replay) == (0, 3, 1, 2)
    assert r.gap.request == "r.jsonl:1" and r.gap.position == -1
    # below every replay, departing at the gap, one known fault of vLLM's named in the notes
    assert r.said == BlockNoneEqual(logged_text(r.log), True, Departure(r.gap), 1, "vLLM")
    assert len(notes) == 1 and notes[0].startswith("known: vLLM's CPU build normalises")
    assert r.best == "configured HF [1, 4, 6]" and r.matched is None


def test_above_a_replay_is_other_data_and_an_engine_without_known_faults_names_none():
    high = {0: [3, 3, 3, 3], 1: [1, 1, 3]}
    r = reconcile_block(_log(high, engine="sglang"), REPLAYS, _requests(high), [])
    assert r.verdict is Verdict.OTHER_DATA
    assert (r.said.below, r.said.known) == (False, 0) and r.notes == []
    # below one replay but not the other: still other data
    mid = {0: [1, 0, 0], 1: [0, 1]}
    r = reconcile_block(_log(mid), REPLAYS, _requests(mid), [])
    assert r.verdict is Verdict.OTHER_DATA


def test_the_first_departure_in_sample_order_and_a_run_of_other_length():
    replay = _replay(CONF, GOOD)
    gap, line = first_departure(replay, _requests({1: [1, 0, 3], 0: [3, 1, 0, 0]}))
    assert (gap.sample, gap.round) == (0, 3)
    gap, line = first_departure(replay, _requests({0: [3, 1, 0, 2, 1], 1: [1, 1, 3]}))
    assert gap is None
    assert line == OtherLength("r.jsonl:1", 0, 5, 4)
    assert first_departure(replay, _requests(GOOD)) == (None, None)
    assert first_departure(replay, {0: RequestFigures("r:1")}) == (None, None)
    assert first_departure(replay, _requests({7: [1]})) == (None, None)


def test_replays_of_reads_the_counting_engines_rounds_by_sample():
    w = SimpleNamespace(
        label="x",
        slots=[0, 1, 2],
        block_size=4,
        drafts=None,
        per_sample=[
            {"sample": 3, "accepted_vllm": [1, 2], "accepted_sglang": [9]},
            {"sample": 5, "accepted_vllm": [0], "accepted_sglang": [8]},
        ],
    )
    (r,) = replays_of(SimpleNamespace(wirings=[w]), [CONF], Engine.VLLM)
    assert r.rounds == {3: [1, 2], 5: [0]}
    assert (r.label, r.slots, r.depth, r.row) == ("x", (0, 1, 2), 3, CONF)
    (r,) = replays_of(SimpleNamespace(wirings=[w]), [CONF], Engine.SGLANG)
    assert r.rounds == {3: [9], 5: [8]}
    w.drafts = 5  # a DSpark replay: the log's K drafts, not the block's rows less one
    (r,) = replays_of(SimpleNamespace(wirings=[w]), [CONF], Engine.VLLM)
    assert r.depth == 5


def test_replays_and_wirings_must_pair_one_to_one():
    w = SimpleNamespace(label="x", slots=[0], block_size=4, drafts=None, per_sample=[])
    with pytest.raises(ValueError):
        replays_of(SimpleNamespace(wirings=[w]), [CONF, OTHER], Engine.VLLM)


def test_pooling_skips_unpaired_samples_wherever_they_fall_and_keeps_the_slots():
    only_second = _requests({1: GOOD[1]})
    (check, _) = block_checks(_log({1: GOOD[1]}), REPLAYS, only_second)
    assert (check.stats.rounds, check.stats.accepted) == (3, 5)
    assert check.wiring == (0, 1, 2) and check.label == "configured HF [1, 4, 6]"
    # a paired request the replay lacks, before the one that departs
    replay = _replay(CONF, {1: GOOD[1]})
    gap, _ = first_departure(replay, _requests({0: [1], 1: [1, 0, 3]}))
    assert (gap.sample, gap.round) == (1, 1)


def test_what_the_verdicts_quote():
    r = reconcile_block(_pooled(7, 11), REPLAYS, {}, ["a note"])
    figure = f"2.57 (11 accepted in 7 rounds, {r.log.description})"
    assert r.said == BlockAsConfigured(figure, (1, 4, 6), per_request=None)
    assert r.summary == str(r.said)
    assert r.log.path == Path("vllm.log") and r.notes == ["a note"]
    low = {0: [3, 1, 0, 1], 1: [1, 1, 3]}
    r = reconcile_block(_log(low, engine="sglang"), [_replay(CONF, GOOD)], _requests(low), [])
    gap = Gap("r.jsonl:1", 0, 3, 1, 2, -1)
    # SGLang knows no fault in computing block drafts
    said = BlockNoneEqual("2.43 over 2 requests", True, Departure(gap), 0, "SGLang")
    assert r.said == said and r.summary == str(said)
    high = {0: [3, 3, 3, 3], 1: [1, 1, 3]}
    r = reconcile_block(_log(high, engine="sglang"), REPLAYS, _requests(high), [])
    assert r.said == BlockNoneEqual(
        "3.43 over 2 requests", False, Departure(Gap("r.jsonl:1", 0, 1, 3, 1, -1)), 0, "SGLang"
    )


def test_a_figure_equal_to_the_lowest_replays_but_not_its_counts_is_not_below_it():
    r = reconcile_block(_pooled(14, 22), [_replay(CONF, GOOD)], {}, [])
    assert r.log.accept_length == r.checks[0].stats.accept_length
    assert r.verdict is Verdict.OTHER_DATA


def test_only_the_engines_known_faults_in_block_drafts_are_named(monkeypatch):
    import inspector.doctor.reconcile.block as block

    asked = []

    def facts_for(model_type, drafts=None, topic="layer_ids"):
        asked.append((model_type, drafts, topic))
        if (drafts, topic) != ("dflash", "numerics"):
            return (SimpleNamespace(words="an EAGLE-3 fact", since="x"),)
        return (
            SimpleNamespace(words="one", since="PR 1"),
            SimpleNamespace(words="two", since="PR 2"),
        )

    stub = SimpleNamespace(display="Stub", facts_for=facts_for)
    monkeypatch.setattr(block, "engine", lambda which: stub)
    low = {0: [3, 1, 0, 1], 1: [1, 1, 3]}
    notes: list[str] = []
    r = reconcile_block(_log(low), [_replay(CONF, GOOD)], _requests(low), notes)
    assert asked == [(None, "dflash", "numerics")]
    assert (r.said.known, r.said.engine) == (2, "Stub")
    assert notes == ["known: one (PR 1)", "known: two (PR 2)"]
