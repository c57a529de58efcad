"""One run of several (`reconcile --engine-log A --engine-log B`) against the replay of its
requests: a leaf both the result (`Blame.runs`) and the comparison (`runs`) hold."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunCheck:
    """One run (one engine log) of the draft against the replay of the requests it served, under
    the wiring the runs are held to (`reconcile_runs`)."""

    run: str  # its backend / build as its start-up lines state them, else its file
    path: str
    verdict: str  # its own reconciliation's
    engine_accept_length: float
    replay_accept_length: float
    rounds: int  # the replay's rounds of those requests (what `short` is counted over)
    short: float  # accepted tokens short of the replay over those rounds (negative: above)
    departs: bool  # below the replay beyond the drift allowed
    equal: bool  # within the drift allowed

    def to_dict(self) -> dict:
        return {
            "run": self.run,
            "path": self.path,
            "verdict": self.verdict,
            "engine_accept_length": self.engine_accept_length,
            "replay_accept_length": self.replay_accept_length,
            "rounds": self.rounds,
            "short": self.short,
            "departs": self.departs,
            "equal": self.equal,
        }
