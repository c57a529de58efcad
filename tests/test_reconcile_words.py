"""Every reconcile verdict's words, each sentence shape once and in whole: the one place their prose
is asserted (`doctor.reconcile.words`). The verdicts' own tests hold a verdict to its fields
(`Reconciliation.said` and the rest), never to its words; a word changed here fails here."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from inspector.doctor.reconcile import words as w
from inspector.doctor.reconcile.result import Gap, GateOff, PositionCheck, SlotCheck
from inspector.doctor.reconcile.run_check import RunCheck
from inspector.formats.engine_log import EngineLog, EngineStart
from inspector.metrics.counts import Counts
from inspector.serving.expectation import Expectation


def _log(rounds=None, accepted=None, al=None, requests=0, **kw) -> EngineLog:
    if al is None and rounds:
        al = 1 + accepted / rounds
    log = EngineLog(
        Path("vllm.log"),
        kw.pop("engine", "vllm"),
        kw.pop("source", "log"),
        accept_length=al,
        rounds=rounds,
        accepted=accepted,
        lines=1,
        **kw,
    )
    log.requests = [None] * requests  # counted only
    return log


def _started(log: EngineLog) -> EngineLog:
    log.starts = [EngineStart("vllm.log:16", "0.32.0", "cpu", "eagle3", "draft", 3)]
    return log


# wirings named with their replays' accept lengths (13, 6 and 2 accepted in 7 rounds)
TRAIN = w.Fed("[embed, L2, L4]", 1 + 13 / 7)
MID = w.Fed("[embed, L4, L6]", 1 + 6 / 7)
SERVE = w.Fed("[L2, L4, L6]", 1 + 2 / 7)
MIX = w.Fed("[embed, L2, L6]", None)
VLLM = w.Logged("vLLM", "1.29 (2 accepted in 7 rounds, vLLM 1 log line)")
# at a temperature: a point expectation, one with an interval, one without rounds
POINT = Expectation(10, 2, 2.0, 1.0, (1.5, 0.5, 0.0), None, None, 0.95)
SPREAD = Expectation(10, 7, 7.0, 1.0, (5.0, 2.0, 0.0), 1.5, 1.9, 0.95)
EMPTY = Expectation(0, 0, 0.0, 0.0, (0.0, 0.0, 0.0), None, None, 0.95)
E_TRAIN = w.Fed("[embed, L2, L4]", expected=SPREAD)
E_SERVE = w.Fed("[L2, L4, L6]", expected=POINT)
SETTINGS = "temperature 0.6, vllm-onehot verification"
SAMPLED = w.Logged("vLLM", "1.06 (58 accepted in 1000 rounds, vLLM 1 log line)")
BUILD = w.Logged("vLLM 0.32.0 on cpu (vllm.log:16)", "1.18 (184 accepted in 1000 rounds)")
# server slots: one departing (with and without its drafted tokens and rounds), two equal
SLOT_BAD = SlotCheck(1, 2, 3, 40, 20, 24, 20, True, False)
SLOT_BARE = SlotCheck(1, 2, 3, None, None, 24, 20, True, False)
SLOT_GOOD = SlotCheck(0, 3, 30, 40, 20, 31, 20, False, True)
SLOT_GOOD_2 = SlotCheck(2, 1, 10, None, None, 10, 8, False, True)
# runs of one draft: one departing, one equal to its replay
RUN_BAD = RunCheck(
    "vLLM 0.32.0 on cpu", "/logs/cpu.log", "engine_fault", 1.4, 2.5, 40, 44.0, True, False
)
RUN_GOOD = RunCheck(
    "vLLM 0.32.0 on cuda", "/logs/cuda.log", "as_is", 2.5, 2.5, 40, 0.0, False, True
)
BLOCK_FIGURE = "2.57 (11 accepted in 7 rounds, vLLM 1 log line)"


def test_the_engines_figure_and_an_expectation_as_quoted():
    assert w.logged_text(_log(7, 2)) == "1.29 (2 accepted in 7 rounds, vLLM 1 log line)"
    assert w.logged_text(_log(al=2.005, rounded=True)) == "2.00 (vLLM 1 log line)"
    assert w.logged_text(_log(7, 2, source="requests", requests=2)) == "1.29 over 2 requests"
    assert (
        w.logged_text(
            _log(5, 13, engine="sglang", source="requests", requests=2, figure="spec_accept_length")
        )
        == "spec_accept_length 3.60 over 2 requests"
    )
    assert (
        w.logged_text(EngineLog(Path("i.json"), "sglang", "server-info", accept_length=2.86))
        == "2.86 (SGLang server info)"
    )
    assert w.fmt_figure(None) == "-"
    assert w.expected_text(POINT) == "expected 1.20"
    assert w.expected_text(SPREAD) == "expected 1.70 [1.50, 1.90]"
    assert w.expected_text(EMPTY) == "expected -"
    # an interval with one end only is no interval
    assert w.expected_text(replace(SPREAD, high=None)) == "expected 1.70"
    assert w.expected_text(replace(SPREAD, low=None)) == "expected 1.70"
    assert str(w.Logged.of(_log(7, 2))) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line)"
    )
    assert str(w.Logged.build(_started(_log(7, 2)))) == (
        "vLLM 0.32.0 on cpu (vllm.log:16) logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line)"
    )


def test_the_trained_wiring_beside_the_one_fed_and_the_one_configured():
    assert str(w.Trained(TRAIN, Counts(9, 10), 8, w.Config.TRAINED)) == (
        ", the wiring the weights were trained on (the wiring search: 90.0% step-0 all-tok on 8 "
        "samples)"
    )
    assert str(
        w.Trained(
            TRAIN,
            Counts(9, 10),
            8,
            w.Config.OTHER,
            configured=SERVE,
            configured_accuracy=Counts(3, 10),
        )
    ) == (
        ", the wiring the weights were trained on (the wiring search: 90.0% step-0 all-tok on 8 "
        "samples); note the draft's config names [L2, L4, L6] (1.29, 30.0% step-0), which this "
        "engine does not feed but an engine that reads the config would"
    )
    assert str(
        w.Trained(TRAIN, Counts(9, 10), 8, w.Config.TRAINED, fed=SERVE, fed_accuracy=Counts(3, 10))
    ) == (
        "; the weights were trained on [embed, L2, L4] (the wiring search: 90.0% step-0 all-tok "
        "on 8 samples against 30.0% fed [L2, L4, L6]), which gives 2.86, what its config names"
    )
    assert str(w.Trained(TRAIN, Counts(9, 10), 8, w.Config.NONE, fed=SERVE)) == (
        "; the weights were trained on [embed, L2, L4] (the wiring search: 90.0% step-0 all-tok "
        "on 8 samples), which gives 2.86; the draft's config names no wiring of these slots"
    )
    assert str(w.Trained(TRAIN, None, 8, w.Config.FED, fed=SERVE)) == (
        "; the weights were trained on [embed, L2, L4] (the wiring search: - step-0 all-tok on 8 "
        "samples), which gives 2.86"
    )
    assert str(w.Trained(TRAIN, Counts(9, 10), 8, w.Config.OTHER, fed=SERVE, configured=MIX)) == (
        "; the weights were trained on [embed, L2, L4] (the wiring search: 90.0% step-0 all-tok "
        "on 8 samples), which gives 2.86; the draft's config names [embed, L2, L6] (-)"
    )
    assert str(
        w.Trained(
            TRAIN,
            Counts(9, 10),
            8,
            w.Config.TRAINED,
            fed=SERVE,
            indistinct=("[embed, L2, L6]", "[L2, L4, L6]"),
        )
    ) == (
        "; the weights were trained on [embed, L2, L4] (the wiring search: 90.0% step-0 all-tok "
        "on 8 samples), which gives 2.86, what its config names (or [embed, L2, L6], [L2, L4, "
        "L6]: these samples cannot tell them apart)"
    )
    assert str(w.CannotTell(TRAIN)) == (
        ", which these requests cannot tell from [embed, L2, L4] (2.86), the wiring the evidence "
        "names"
    )


def test_the_greedy_verdicts():
    assert str(w.Matched(VLLM, False, "[L2, L4, L6]", w.CannotTell(TRAIN), w.Conclusion.AS_IS)) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line), exactly what this draft "
        "gives fed [L2, L4, L6], which these requests cannot tell from [embed, L2, L4] (2.86), "
        "the wiring the evidence names: the draft is what it is. More draft steps, a tree "
        "(SGLang's topk > 1) or training data closer to the served traffic raise it"
    )
    assert str(
        w.Matched(VLLM, True, "[L2, L4, L6]", w.CannotTell(TRAIN), w.Conclusion.AS_CONFIGURED)
    ) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line), at most what this draft "
        "gives fed [L2, L4, L6], which these requests cannot tell from [embed, L2, L4] (2.86), "
        "the wiring the evidence names: served as configured, and the draft is what it is. More "
        "draft steps, a tree (SGLang's topk > 1) or training data closer to the served traffic "
        "raise it"
    )
    assert w.Conclusion.WRONG_LAYERS.value == ": your engine feeds the wrong layers"
    assert w.Conclusion.WRONG_CONFIGURED.value == (
        ": your engine feeds the wrong layers, the ones its config names"
    )
    assert str(w.Undecided(VLLM, False, "[L2, L4, L6]", "the witnesses disagree")) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line), exactly what this draft "
        "gives fed [L2, L4, L6]; which wiring the weights were trained on is undecided: the "
        "witnesses disagree"
    )
    assert str(w.Undecided(VLLM, True, "[L2, L4, L6]", "the witnesses disagree")) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line), at most what this draft "
        "gives fed [L2, L4, L6]; which wiring the weights were trained on is undecided: the "
        "witnesses disagree"
    )
    assert str(w.BestOfTried(VLLM, TRAIN)) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line); this draft gives 2.86 when "
        "fed [embed, L2, L4], the wiring it fits best of those tried: the draft is what it is. "
        "More draft steps, a tree (SGLang's topk > 1) or training data closer to the served "
        "traffic raise it"
    )
    assert str(w.BestOfTried(VLLM, TRAIN, configured=SERVE)) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line); this draft gives 2.86 when "
        "fed [embed, L2, L4], the wiring it fits best of those tried: the draft is what it is. "
        "More draft steps, a tree (SGLang's topk > 1) or training data closer to the served "
        "traffic raise it; note the draft's config names [L2, L4, L6] (1.29), which this engine "
        "does not feed"
    )
    assert str(w.WorseOfTried(VLLM, SERVE, TRAIN, configured=True)) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line); this draft gives 1.29 when "
        "fed [L2, L4, L6] and 2.86 when fed [embed, L2, L4], what its config names: your engine "
        "feeds the wrong layers"
    )
    assert str(w.WorseOfTried(VLLM, SERVE, TRAIN, configured=False)) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line); this draft gives 1.29 when "
        "fed [L2, L4, L6] and 2.86 when fed [embed, L2, L4]: your engine feeds the wrong layers"
    )
    assert str(w.BelowEvery(VLLM, MID, TRAIN)) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line), below every wiring's replay "
        "of these requests (lowest 1.86 fed [embed, L4, L6], 2.86 fed [embed, L2, L4]): an "
        "engine-side fault"
    )
    assert str(w.BelowEvery(VLLM, MID, TRAIN, Gap("requests.jsonl:1", 0, 1, 0, 3, 8))) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line), below every wiring's replay "
        "of these requests (lowest 1.86 fed [embed, L4, L6], 2.86 fed [embed, L2, L4]): an "
        "engine-side fault; the first shortfall is request requests.jsonl:1 (sample 0), round 1 "
        "at position 8: the engine accepted 0 where this draft accepts 3"
    )
    assert str(w.MatchesNone(VLLM, (TRAIN, SERVE))) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line), which matches no wiring's "
        "replay (2.86 fed [embed, L2, L4], 1.29 fed [L2, L4, L6]): the samples are not the "
        "requests the engine served (other prompts, sampling or max tokens), or the engine drafts "
        "otherwise than --steps/--topk say"
    )
    assert str(w.MatchesNone(VLLM, (TRAIN,), adaptive=True)) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line), which matches no wiring's "
        "replay (2.86 fed [embed, L2, L4]): the samples are not the requests the engine served "
        "(other prompts, sampling or max tokens), or the engine drafts otherwise than "
        "--steps/--topk say; or, above every replay, an adaptive engine that leaves its rounds "
        "without a draft out of its counts (llama.cpp's p-min): only its per-step drafted counts "
        "(vLLM's per_step_drafted) hold that figure"
    )
    assert str(w.Adapts("vLLM 0.32 log: adaptive draft length", 3)) == (
        "The engine's draft length adapts (vLLM 0.32 log: adaptive draft length): the replay "
        "drafts 3 tokens every round, an upper bound of what the engine drafts and accepts, so "
        "its figure is held to be at most a wiring's replay, not equal to it"
    )
    assert str(w.Bounded(w.BestOfTried(VLLM, TRAIN), w.Adapts("--adaptive", 5))) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line); this draft gives 2.86 when "
        "fed [embed, L2, L4], the wiring it fits best of those tried: the draft is what it is. "
        "More draft steps, a tree (SGLang's topk > 1) or training data closer to the served "
        "traffic raise it. The engine's draft length adapts (--adaptive): the replay drafts 5 "
        "tokens every round, an upper bound of what the engine drafts and accepts, so its figure "
        "is held to be at most a wiring's replay, not equal to it"
    )


def test_the_verdicts_at_a_temperature():
    assert str(w.Shortfall(PositionCheck(1, 0, 1000, 0.4, -30.0), True, SETTINGS)) == (
        "the engine accepted no draft at all (0 of 1,000 rounds at depth 1) where this draft is "
        "expected to accept 40.0% of rounds at depth 1 under temperature 0.6, vllm-onehot "
        "verification: an engine-side fault in verification"
    )
    assert str(w.Shortfall(PositionCheck(2, 0, 1000, 0.2, -15.0), True, SETTINGS)) == (
        "the engine accepted no draft past position 0 (0 of 1,000 rounds at depth 2) where this "
        "draft is expected to accept 20.0% of rounds at depth 2 under temperature 0.6, "
        "vllm-onehot verification: an engine-side fault in verification"
    )
    assert str(w.Shortfall(PositionCheck(2, 50, 1000, 0.2, -6.0), False, SETTINGS)) == (
        "the engine accepted 50 of 1,000 rounds at depth 2 (5.0%) where this draft is expected to "
        "accept 20.0% under temperature 0.6, vllm-onehot verification (z -6.0): an engine-side "
        "fault in verification"
    )
    assert str(
        w.AtTemperature(
            SAMPLED,
            SETTINGS,
            w.ExpectedTrained(
                E_SERVE, w.Trained(E_TRAIN, Counts(9, 10), 8, w.Config.TRAINED, fed=E_SERVE), True
            ),
        )
    ) == (
        "vLLM logged 1.06 (58 accepted in 1000 rounds, vLLM 1 log line) at temperature 0.6, "
        "vllm-onehot verification; that is what this draft is expected to give fed [L2, L4, L6] "
        "(expected 1.20); the weights were trained on [embed, L2, L4] (the wiring search: 90.0% "
        "step-0 all-tok on 8 samples), which gives expected 1.70 [1.50, 1.90], what its config "
        "names: your engine feeds the wrong layers"
    )
    assert str(
        w.AtTemperature(
            SAMPLED,
            SETTINGS,
            w.ExpectedTrained(
                E_TRAIN, w.Trained(E_TRAIN, Counts(9, 10), 8, w.Config.TRAINED), False
            ),
        )
    ) == (
        "vLLM logged 1.06 (58 accepted in 1000 rounds, vLLM 1 log line) at temperature 0.6, "
        "vllm-onehot verification; that is what this draft is expected to give fed [embed, L2, "
        "L4] (expected 1.70 [1.50, 1.90]), the wiring the weights were trained on (the wiring "
        "search: 90.0% step-0 all-tok on 8 samples): the draft is what it is"
    )
    assert str(w.AtTemperature(SAMPLED, SETTINGS, w.ExpectedBest(E_TRAIN))) == (
        "vLLM logged 1.06 (58 accepted in 1000 rounds, vLLM 1 log line) at temperature 0.6, "
        "vllm-onehot verification; this draft is expected 1.70 [1.50, 1.90] when fed [embed, L2, "
        "L4], the wiring it fits best of those tried, and the engine's acceptance at every "
        "position is within the noise of it: the draft is what it is"
    )
    assert str(w.AtTemperature(SAMPLED, SETTINGS, w.ExpectedOther(E_SERVE, E_TRAIN, True))) == (
        "vLLM logged 1.06 (58 accepted in 1000 rounds, vLLM 1 log line) at temperature 0.6, "
        "vllm-onehot verification; that is what this draft is expected to give fed [L2, L4, L6] "
        "(expected 1.20), while fed [embed, L2, L4] it is expected 1.70 [1.50, 1.90], what its "
        "config names: your engine feeds the wrong layers"
    )
    assert str(w.AtTemperature(SAMPLED, SETTINGS, w.ExpectedOther(E_SERVE, E_TRAIN, False))) == (
        "vLLM logged 1.06 (58 accepted in 1000 rounds, vLLM 1 log line) at temperature 0.6, "
        "vllm-onehot verification; that is what this draft is expected to give fed [L2, L4, L6] "
        "(expected 1.20), while fed [embed, L2, L4] it is expected 1.70 [1.50, 1.90]: your engine "
        "feeds the wrong layers"
    )
    assert str(
        w.AtTemperature(
            SAMPLED,
            SETTINGS,
            w.BelowExpected(
                E_TRAIN, w.Shortfall(PositionCheck(2, 0, 1000, 0.2, -15.0), True, SETTINGS)
            ),
        )
    ) == (
        "vLLM logged 1.06 (58 accepted in 1000 rounds, vLLM 1 log line) at temperature 0.6, "
        "vllm-onehot verification, below what every wiring is expected to give on these requests "
        "(expected 1.70 [1.50, 1.90] fed [embed, L2, L4]); the engine accepted no draft past "
        "position 0 (0 of 1,000 rounds at depth 2) where this draft is expected to accept 20.0% "
        "of rounds at depth 2 under temperature 0.6, vllm-onehot verification: an engine-side "
        "fault in verification"
    )
    assert str(w.AtTemperature(SAMPLED, SETTINGS, w.BelowExpected(E_TRAIN))) == (
        "vLLM logged 1.06 (58 accepted in 1000 rounds, vLLM 1 log line) at temperature 0.6, "
        "vllm-onehot verification, below what every wiring is expected to give on these requests "
        "(expected 1.70 [1.50, 1.90] fed [embed, L2, L4]): an engine-side fault in verification"
    )
    assert str(w.AtTemperature(SAMPLED, SETTINGS, w.FitsNone((E_TRAIN, E_SERVE)))) == (
        "vLLM logged 1.06 (58 accepted in 1000 rounds, vLLM 1 log line) at temperature 0.6, "
        "vllm-onehot verification, which fits no wiring's expectation (expected 1.70 [1.50, 1.90] "
        "fed [embed, L2, L4], expected 1.20 fed [L2, L4, L6]): the requests, the sampling "
        "settings or the verification rule are not the engine's (--temperature, --top-k, --top-p, "
        "--verify)"
    )
    assert str(
        w.KnownBuild(
            BUILD,
            SETTINGS,
            "the fault",
            w.ExpectedTrained(
                E_SERVE, w.Trained(E_TRAIN, Counts(9, 10), 8, w.Config.TRAINED, fed=E_SERVE), True
            ),
        )
    ) == (
        "vLLM 0.32.0 on cpu (vllm.log:16) logged 1.18 (184 accepted in 1000 rounds) at "
        "temperature 0.6, vllm-onehot verification: this build is known to verify wrong at a "
        "temperature, as the fault, so the figure says nothing about the draft; by chance it lies "
        "within the noise of what this draft is expected to give fed [L2, L4, L6] (expected 1.20)"
    )
    assert str(w.KnownBuild(BUILD, SETTINGS, "the fault", w.ExpectedBest(E_TRAIN))) == (
        "vLLM 0.32.0 on cpu (vllm.log:16) logged 1.18 (184 accepted in 1000 rounds) at "
        "temperature 0.6, vllm-onehot verification: this build is known to verify wrong at a "
        "temperature, as the fault, so the figure says nothing about the draft; by chance it lies "
        "within the noise of what this draft is expected to give fed [embed, L2, L4] (expected "
        "1.70 [1.50, 1.90])"
    )
    assert str(
        w.KnownBuild(BUILD, SETTINGS, "the fault", w.ExpectedOther(E_SERVE, E_TRAIN, True))
    ) == (
        "vLLM 0.32.0 on cpu (vllm.log:16) logged 1.18 (184 accepted in 1000 rounds) at "
        "temperature 0.6, vllm-onehot verification: this build is known to verify wrong at a "
        "temperature, as the fault, so the figure says nothing about the draft; by chance it lies "
        "within the noise of what this draft is expected to give fed [L2, L4, L6] (expected "
        "1.20), which alone would read as the wrong layers fed (fed [embed, L2, L4] it is "
        "expected 1.70 [1.50, 1.90])"
    )
    assert str(w.KnownBuild(BUILD, SETTINGS, "the fault", w.BelowExpected(E_TRAIN))) == (
        "vLLM 0.32.0 on cpu (vllm.log:16) logged 1.18 (184 accepted in 1000 rounds) at "
        "temperature 0.6, vllm-onehot verification: this build is known to verify wrong at a "
        "temperature, as the fault, so the figure says nothing about the draft; it is below what "
        "every wiring is expected to give on these requests (expected 1.70 [1.50, 1.90] fed "
        "[embed, L2, L4]): an engine-side fault in verification"
    )
    assert str(w.KnownBuild(BUILD, SETTINGS, "the fault", w.FitsNone((E_TRAIN, E_SERVE)))) == (
        "vLLM 0.32.0 on cpu (vllm.log:16) logged 1.18 (184 accepted in 1000 rounds) at "
        "temperature 0.6, vllm-onehot verification: this build is known to verify wrong at a "
        "temperature, as the fault, so the figure says nothing about the draft; it fits no "
        "wiring's expectation (expected 1.70 [1.50, 1.90] fed [embed, L2, L4], expected 1.20 fed "
        "[L2, L4, L6])"
    )


def test_the_engines_or_the_targets_side_named():
    assert str(
        w.Blamed(
            VLLM,
            w.GateWords(
                GateOff("r:3", 2, 4, 120, 3, 9, 0, 9, 18, 2.5, 2.4, 3.0), "vLLM", "token ids"
            ),
        )
    ) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line); from round 4 at position 120 "
        "of request r:3 (sample 2) on, vLLM accepted nothing (9 rounds, accept length exactly "
        "1.00, over 3 requests), where this draft's replay of those rounds accepts 18 tokens in 9 "
        "rounds (accept length 3.00); before it the engine's accept length was 2.50, the replay's "
        "2.40: speculation was switched off part-way on the engine's side (a gate such as "
        "TensorRT-LLM's SpeculationGate, which turns it off for good once the rolling accept "
        "length falls below its threshold), not the draft's wiring or weights (requests paired by "
        "token ids)"
    )
    assert str(
        w.GateWords(
            GateOff("r:3", 2, None, None, 3, None, 0, 9, 18, 2.5, 2.4, 3.0), "vLLM", "order"
        )
    ) == (
        "from request r:3 (sample 2) on, vLLM accepted nothing (accept length exactly 1.00, over "
        "3 requests), where this draft's replay of those rounds accepts 18 tokens in 9 rounds "
        "(accept length 3.00); before it the engine's accept length was 2.50, the replay's 2.40: "
        "speculation was switched off part-way on the engine's side (a gate such as "
        "TensorRT-LLM's SpeculationGate, which turns it off for good once the rolling accept "
        "length falls below its threshold), not the draft's wiring or weights (requests paired by "
        "order)"
    )
    assert str(
        w.GateWords(GateOff("r:3", 2, None, 40, 2, 0, 0, 9, 18, 2.5, 2.4, 3.0), "vLLM", "order")
    ) == (
        "from request r:3 (sample 2) on, vLLM drafted nothing (2 requests without a drafted "
        "round), where this draft's replay of those rounds accepts 18 tokens in 9 rounds (accept "
        "length 3.00); before it the engine's accept length was 2.50, the replay's 2.40: "
        "speculation was switched off part-way on the engine's side (a gate such as "
        "TensorRT-LLM's SpeculationGate, which turns it off for good once the rolling accept "
        "length falls below its threshold), not the draft's wiring or weights (requests paired by "
        "order)"
    )
    assert str(
        w.WindowsGateWords(
            GateOff(
                "sglang.log:40",
                None,
                None,
                None,
                0,
                None,
                0,
                160,
                240,
                2.45,
                2.5,
                2.5,
                windows_after=4,
            ),
            "SGLang",
            40,
        )
    ) == (
        "from the window logged at sglang.log:40 on, SGLang printed accept len 1.00 in every line "
        "(4 lines, 40 decode iterations each), where this draft's replay of these requests gives "
        "2.50 (about 240 tokens over the 160 rounds those lines cover at the least); before it "
        "the lines pool to 2.45, the replay's 2.50: speculation was switched off part-way on the "
        "engine's side (a gate such as TensorRT-LLM's SpeculationGate, which turns it off for "
        "good once the rolling accept length falls below its threshold), not the draft's wiring "
        "or weights (windowed lines: held against the replay of every sample)"
    )
    assert str(
        w.WindowsGateWords(
            GateOff(
                "sglang.log:40", None, None, None, 0, None, 0, 4, 6, 2.45, 2.5, 2.5, windows_after=4
            ),
            "SGLang",
            None,
        )
    ) == (
        "from the window logged at sglang.log:40 on, SGLang printed accept len 1.00 in every line "
        "(4 lines, decode_log_interval not stated), where this draft's replay of these requests "
        "gives 2.50 (about 6 tokens over the 4 rounds those lines cover at the least); before it "
        "the lines pool to 2.45, the replay's 2.50: speculation was switched off part-way on the "
        "engine's side (a gate such as TensorRT-LLM's SpeculationGate, which turns it off for "
        "good once the rolling accept length falls below its threshold), not the draft's wiring "
        "or weights (windowed lines: held against the replay of every sample)"
    )
    assert str(
        w.SlotWords(SLOT_BAD, (SLOT_GOOD,), (), "llama.cpp", "llama-server's task order")
    ) == (
        "slot 1: 3 of 40 drafted tokens accepted over 2 requests (accept length 1.15, the "
        "replay's 2.20), where the replay of those requests accepts 24; slot 0 equals the replay "
        "(accept length 2.50, the replay's 2.55, 3 requests): one server slot of llama.cpp "
        "departs from the rest, an engine-side fault, not the draft's wiring or weights (the same "
        "draft serves the other slot as replayed; requests paired by llama-server's task order)"
    )
    assert str(w.SlotWords(SLOT_BARE, (SLOT_GOOD, SLOT_GOOD_2), (3,), "llama.cpp", "order")) == (
        "slot 1: 3 tokens accepted over 2 requests (the replay's 2.20), where the replay of those "
        "requests accepts 24; slot 0 equals the replay (accept length 2.50, the replay's 2.55, 3 "
        "requests); slot 2 equals the replay (the replay's 2.25, 1 requests); slot 3 depart too: "
        "one server slot of llama.cpp departs from the rest, an engine-side fault, not the "
        "draft's wiring or weights (the same draft serves the other slot as replayed; requests "
        "paired by order)"
    )
    assert str(w.SlotWords(SLOT_BARE, (SLOT_GOOD,), (3, 4), "llama.cpp", "order")) == (
        "slot 1: 3 tokens accepted over 2 requests (the replay's 2.20), where the replay of those "
        "requests accepts 24; slot 0 equals the replay (accept length 2.50, the replay's 2.55, 3 "
        "requests); slots 3, 4 depart too: one server slot of llama.cpp departs from the rest, an "
        "engine-side fault, not the draft's wiring or weights (the same draft serves the other "
        "slot as replayed; requests paired by order)"
    )
    assert str(w.Blamed(VLLM, w.BackendWords(RUN_BAD, (RUN_GOOD,), "[embed, L2, L4]"))) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line); vLLM 0.32.0 on cpu departs "
        "from this draft's replay of the same requests fed [embed, L2, L4]: accept length 1.40 "
        "against the replay's 2.50 (about 44 accepted tokens short over 40 rounds), while vLLM "
        "0.32.0 on cuda (cuda.log) logged 2.50, the replay of its requests 2.50: the same draft "
        "equals its replay served on another backend or build, so the shortfall is vLLM 0.32.0 on "
        "cpu's backend or build, not the draft's wiring or weights"
    )
    # two runs equal their replays: both named, one after the other
    other = replace(RUN_GOOD, run="vLLM 0.32.0 on rocm", path="/logs/rocm.log")
    assert "2.50; vLLM 0.32.0 on rocm (rocm.log) logged 2.50" in str(
        w.BackendWords(RUN_BAD, (RUN_GOOD, other), "[embed, L2, L4]")
    )
    assert str(
        w.TargetState(VLLM, w.HiddenWords("[embed, L2, L4]", 2.86, 12.4, 7, "hc_mult 4", 0.08))
    ) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line), about 1.0 (at most 8% above "
        "it), where this draft's replay of the same requests fed [embed, L2, L4] gives 2.86 "
        "(about 12 accepted tokens more over 7 rounds): the target declares hyper-connections, "
        "hc_mult 4, and the state the engine hands the draft from such a target is not the one it "
        "was trained on (its streams flattened or reduced otherwise), so the shortfall is the "
        "target's hidden state as the engine feeds it, not the draft's wiring or weights"
    )
    assert str(
        w.Synthetic(
            VLLM, "SGLANG_SIMULATE_ACC_LEN=2.5", 2.5, 0.0523, 12000, "SGLANG_SIMULATE_ACC_LEN unset"
        )
    ) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line), what its synthetic "
        "acceptance gives (SGLANG_SIMULATE_ACC_LEN=2.5: expected 2.500 +- 0.052 over 12,000 "
        "draws): the engine ran with synthetic acceptance, it accepted drafted tokens by a coin, "
        "not by the target, so the figure says nothing about the draft and no wiring is blamed. "
        "Serve without it (SGLANG_SIMULATE_ACC_LEN unset) to measure the draft"
    )
    assert str(
        w.Synthetic(
            VLLM, "SGLANG_SIMULATE_ACC_LEN=2.5", 2.5, 0.0523, None, "SGLANG_SIMULATE_ACC_LEN unset"
        )
    ) == (
        "vLLM logged 1.29 (2 accepted in 7 rounds, vLLM 1 log line), what its synthetic "
        "acceptance gives (SGLANG_SIMULATE_ACC_LEN=2.5: expected 2.500 +- 0.052): the engine ran "
        "with synthetic acceptance, it accepted drafted tokens by a coin, not by the target, so "
        "the figure says nothing about the draft and no wiring is blamed. Serve without it "
        "(SGLANG_SIMULATE_ACC_LEN unset) to measure the draft"
    )


def test_a_block_drafts_verdicts():
    assert str(w.BlockAsConfigured(BLOCK_FIGURE, (1, 4, 6))) == (
        "the engine's figure 2.57 (11 accepted in 7 rounds, vLLM 1 log line) equals the replay of "
        "the configured wiring HF [1, 4, 6]: the draft is served as configured"
    )
    assert str(w.BlockAsConfigured(BLOCK_FIGURE, (1, 4, 6), w.RoundForRound(2, 2))) == (
        "the engine's figure 2.57 (11 accepted in 7 rounds, vLLM 1 log line) equals the replay of "
        "the configured wiring HF [1, 4, 6] (2 of 2 requests round for round): the draft is "
        "served as configured"
    )
    assert str(
        w.BlockOtherLayers(
            BLOCK_FIGURE,
            "SGLang 0.5.23",
            (2, 3, 4),
            ("SGLang 0.5.23",),
            (1, 4, 6),
            w.RoundForRound(2, 2),
        )
    ) == (
        "the engine's figure 2.57 (11 accepted in 7 rounds, vLLM 1 log line) equals the replay of "
        "SGLang 0.5.23 HF [2, 3, 4], what SGLang 0.5.23 feeds (2 of 2 requests round for round), "
        "not the configured HF [1, 4, 6]: the engine fed the draft other layers"
    )
    assert str(
        w.BlockOtherLayers(
            BLOCK_FIGURE, "stale", (2, 3, 4), ("vLLM 0.32", "SGLang 0.5.23"), (1, 4, 6)
        )
    ) == (
        "the engine's figure 2.57 (11 accepted in 7 rounds, vLLM 1 log line) equals the replay of "
        "stale HF [2, 3, 4], what vLLM 0.32, SGLang 0.5.23 feed, not the configured HF [1, 4, 6]: "
        "the engine fed the draft other layers"
    )
    assert str(w.BlockOtherLayers(BLOCK_FIGURE, "searched", (2, 3, 4), (), (1, 4, 6))) == (
        "the engine's figure 2.57 (11 accepted in 7 rounds, vLLM 1 log line) equals the replay of "
        "searched HF [2, 3, 4], not the configured HF [1, 4, 6]: the engine fed the draft other "
        "layers"
    )
    assert str(
        w.BlockNoneEqual(
            BLOCK_FIGURE, True, w.Departure(Gap("r.jsonl:1", 0, 3, 1, 2, -1)), 1, "vLLM"
        )
    ) == (
        "the engine's figure 2.57 (11 accepted in 7 rounds, vLLM 1 log line) is below every "
        "wiring's replay: the engine accepts less than this draft does on these requests (an "
        "engine-side fault); against the configured wiring, request r.jsonl:1 (sample 0) departs "
        "at round 3: the engine accepted 1, the replay 2; 1 known fault of vLLM in computing "
        "block drafts, in the notes"
    )
    assert str(
        w.BlockNoneEqual(BLOCK_FIGURE, False, w.OtherLength("r.jsonl:1", 0, 5, 4), 2, "vLLM")
    ) == (
        "the engine's figure 2.57 (11 accepted in 7 rounds, vLLM 1 log line) is equal to no "
        "wiring's replay: not the requests the samples hold, or a draft the engine computes "
        "otherwise; against the configured wiring, request r.jsonl:1 (sample 0) runs 5 rounds, "
        "the replay 4; 2 known faults of vLLM in computing block drafts, in the notes"
    )
    assert str(w.BlockNoneEqual(BLOCK_FIGURE, False, None, 0, "SGLang")) == (
        "the engine's figure 2.57 (11 accepted in 7 rounds, vLLM 1 log line) is equal to no "
        "wiring's replay: not the requests the samples hold, or a draft the engine computes "
        "otherwise"
    )


def test_the_trained_clause_is_built_from_the_search_and_the_three_wirings():
    """`Trained.of`: which wiring the config names is read by identity against the search's best
    and the one fed; each wiring's accuracy is the search's for that wiring."""
    from types import SimpleNamespace

    acc = {(0, 1, 2): Counts(7, 10), (1, 2, 3): Counts(3, 10), (0, 2, 3): Counts(5, 10)}
    t = SimpleNamespace(samples=[0, 1, 2, 3], all_tok_of=lambda wiring: acc[wiring])
    best, fed, third = (SimpleNamespace(wiring=k) for k in acc)
    as_fed = {id(best): E_TRAIN, id(fed): E_SERVE, id(third): w.Fed("[embed, L4, L6]", 1.5)}

    def name(check):
        return as_fed[id(check)]

    same = w.Trained.of(t, best, best, best, name)
    assert same == w.Trained(E_TRAIN, Counts(7, 10), 4, w.Config.TRAINED)
    other = w.Trained.of(t, fed, best, third, name, indistinct=["[embed, L2, L6]"])
    assert other == w.Trained(
        E_TRAIN,
        Counts(7, 10),
        4,
        w.Config.OTHER,
        fed=E_SERVE,
        fed_accuracy=Counts(3, 10),
        configured=w.Fed("[embed, L4, L6]", 1.5),
        configured_accuracy=Counts(5, 10),
        indistinct=("[embed, L2, L6]",),
    )
    assert w.Trained.of(t, fed, best, fed, name).config is w.Config.FED
    assert w.Trained.of(t, fed, best, None, name).config is w.Config.NONE
