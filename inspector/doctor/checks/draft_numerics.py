"""Check (with `--target`): the numerics an engine runs the draft in, where they are not the
draft's own.

SGLang gives the draft the target's `--quantization` unless
`--speculative-draft-model-quantization` names another method (PR #33115, 2026-08-03; 0.5.23's
serving hook: "the draft model defaults to the same quantization as the target model"). A target
whose config.json declares a `quantization_config` is served under that method, so an
unquantized draft is run quantized too: the same command line, other draft numerics.

For an FP8 target the cost is measured: the projections the engine quantizes
(`ServingEngine.quant_inheritance`) rounded per tensor to float8 e4m3 with scale amax / 448 (the
online FP8 of an unquantized checkpoint), scored against the draft as it is on the doctor's
samples under its recommended wiring (`quantization_cost.measure_quantization_cost`). The
activations stay unquantized, so the figure is a lower bound of the cost. Another method is
named, with the opt-out, and no figure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from inspector.doctor.checks.quantization_cost import QuantizationCost, measure_quantization_cost
from inspector.doctor.finding import Finding, Kind, Severity
from inspector.draft import Draft, Quantization
from inspector.engines import engines_named
from inspector.evaluate import Evaluator

E4M3_MAX = 448.0  # the largest finite float8 e4m3fn value
FP8_METHODS = ("fp8", "modelopt", "w8a8_fp8", "fbgemm_fp8")


def target_quantization(target: Path | None) -> str | None:
    """The method the target's config.json declares (`quantization_config.quant_method`, with
    ModelOpt's `quant_algo`), lowercased; None where it declares none or cannot be read (the
    engine reads that file, not us: a broken one is the engine's error to give)."""
    if target is None:
        return None
    try:
        cfg = json.loads((Path(target) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    qc = cfg.get("quantization_config") if isinstance(cfg, dict) else None
    if not isinstance(qc, dict):
        return None
    method = qc.get("quant_method")
    algo = qc.get("quant_algo")
    if not isinstance(method, str):
        return None
    method = method.lower()
    if method == "modelopt" and isinstance(algo, str) and algo.upper() != "FP8":
        return f"modelopt {algo.lower()}"
    return method


def fp8_rounded(draft: Draft, projections: Sequence[str]) -> tuple[Draft, tuple[str, ...]]:
    """A copy of `draft` whose weights named by `projections` are rounded per tensor to float8
    e4m3 (scale amax / 448) and back, with the names rounded."""
    names = tuple(
        k
        for k, w in draft.weights.items()
        if w.dim() == 2 and k.startswith("layers.") and any(f".{p}." in k for p in projections)
    )
    weights = dict(draft.weights)
    for k in names:
        w = weights[k].float()
        scale = w.abs().max().clamp(min=torch.finfo(torch.float32).tiny) / E4M3_MAX
        q = (w / scale).to(torch.float8_e4m3fn).float() * scale
        weights[k] = q.to(draft.weights[k].dtype)
    return replace(draft, weights=weights), names


@dataclass
class NumericsFacts:
    engine: str
    method: str
    optout: str
    since: str
    quantized: str
    cost: QuantizationCost | None

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "target_quantization": self.method,
            "optout": self.optout,
            "since": self.since,
            "quantized": self.quantized,
            "cost": self.cost.to_dict() if self.cost is not None else None,
        }

    def lines(self) -> list[str]:
        out = [f"{self.engine}: {self.quantized} run under {self.method} ({self.since})"]
        c = self.cost
        if c is not None:
            out.append(
                f"measured on {c.samples} samples under wiring {list(c.wiring)}: step-0 all-tok "
                f"{c.accuracy.fmt()} quantized against {c.parent_accuracy.fmt()} as shipped"
            )
        return out


def draft_numerics_findings(
    ev: Evaluator,
    samples: Sequence[int],
    wiring: Sequence[int],
    target: Path | None,
    engines: Sequence[str] | None = None,
) -> list[Finding]:
    """One finding per engine that would run this unquantized draft in the target's
    quantization (none where the target declares none, or the draft is quantized already)."""
    method = target_quantization(target)
    if method is None or ev.draft.quantization is not None or not wiring:
        return []
    out = []
    for eng in engines_named(engines):
        inherit = eng.quant_inheritance
        if inherit is None:
            continue
        cost = None
        if method in FP8_METHODS:
            rounded, names = fp8_rounded(ev.draft, inherit.projections)
            q = Quantization(
                "fp8", f"{eng.display}'s online FP8", "float8_e4m3fn", "per-tensor", names
            )
            quantized = ev.with_draft(replace(rounded, quantization=q))
            cost = measure_quantization_cost(quantized, ev.draft, samples, wiring)
        facts = NumericsFacts(eng.label, method, inherit.optout, inherit.since, inherit.words, cost)
        where = (
            f"{eng.label} runs this draft in the target's quantization ({method}): {inherit.words}"
        )
        fix = f"launch with {inherit.optout} to serve the draft as trained, or measure it quantized"
        if cost is not None and cost.parent_clearly_better:
            summary = (
                f"{where}; that costs acceptance: step-0 all-tok {cost.accuracy.fmt()} against "
                f"{cost.parent_accuracy.fmt()} as shipped"
            )
            out.append(Finding(Kind.DRAFT_NUMERICS, Severity.WARNING, summary, fix, facts))
        else:
            tail = (
                f"; no clear cost measured (step-0 all-tok {cost.accuracy.fmt()} against "
                f"{cost.parent_accuracy.fmt()})"
                if cost is not None
                else "; its cost is not measured for this method"
            )
            out.append(Finding(Kind.DRAFT_NUMERICS, Severity.INFO, where + tail, fix, facts))
    return out
