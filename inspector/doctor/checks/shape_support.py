"""Check: the draft's shape, and whether each engine release serves it.

A draft is no longer always three slots into one Llama layer. The shapes of 2026:

- EAGLE-3.1 means two things. The paper and vLLM: `fc_norm`, one RMSNorm per slot
  (`fc_norm.{i}.weight`), with `norm_output`. speculators first shipped "3.1" as
  `norm_before_fc`, one RMSNorm over the concatenated slots (`input_norm.weight`), with
  `norm_output`, on by default for its Llama drafts; the two flags exclude each other there.
  (`norm_flags` scores which of them the weights were trained with.)
- N != 3 slots (SpecDrift's two, four), a single slot (gpt-oss short-context heads read the
  target's final post-norm state alone), several decoder layers, a Qwen3 decoder layer (q/k
  RMSNorm per head).

Nothing errors when an engine reads such a draft differently: it refuses to load it (the user
sees why), or it runs it without the feature (acceptance drops and nothing says so). Each
engine's module holds its rule (`ServingEngine.shape_rule`), read from the release this project builds and runs; the ones
marked `run` were also served or refused by that engine here, on drafts of each shape trained on
the demo (docs/guides/draft-shapes.md).

Pure: no torch, no files; the config is the raw config.json.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.engines import engines_named
from inspector.engines.shapes import DraftShape, Support, Verdict


@dataclass(frozen=True)
class ShapeFacts:
    shape: DraftShape
    verdicts: tuple[Verdict, ...]

    def to_dict(self) -> dict:
        return {"shape": self.shape.to_dict(), "engines": [v.to_dict() for v in self.verdicts]}


def shape_finding(shape: DraftShape, engines: Sequence[str] | None = None) -> Finding | None:
    """The draft's shape and each engine release's verdict on it; None for the classic shape
    (every engine serves it) and where no rule knows the shape. A warning when an engine refuses
    it or runs it without a feature (an error when the user named that engine)."""
    if shape.classic:
        return None
    verdicts = tuple(
        v
        for e in engines_named(engines)
        if e.shape_rule is not None and (v := e.shape_rule(shape)) is not None
    )
    if not verdicts:
        return None
    off = [v for v in verdicts if v.support is not Support.SERVES]
    severity = Severity.INFO
    if off:
        named = engines is not None and any(v.support is Support.DROPS for v in off)
        severity = Severity.ERROR if named else Severity.WARNING
    summary = f"draft shape: {shape.words()}: " + "; ".join(v.words() for v in verdicts)
    fix = "; ".join(f"{v.engine}: {v.fix}" for v in off if v.fix) or None
    return Finding(Kind.DRAFT_SHAPE, severity, summary, fix, ShapeFacts(shape, verdicts))
