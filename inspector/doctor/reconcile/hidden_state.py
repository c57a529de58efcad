"""A target whose hidden state is not what the draft reads: hyper-connections. A target that
declares `hc_mult > 1` in its config.json carries hc_mult residual streams through every layer;
the state an engine hands the draft from it may be those streams flattened into one vector
(hc_mult x hidden_size) or reduced otherwise than the state the draft was trained on. SGLang issue
#36829 (2026-08-28): GLM-5.3-Flash (hc_mult=4), the flattened aux hidden state breaks the draft's
fused norm and the accept length stays at about 1.0.

Where the target declares them (--target, or the target the samples' data_config.json records)
and the engine's accept length sits at about 1.0 (at most DRIFT above it) while this draft's
replay of the same requests, under the wiring the verdict holds it to, accepts more (below it
beyond DRIFT and short by at least MIN_SHORT tokens over the replay's rounds: `blame`'s drift
model), the target's hidden state as the engine hands it is named, not the draft's wiring or
weights. Only a verdict that left the shortfall unexplained (an engine-side fault, other data)
is renamed; a gate or a slot found in the per-request figures stands. Pure."""

from __future__ import annotations

from dataclasses import replace

from inspector.doctor.reconcile import words
from inspector.doctor.reconcile.blame import DRIFT, MIN_SHORT, OPEN, paired_words
from inspector.doctor.reconcile.result import Blame, Reconciliation, Verdict, short_label
from inspector.engines import engine, engine_words
from inspector.formats.target_config import HyperConnections

HIDDEN_CLASS = (
    "the target's hidden state as the engine hands it to the draft: a hyper-connection target "
    "carries hc_mult residual streams, and an engine that flattens them (hc_mult x hidden_size) "
    "or reduces them otherwise than the capture the draft was trained on feeds it a state it "
    "never saw; serve on an engine or build that hands the draft the state it was trained on, "
    "or train the draft on the state the engine hands it"
)


def hidden_state_blame(result: Reconciliation, hc: HyperConnections | None) -> Reconciliation:
    """`result` with the target's hidden state named (`Verdict.TARGET_HIDDEN_STATE`) where the
    target declares hyper-connections and the figures show the pattern; else `result`."""
    if hc is None or hc.hc_mult <= 1 or result.verdict not in OPEN:
        return result
    al_e = result.log.accept_length
    scored = [c for c in result.checks if c.stats.accept_length is not None and c.stats.rounds]
    ref = next((c for c in scored if c.label == result.best), None)
    if ref is None and scored:
        ref = max(scored, key=lambda c: c.stats.accept_length or 0.0)
    if al_e is None or ref is None or ref.stats.accept_length is None:
        return result
    al_r = ref.stats.accept_length
    short = (al_r - al_e) * ref.stats.rounds
    if al_e > 1 + DRIFT or al_e >= al_r * (1 - DRIFT) or short < MIN_SHORT:
        return result
    name = engine_words(result.log.engine)
    said = words.HiddenWords(short_label(ref.label), al_r, short, ref.stats.rounds, hc.text, DRIFT)
    facts = engine(result.log.engine).facts_for(None, None, topic="hidden_state")
    faults = [HIDDEN_CLASS, *(f"{name} {f.since}: {f.words}" for f in facts)]
    paired = paired_words(result)
    return replace(
        result,
        verdict=Verdict.TARGET_HIDDEN_STATE,
        said=words.TargetState(words.Logged.of(result.log), said),
        faults=faults,
        blame=Blame("hidden_state", said, paired, wiring=ref.label, hc_mult=hc.hc_mult),
        notes=[*result.notes, f"held against every wiring alone: {result.summary}"],
    )
