"""The words of the greedy verdicts (`pipeline`): the figure a wiring's replay, held to the trained
wiring the wiring search names (`Trained`) or the best of those tried; below every replay; matching
none; and the bound an adaptive engine's replay is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from inspector.doctor.reconcile.result import Gap, WiringCheck
from inspector.doctor.reconcile.words.figures import Fed, Logged
from inspector.doctor.wiring.trained import TrainedWiring, pct_of
from inspector.engines import Engine
from inspector.metrics.counts import Counts

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP, _SGLANG, _VLLM = (
    Engine.LLAMACPP.display,
    Engine.SGLANG.display,
    Engine.VLLM.display,
)

# what raises the figure of a draft served as it was trained
AS_IS = (
    f"the draft is what it is. More draft steps, a tree ({_SGLANG}'s topk > 1) or training data "
    "closer to the served traffic raise it"
)


def _exactly(bounded: bool) -> str:
    return "at most what" if bounded else "exactly what"


class Config(Enum):
    """What the draft's config names, beside the trained wiring and the one fed."""

    TRAINED = "trained"  # the trained wiring
    FED = "fed"  # the wiring fed, not the trained one
    OTHER = "other"  # a third wiring (`Trained.configured`)
    NONE = "none"  # no wiring of these slots


@dataclass(frozen=True)
class Trained:
    """The clause naming the wiring the weights were trained on (the wiring search's, with its
    step-0 all-tok accuracy over `samples`) beside the one the engine fed (`fed`; None: it fed
    the trained one) and the one the config names; `indistinct`: the neighbours these samples
    cannot tell from the trained one, where the evidence beat the configured wiring."""

    trained: Fed
    accuracy: Counts | None
    samples: int
    config: Config
    fed: Fed | None = None
    fed_accuracy: Counts | None = None  # None: the search dropped the fed wiring, or never had it
    configured: Fed | None = None  # Config.OTHER's wiring
    configured_accuracy: Counts | None = None
    indistinct: tuple[str, ...] | None = None  # None: the evidence tells the trained one apart

    @classmethod
    def of(
        cls,
        t: TrainedWiring,
        fed: WiringCheck,
        best: WiringCheck,
        conf: WiringCheck | None,
        as_fed: Callable[[WiringCheck], Fed],
        indistinct: Sequence[str] | None = None,
    ) -> Trained:
        """The clause for the engine fed `fed`, the search naming `best` and the config `conf`;
        `as_fed`: how a check is named with its figure."""
        if conf is None:
            config = Config.NONE
        elif conf is best:
            config = Config.TRAINED
        elif conf is fed:
            config = Config.FED
        else:
            config = Config.OTHER
        other = conf if config is Config.OTHER else None
        return cls(
            as_fed(best),
            t.all_tok_of(best.wiring),
            len(t.samples),
            config,
            fed=None if fed is best else as_fed(fed),
            fed_accuracy=None if fed is best else t.all_tok_of(fed.wiring),
            configured=as_fed(other) if other is not None else None,
            configured_accuracy=t.all_tok_of(other.wiring) if other is not None else None,
            indistinct=tuple(indistinct) if indistinct is not None else None,
        )

    def __str__(self) -> str:
        search = (
            f"the wiring search: {pct_of(self.accuracy)} step-0 all-tok on {self.samples} samples"
        )
        c = self.configured
        if self.fed is None:
            out = f", the wiring the weights were trained on ({search})"
            if c is not None:
                out += (
                    f"; note the draft's config names {c.label} ({c.figure}, "
                    f"{pct_of(self.configured_accuracy)} step-0), which this engine does not feed "
                    "but an engine that reads the config would"
                )
        else:
            against = (
                f" against {pct_of(self.fed_accuracy)} fed {self.fed.label}"
                if self.fed_accuracy is not None
                else ""
            )
            out = (
                f"; the weights were trained on {self.trained.label} ({search}{against}), which "
                f"gives {self.trained.figure}"
            )
            if self.config is Config.TRAINED:
                out += ", what its config names"
            elif self.config is Config.NONE:
                out += "; the draft's config names no wiring of these slots"
            elif c is not None:
                out += f"; the draft's config names {c.label} ({c.figure})"
        if self.indistinct is not None:
            out += f" (or {', '.join(self.indistinct)}: these samples cannot tell them apart)"
        return out


@dataclass(frozen=True)
class CannotTell:
    """The wiring fed is within noise of `trained`, the one the evidence names."""

    trained: Fed

    def __str__(self) -> str:
        t = self.trained
        return (
            f", which these requests cannot tell from {t.label} ({t.figure}), the wiring the "
            "evidence names"
        )


class Conclusion(Enum):
    """How a figure that is a wiring's replay ends, the trained wiring named."""

    WRONG_LAYERS = ": your engine feeds the wrong layers"
    WRONG_CONFIGURED = ": your engine feeds the wrong layers, the ones its config names"
    AS_CONFIGURED = ": served as configured, and " + AS_IS
    AS_IS = ": " + AS_IS


