"""The words that name the side at fault, not the draft's: a gate or a server slot (`blame`), a
run's backend or build (`runs`), the target's hidden state (`hidden_state`), and the engine's
synthetic acceptance (`synthetic`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inspector.doctor.reconcile.result import GateOff, SlotCheck
from inspector.doctor.reconcile.run_check import RunCheck
from inspector.doctor.reconcile.words.figures import Logged, fmt_figure

# the end of the words that name the engine's side, not the draft's (a gate)
_GATE = (
    "speculation was switched off part-way on the engine's side (a gate such as TensorRT-LLM's "
    "SpeculationGate, which turns it off for good once the rolling accept length falls below its "
    "threshold), not the draft's wiring or weights"
)


@dataclass(frozen=True)
class GateWords:
    """From `gate`'s point on the engine (`engine`) accepted or drafted nothing (`how`: how its
    requests were paired with samples)."""

    gate: GateOff
    engine: str
    how: str

    def __str__(self) -> str:
        g = self.gate
        at = f"round {g.round} at position {g.position} of " if g.round is not None else ""
        if g.engine_rounds_after == 0:
            what = f"drafted nothing ({g.requests_after} requests without a drafted round)"
        else:
            n = f"{g.engine_rounds_after} rounds, " if g.engine_rounds_after else ""
            what = f"accepted nothing ({n}accept length exactly 1.00, over {g.requests_after} requests)"
        return (
            f"from {at}request {g.request} (sample {g.sample}) on, {self.engine} {what}, where "
            f"this draft's replay of those rounds accepts {g.replay_accepted_after} tokens in "
            f"{g.replay_rounds_after} rounds (accept length "
            f"{fmt_figure(g.replay_accept_length_after)}); before it the engine's accept length "
            f"was {fmt_figure(g.engine_accept_length_before)}, the replay's "
            f"{fmt_figure(g.replay_accept_length_before)}: {_GATE} (requests paired by {self.how})"
        )


@dataclass(frozen=True)
class WindowsGateWords:
    """From `gate`'s window on, a windowed log's lines all print accept len 1.00 (`interval`:
    the decode iterations a line covers; None: not stated)."""

    gate: GateOff
    engine: str
    interval: int | None

    def __str__(self) -> str:
        g = self.gate
        span = (
            f"{self.interval} decode iterations each"
            if self.interval
            else "decode_log_interval not stated"
        )
        al_r = fmt_figure(g.replay_accept_length_before)
        return (
            f"from the window logged at {g.request} on, {self.engine} printed accept len 1.00 in "
            f"every line ({g.windows_after} lines, {span}), where this draft's replay of these "
            f"requests gives {al_r} (about {g.replay_accepted_after} tokens over the "
            f"{g.replay_rounds_after} rounds those lines cover at the least); before it the lines "
            f"pool to {fmt_figure(g.engine_accept_length_before)}, the replay's {al_r}: {_GATE} "
            "(windowed lines: held against the replay of every sample)"
        )


@dataclass(frozen=True)
class SlotWords:
    """One server slot (`worst`) departs while others (`equal`) equal the replay; `also`: the
    other slots that depart."""

    worst: SlotCheck
    equal: tuple[SlotCheck, ...]
    also: tuple[int, ...]
    engine: str
    how: str

    def __str__(self) -> str:
        w = self.worst
        drafted = f" of {w.engine_drafted} drafted" if w.engine_drafted is not None else ""

        def al(c: SlotCheck) -> str:
            x = c.engine_accept_length
            return f"accept length {fmt_figure(x)}, " if x is not None else ""

        out = (
            f"slot {w.slot}: {w.engine_accepted}{drafted} tokens accepted over {w.requests} "
            f"requests ({al(w)}the replay's {fmt_figure(w.replay_accept_length)}), where the "
            f"replay of those requests accepts {w.replay_accepted}; "
            + "; ".join(
                f"slot {c.slot} equals the replay ({al(c)}the replay's "
                f"{fmt_figure(c.replay_accept_length)}, {c.requests} requests)"
                for c in self.equal
            )
        )
        if self.also:
            s = "s" if len(self.also) > 1 else ""
            out += f"; slot{s} {', '.join(map(str, self.also))} depart too"
        return out + (
            f": one server slot of {self.engine} departs from the rest, an engine-side fault, "
            "not the draft's wiring or weights (the same draft serves the other slot as "
            f"replayed; requests paired by {self.how})"
        )


@dataclass(frozen=True)
class BackendWords:
    """One run (`bad`) departs from the replay of its requests fed `fed` while others (`equal`)
    equal theirs: its backend or build."""

    bad: RunCheck
    equal: tuple[RunCheck, ...]
    fed: str

    def __str__(self) -> str:
        b = self.bad
        matching = "; ".join(
            f"{c.run} ({Path(c.path).name}) logged {fmt_figure(c.engine_accept_length)}, the "
            f"replay of its requests {fmt_figure(c.replay_accept_length)}"
            for c in self.equal
        )
        return (
            f"{b.run} departs from this draft's replay of the same requests fed {self.fed}: "
            f"accept length {fmt_figure(b.engine_accept_length)} against the replay's "
            f"{fmt_figure(b.replay_accept_length)} (about {b.short:.0f} accepted tokens short "
            f"over {b.rounds} rounds), while {matching}: the same draft equals its replay served "
            f"on another backend or build, so the shortfall is {b.run}'s backend or build, not "
            "the draft's wiring or weights"
        )


@dataclass(frozen=True)
class Blamed:
    """The engine's side named: a gate, a slot, a run's backend (`words`)."""

    logged: Logged
    words: GateWords | WindowsGateWords | SlotWords | BackendWords

    def __str__(self) -> str:
        return f"{self.logged}; {self.words}"


@dataclass(frozen=True)
class HiddenWords:
    """The figure sits at about 1.0 (at most `drift` above it) where the replay fed `fed` gives
    `replay`, about `short` accepted tokens more over `rounds`: the target declares
    hyper-connections (`hc`, their words)."""

    fed: str
    replay: float
    short: float
    rounds: int
    hc: str
    drift: float

    def __str__(self) -> str:
        return (
            f"about 1.0 (at most {self.drift:.0%} above it), where this draft's replay of the "
            f"same requests fed {self.fed} gives {fmt_figure(self.replay)} (about "
            f"{self.short:.0f} accepted tokens more over {self.rounds} rounds): the target "
            f"declares hyper-connections, {self.hc}, and the state the engine hands the draft "
            "from such a target is not the one it was trained on (its streams flattened or "
            "reduced otherwise), so the shortfall is the target's hidden state as the engine "
            "feeds it, not the draft's wiring or weights"
        )


@dataclass(frozen=True)
class TargetState:
    """The target's hidden state named (`words`)."""

    logged: Logged
    words: HiddenWords

    def __str__(self) -> str:
        return f"{self.logged}, {self.words}"


@dataclass(frozen=True)
class Synthetic:
    """The figure is what the engine's synthetic acceptance (`setting`, its words) gives:
    `expected` within `tolerance` over `draws` (None: unknown); `off`, how to serve without it."""

    logged: Logged
    setting: str
    expected: float
    tolerance: float
    draws: int | None
    off: str

    def __str__(self) -> str:
        n = f" over {self.draws:,} draws" if self.draws else ""
        return (
            f"{self.logged}, what its synthetic acceptance gives ({self.setting}: expected "
            f"{self.expected:.3f} +- {self.tolerance:.3f}{n}): the engine ran with synthetic "
            "acceptance, it accepted drafted tokens by a coin, not by the target, so the figure "
            f"says nothing about the draft and no wiring is blamed. Serve without it ({self.off}) "
            "to measure the draft"
        )
