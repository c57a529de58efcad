"""Every reconcile verdict's words, in one place: a typed value per sentence, whose fields are what
the sentence quotes (the engine's figure, the wirings named with their figures, the first
shortfall, the counts) and whose str() is the sentence a `Reconciliation` gives as its summary.

The modules that reach a verdict build one of these values (`Reconciliation.said`) and write no
sentence of their own, so a test holds a verdict to its fields and the words are asserted once,
against these values (tests/test_reconcile_words.py). Notes, fixes and fault classes stay with
the rule that finds them.

One module per family of verdicts: `figures` (what every sentence quotes), `greedy`
(`pipeline`'s), `temperature` (`sampled`'s), `sides` (the engine's or the target's side named:
`blame`, `runs`, `hidden_state`, `synthetic`), `block_drafts` (`block`'s)."""

from __future__ import annotations

from inspector.doctor.reconcile.words.block_drafts import (
    BlockAsConfigured,
    BlockNoneEqual,
    BlockOtherLayers,
    Departure,
    OtherLength,
    RoundForRound,
)
from inspector.doctor.reconcile.words.figures import (
    Fed,
    Logged,
    expected_text,
    fmt_figure,
    logged_text,
)
from inspector.doctor.reconcile.words.greedy import (
    AS_IS,
    Adapts,
    BelowEvery,
    BestOfTried,
    Bounded,
    CannotTell,
    Conclusion,
    Config,
    Greedy,
    Matched,
    MatchesNone,
    Trained,
    Undecided,
    WorseOfTried,
)
from inspector.doctor.reconcile.words.sides import (
    BackendWords,
    Blamed,
    GateWords,
    HiddenWords,
    SlotWords,
    Synthetic,
    TargetState,
    WindowsGateWords,
)
from inspector.doctor.reconcile.words.temperature import (
    AtTemperature,
    BelowExpected,
    ExpectedBest,
    ExpectedOther,
    ExpectedTrained,
    Finding,
    FitsNone,
    KnownBuild,
    Shortfall,
)

# every verdict's words: the type of `Reconciliation.said`
Said = (
    Greedy
    | Bounded
    | AtTemperature
    | KnownBuild
    | Blamed
    | TargetState
    | Synthetic
    | BlockAsConfigured
    | BlockOtherLayers
    | BlockNoneEqual
)

__all__ = [
    "AS_IS",
    "Adapts",
    "AtTemperature",
    "BackendWords",
    "BelowEvery",
    "BelowExpected",
    "BestOfTried",
    "Blamed",
    "BlockAsConfigured",
    "BlockNoneEqual",
    "BlockOtherLayers",
    "Bounded",
    "CannotTell",
    "Conclusion",
    "Config",
    "Departure",
    "ExpectedBest",
    "ExpectedOther",
    "ExpectedTrained",
    "Fed",
    "Finding",
    "FitsNone",
    "GateWords",
    "Greedy",
    "HiddenWords",
    "KnownBuild",
    "Logged",
    "Matched",
    "MatchesNone",
    "OtherLength",
    "RoundForRound",
    "Said",
    "Shortfall",
    "SlotWords",
    "Synthetic",
    "TargetState",
    "Trained",
    "Undecided",
    "WindowsGateWords",
    "WorseOfTried",
    "expected_text",
    "fmt_figure",
    "logged_text",
]
