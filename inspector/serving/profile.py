"""The acceptance profile simulators and serving planners read beside a draft's weights:
`speculation_profile.json`, in the shape of ModelOpt's proposed format (its open pull requests
#2247, #2313, #2315, #2316: a schema, a producer in its benchmark, a carrier in its export).

From one wiring's replay (or live loop), with `a` a round's accepted draft tokens and `len = a + 1`
the tokens it emits:

- `marginal_accept_rates[i]` = P(len >= i + 2) = the share of rounds accepting at least i + 1
  drafted tokens (vLLM's per-position acceptance rate);
- `conditional_accept_rates[i]` = P(len >= i + 2) / P(len >= i + 1) (position i accepted given
  the ones before it were; 0 where none reached it);
- `mean_accept_length` = 1 + sum(marginal_accept_rates) = 1 + accepted / rounds, the figure the
  engines log;
- `acceptance_length_histogram` = {len: rounds} for len 1 .. steps + 1;
- `mean_accept_length_per_request` = the mean over requests of each request's own figure.

At a temperature the rates are the expectation under the engine's verification rule (the live
loop's, or `accept --temperature --target`'s), and the histogram is the one random run's. Our
own fields sit under `eagle3_inspector` (the engine and its settings, the wiring, the counts, the
lower bound), so a reader of ModelOpt's fields ignores them. `docs/reference/profile.md` lists
every field; a test holds files to it.
"""

from __future__ import annotations

import json
from pathlib import Path

from inspector.serving.replay import AcceptReport, WiringAccept

SCHEMA_VERSION = "1.0"
METHOD = "eagle3"
# the rates are measured (a replay of the engine's rounds), not a fitted model of them
ACCEPT_LENGTH_MODEL = "empirical"

__all__ = ["build_profile", "profile_of", "profile_of_checkpoint", "write_profile"]


def _rates(at_least: list[float], rounds: float) -> tuple[list[float], list[float]]:
    marginal = [x / rounds if rounds else 0.0 for x in at_least]
    conditional = []
    before = 1.0
    for m in marginal:
        conditional.append(m / before if before > 0 else 0.0)
        before = m
    return marginal, conditional


def _histogram(at_least: list[int], rounds: int) -> dict[str, int]:
    """{len: rounds emitting len tokens} for len 1 .. k + 1, from the rounds accepting >= j."""
    k = len(at_least)
    counts = [rounds - (at_least[0] if k else 0)]
    counts += [at_least[j] - (at_least[j + 1] if j + 1 < k else 0) for j in range(k)]
    return {str(n + 1): c for n, c in enumerate(counts)}


def build_profile(
    at_least: list[float],
    rounds: int,
    *,
    histogram_at_least: list[int],
    per_request: list[float],
    conditions: dict,
    ours: dict,
) -> dict:
    """The profile from the rounds accepting >= 1 .. k drafted tokens (`at_least`: counted, or
    expected at a temperature; `histogram_at_least`: the counted ones)."""
    marginal, conditional = _rates(at_least, rounds)
    return {
        "schema_version": SCHEMA_VERSION,
        "method": METHOD,
        "num_speculative_tokens": len(at_least),
        "conditional_accept_rates": [round(x, 6) for x in conditional],
        "marginal_accept_rates": [round(x, 6) for x in marginal],
        "mean_accept_length": round(1.0 + sum(marginal), 6),
        "mean_accept_length_per_request": (
            round(sum(per_request) / len(per_request), 6) if per_request else None
        ),
        "acceptance_length_histogram": _histogram(histogram_at_least, rounds),
        "measurement_conditions": conditions,
        "accept_length_model": ACCEPT_LENGTH_MODEL,
        "eagle3_inspector": ours,
    }


def profile_of(
    report: AcceptReport,
    wa: WiringAccept,
    *,
    dataset: str,
    osl: int | None = None,
) -> dict:
    """The profile of one wiring of `report` (`dataset`: what the requests were; `osl`: their
    output length where one was asked for, e.g. the live loop's --max-new)."""
    st = wa.stats
    exp = wa.expectation  # at a temperature: the rule's expectation on the loop's rounds
    at_least = list(exp.at_least) if exp is not None else [float(x) for x in st.at_least]
    per_request = [s.stats.accept_length for s in wa.per_sample if s.stats.rounds]
    sampling = report.sampling
    return build_profile(
        at_least,
        st.rounds,
        histogram_at_least=list(st.at_least),
        per_request=[x for x in per_request if x is not None],
        conditions={
            "dataset": dataset,
            "osl": osl,
            "num_samples": len(wa.per_sample),
            "validation": f"eagle3-inspector accept ({report.mode})",
        },
        ours={
            "checkpoint": report.checkpoint,
            "engine": report.engine.value,
            "draft": report.spec.to_dict(),
            "temperature": sampling.sampling.temperature if sampling is not None else 0.0,
            "verification": (
                sampling.verification.rule.value if sampling is not None else "greedy"
            ),
            "wiring": list(wa.wiring.slots),
            "wiring_label": wa.label,
            "rounds": st.rounds,
            "accepted": st.accepted,
            "accept_length_is_lower_bound": st.is_bound,
            "per_request": [round(x, 6) for x in per_request if x is not None],
        },
    )


def profile_of_checkpoint(result, *, spec: dict, engine: str, wiring: str, dataset: str) -> dict:
    """The profile of one checkpoint of a sweep (`CheckpointResult`: its pooled counts; no
    per-request figures, which a resumed sweep no longer holds)."""
    at_least = [round(p * result.rounds) for p in result.per_depth]
    return build_profile(
        [float(x) for x in at_least],
        result.rounds,
        histogram_at_least=at_least,
        per_request=[],
        conditions={
            "dataset": dataset,
            "osl": None,
            "num_samples": None,
            "validation": "eagle3-inspector sweep (replay)",
        },
        ours={
            "checkpoint": result.path,
            "step": result.step,
            "engine": engine,
            "draft": spec,
            "temperature": 0.0,
            "verification": "greedy",
            "wiring": wiring,
            "rounds": result.rounds,
            "accepted": result.accepted,
            "accept_length_is_lower_bound": result.is_bound,
        },
    )


def write_profile(path: str | Path, profile: dict) -> Path:
    """The profile as JSON at `path` (its folder made); the path written."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(profile, indent=2) + "\n", encoding="utf-8")
    return p
