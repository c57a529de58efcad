"""Synthetic (forced) acceptance: benchmark settings under which an engine accepts drafted tokens
by a coin, not by the target, so its logged figure says nothing about the draft. A figure equal
to what the setting gives is named as such (`Verdict.SYNTHETIC`), never blamed on the draft.

- vLLM 0.32: `rejection_sample_method='synthetic'` with `synthetic_acceptance_rates`, the
  per-position *unconditional* rates r_k = P(the first k + 1 drafted tokens are all accepted),
  non-increasing in [0, 1] (config/speculative.py, validated 566-598; a
  `synthetic_acceptance_length` L resolves to [1] * floor(L - 1) + [frac] + [0] ..., 555-563).
  The rejection sampler turns them into conditional rates c_k = r_k / r_(k-1)
  (v1/spec_decode/utils.py; v1/sample/rejection_sampler.py) and accepts position k
  where a uniform drawn per drafted token is below c_k (755-765). A round's accepted count A then
  has P(A >= k + 1) = r_k, the product of the first k + 1 conditional rates, so
  E[A] = sum_k r_k (1 + that is the expected accept length) and E[A^2] = sum_k (2k + 1) r_k;
  rounds draw independently.
- SGLang 0.5.23: `SGLANG_SIMULATE_ACC_LEN=X` (srt/environ.py; method `match-expected` by
  default, 528) makes every verify call accept L - 1 drafted tokens, L drawn once per call for the
  whole batch: floor(X') or floor(X') + 1 with E[L] = X', X' = X clamped to [1, steps + 1]
  (srt/speculative/spec_utils.py). Its draws are decode iterations, not rounds.

The tolerance: four standard deviations of the mean over the draws the log covers (vLLM: its
rounds; SGLang: its decode iterations, at least its longest request's verify rounds), plus the
log's own rounding (two decimals) and, for SGLang's per-request spec_accept_length, the prefill's
token and the stop's cut that it counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inspector.doctor.reconcile import words
from inspector.doctor.reconcile.replay_counts import pooled
from inspector.doctor.reconcile.result import Reconciliation, Verdict, WiringCheck
from inspector.engines import Engine, engine, engine_words
from inspector.errors import InputError, setting_field
from inspector.formats.engine_log import EngineLog, RequestFigures
from inspector.serving.replay import AcceptReport

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG, _VLLM = (
    Engine.SGLANG.display,
    Engine.VLLM.display,
)

Z = 4.0  # standard deviations a figure may lie from the setting's expectation
ROUNDING = 0.005 + 1e-9  # a mean printed with two decimals
SHARE_ROUNDING = 0.0005  # vLLM's per-position rates printed with three decimals
SGLANG_WINDOW = 40  # SGLang's default decode_log_interval: decode iterations a log line covers


@dataclass(frozen=True)
class SyntheticSetting:
    """The engine's synthetic-acceptance setting, as the user states it."""

    engine: Engine
    rates: tuple[float, ...] | None = None  # vLLM's synthetic_acceptance_rates
    length: float | None = None  # SGLang's SGLANG_SIMULATE_ACC_LEN

    @classmethod
    def vllm(cls, rates: tuple[float, ...]) -> SyntheticSetting:
        if not rates or not all(0.0 <= r <= 1.0 for r in rates):
            raise InputError(
                None, setting_field("synthetic-rates"), "rates in [0, 1], one per position"
            )
        if any(b > a for a, b in zip(rates, rates[1:], strict=False)):
            # vLLM refuses them at start-up (config/speculative.py)
            raise InputError(
                None, setting_field("synthetic-rates"), f"{list(rates)}: must be non-increasing"
            )
        return cls(Engine.VLLM, rates=tuple(rates))

    @classmethod
    def sglang(cls, length: float) -> SyntheticSetting:
        if not length > 0:
            raise InputError(
                None, setting_field("simulated-accept-len"), f"{length}: {_SGLANG} ignores X <= 0"
            )
        return cls(Engine.SGLANG, length=length)

    @property
    def text(self) -> str:
        if self.rates is not None:
            rates = ", ".join(f"{r:g}" for r in self.rates)
            return f"rejection_sample_method='synthetic', synthetic_acceptance_rates [{rates}]"
        return f"SGLANG_SIMULATE_ACC_LEN={self.length:g}"

    def draw(self, steps: int) -> tuple[float, float]:
        """(E, Var) of the drafted tokens one draw accepts (vLLM: a round's; SGLang: a decode
        iteration's, every request of the batch alike) with `steps` drafted a round."""
        if self.rates is not None:
            r = self.rates[:steps]
            e = sum(r)
            e2 = sum((2 * k + 1) * x for k, x in enumerate(r))
            return e, max(0.0, e2 - e * e)
        assert self.length is not None
        x = min(max(self.length, 1.0), steps + 1.0)
        p = x - math.floor(x)
        return x - 1.0, p * (1.0 - p)