@dataclass(frozen=True)
class Matched:
    """The figure is the replay of `fed` (at most it, `bounded`), held to the trained wiring."""

    logged: Logged
    bounded: bool
    fed: str
    trained: Trained | CannotTell
    conclusion: Conclusion

    def __str__(self) -> str:
        return (
            f"{self.logged}, {_exactly(self.bounded)} this draft gives fed {self.fed}"
            f"{self.trained}{self.conclusion.value}"
        )


@dataclass(frozen=True)
class Undecided:
    """The figure is the replay of `fed`, but the witnesses disagree on the trained wiring:
    `why`, the settlement's reason and what would settle it."""

    logged: Logged
    bounded: bool
    fed: str
    why: str

    def __str__(self) -> str:
        return (
            f"{self.logged}, {_exactly(self.bounded)} this draft gives fed {self.fed}; which "
            f"wiring the weights were trained on is undecided: {self.why}"
        )


@dataclass(frozen=True)
class BestOfTried:
    """No search ran and the figure is the best replay of those tried; `configured`: the
    config's wiring where the engine fed another."""

    logged: Logged
    fed: Fed
    configured: Fed | None = None

    def __str__(self) -> str:
        f, c = self.fed, self.configured
        out = (
            f"{self.logged}; this draft gives {f.figure} when fed {f.label}, the wiring it fits "
            "best of those tried: " + AS_IS
        )
        if c is not None:
            out += (
                f"; note the draft's config names {c.label} ({c.figure}), which this engine does "
                "not feed"
            )
        return out


@dataclass(frozen=True)
class WorseOfTried:
    """No search ran and the figure is a replay below the best one's (`configured`: the best
    is the wiring the config names)."""

    logged: Logged
    fed: Fed
    best: Fed
    configured: bool

    def __str__(self) -> str:
        f, b = self.fed, self.best
        return (
            f"{self.logged}; this draft gives {f.figure} when fed {f.label} and {b.figure} when "
            f"fed {b.label}"
            + (", what its config names" if self.configured else "")
            + ": your engine feeds the wrong layers"
        )


@dataclass(frozen=True)
class BelowEvery:
    """The figure lies below every replay (`lowest`; `reference`, the one the shortfall is
    measured against): the engine's side, with its first shortfall where requests paired."""

    logged: Logged
    lowest: Fed
    reference: Fed
    first: Gap | None = None

    def __str__(self) -> str:
        low, ref = self.lowest, self.reference
        out = (
            f"{self.logged}, below every wiring's replay of these requests (lowest {low.figure} "
            f"fed {low.label}, {ref.figure} fed {ref.label}): an engine-side fault"
        )
        g = self.first
        if g is not None:
            out += (
                f"; the first shortfall is request {g.request} (sample {g.sample}), round "
                f"{g.round} at position {g.position}: the engine accepted {g.engine} where "
                f"this draft accepts {g.replay}"
            )
        return out


@dataclass(frozen=True)
class MatchesNone:
    """The figure matches no replay and is not below them all (`adaptive`: the engine's draft
    length adapts, so its draftless rounds may be uncounted)."""

    logged: Logged
    replays: tuple[Fed, ...]
    adaptive: bool = False

    def __str__(self) -> str:
        every = ", ".join(f"{r.figure} fed {r.label}" for r in self.replays)
        out = (
            f"{self.logged}, which matches no wiring's replay ({every}): the samples are not the "
            "requests the engine served (other prompts, sampling or max tokens), or the engine "
            "drafts otherwise than --steps/--topk say"
        )
        if self.adaptive:
            # rounds without a draft are no draft to vLLM or llama.cpp (scheduler.py,
            # common/speculative.cpp): counted over the rounds it drafted in, an engine
            # that skips the unsure ones can log more than a fixed-K replay
            out += (
                "; or, above every replay, an adaptive engine that leaves its rounds without a "
                f"draft out of its counts ({_LLAMACPP}'s p-min): only its per-step drafted "
                f"counts ({_VLLM}'s per_step_drafted) hold that figure"
            )
        return out


@dataclass(frozen=True)
class Adapts:
    """The engine's draft length adapts (`reason`) and its log gives no schedule: the replay at
    `steps` a round is an upper bound of its figure (a note, and the summary's last sentence)."""

    reason: str
    steps: int

    def __str__(self) -> str:
        return (
            f"The engine's draft length adapts ({self.reason}): the replay drafts {self.steps} "
            "tokens every round, an upper bound of what the engine drafts and accepts, so its "
            "figure is held to be at most a wiring's replay, not equal to it"
        )


# a greedy verdict's words
Greedy = Matched | Undecided | BestOfTried | WorseOfTried | BelowEvery | MatchesNone


@dataclass(frozen=True)
class Bounded:
    """A greedy verdict's words (`said`) with the bound its replay is (`adapts`)."""

    said: Greedy
    adapts: Adapts

    def __str__(self) -> str:
        return f"{self.said}. {self.adapts}"