@dataclass(frozen=True)
class SyntheticCheck:
    """The logged figure against what the setting gives."""

    setting: SyntheticSetting
    expected: float  # the accept length the setting gives
    tolerance: float
    draws: int | None  # independent draws the log covers (None: unknown)
    matches: bool
    positions: bool | None = None  # vLLM's per-position shares agree too (None: not logged)

    def to_dict(self) -> dict:
        return {
            "setting": self.setting.text,
            "engine": self.setting.engine,
            "expected_accept_length": self.expected,
            "tolerance": self.tolerance,
            "draws": self.draws,
            "matches": self.matches,
            "per_position_matches": self.positions,
        }

    def said(self, log: EngineLog) -> words.Synthetic:
        """The verdict's words for `log`, whose figure this setting gives."""
        off = engine(self.setting.engine).synthetic_off
        return words.Synthetic(
            words.Logged.of(log), self.setting.text, self.expected, self.tolerance, self.draws, off
        )


def _draws(log: EngineLog, which: Engine) -> int | None:
    if not engine(which).windowed_log:
        return log.rounds or None
    if log.source == "log":
        return log.lines * (log.decode_log_interval or SGLANG_WINDOW) or None
    if log.source == "requests":
        counts = [r.rounds for r in log.requests if r.rounds]
        return max(counts) if counts else None
    return None


def synthetic_check(log: EngineLog, setting: SyntheticSetting, steps: int) -> SyntheticCheck:
    """Whether `log`'s figure is what `setting` gives with `steps` drafted a round."""
    name = engine_words(setting.engine)
    if log.engine != setting.engine:
        flag = "--synthetic-rates" if setting.rates is not None else "--simulated-accept-len"
        raise InputError(log.path, None, f"{flag} is {name}'s setting, the log is another's")
    if setting.rates is not None and len(setting.rates) != steps:
        raise InputError(
            None,
            setting_field("synthetic-rates"),
            f"{len(setting.rates)} rates for {steps} drafted tokens a round ({_VLLM} takes one per "
            "position)",
        )
    mean, var = setting.draw(steps)
    expected = 1.0 + mean
    draws = _draws(log, setting.engine)
    tol = Z * math.sqrt(var / draws) if draws else 0.0
    if log.rounded:
        tol += ROUNDING
    if log.figure == "spec_accept_length" and log.rounds:
        # completion tokens count the prefill's token and are cut at the stop
        tol += (steps + 1) * len(log.requests) / log.rounds
    al = log.accept_length
    matches = al is not None and abs(al - expected) <= tol
    positions = None
    if setting.rates is not None and log.accepted_per_pos is not None and log.rounds:
        n = log.rounds
        slack = SHARE_ROUNDING + 0.5 / n if log.source == "log" else 0.0
        positions = all(
            abs(c / n - r) <= Z * math.sqrt(r * (1 - r) / n) + slack
            for c, r in zip(log.accepted_per_pos, setting.rates, strict=False)
        )
        matches = matches and positions
    return SyntheticCheck(setting, expected, tol, draws, matches, positions)


def synthetic_reconciliation(
    log: EngineLog,
    report: AcceptReport,
    pairs: dict[int, RequestFigures],
    notes: list[str],
    check: SyntheticCheck,
) -> Reconciliation:
    """The verdict for a figure that is what the engine's synthetic acceptance gives: each
    wiring's replay shown, none of them equal to it, none named, no fix."""
    checks = [
        WiringCheck(wa.label, wa.wiring.slots, pooled(wa, pairs, log), False)
        for wa in report.wirings
    ]
    return Reconciliation(
        log,
        checks,
        Verdict.SYNTHETIC,
        check.said(log),
        requests_matched=len(pairs),
        notes=notes,
        synthetic=check.to_dict(),
    )
