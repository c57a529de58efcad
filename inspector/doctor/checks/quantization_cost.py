"""Check (`doctor FP8_CKPT SAMPLES --parent PARENT`): what the quantization costs in acceptance.

Drafts are quantized to FP8 without calibration (ModelOpt's `quantize_drafter.py`, PR #2027),
and nothing in the quantized file says what it costs. The loader dequantizes the draft
(`formats.quantized`, recorded in `Draft.quantization`); this check runs the quantized draft
and its unquantized parent through the same evaluator, on the doctor's samples and its
recommended wiring, and reports both with eval's own metrics: step-0 all-tok accuracy and the
replayed chain's accept length (`Evaluator.run`). The step-0 hits are compared position by
position (`doctor.stats.clearly_better`): a parent clearly better is a warning, else info.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.stats import clearly_better
from inspector.doctor.wiring.search import Scorer
from inspector.draft import Draft, Quantization
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.metrics import Counts
from inspector.wiring import Wiring

__all__ = ["QuantizationCost", "measure_quantization_cost", "quantization_cost_finding"]


@dataclass
class QuantizationCost:
    quantization: Quantization
    parent: str
    checkpoint: str
    wiring: tuple[int, ...]
    samples: int
    accuracy: Counts  # step-0 all-tok, the quantized draft
    parent_accuracy: Counts
    accept_length: float | None  # the replayed chain, as a chain engine logs it
    parent_accept_length: float | None
    parent_clearly_better: bool

    @property
    def accept_cost(self) -> float | None:
        if self.accept_length is None or self.parent_accept_length is None:
            return None
        return self.parent_accept_length - self.accept_length

    def to_dict(self) -> dict:
        return {
            "quantization": self.quantization.to_dict(),
            "parent": self.parent,
            "checkpoint": self.checkpoint,
            "wiring": list(self.wiring),
            "samples": self.samples,
            "accuracy": self.accuracy.to_dict(),
            "parent_accuracy": self.parent_accuracy.to_dict(),
            "accept_length": self.accept_length,
            "parent_accept_length": self.parent_accept_length,
            "accept_length_cost": self.accept_cost,
            "parent_clearly_better": self.parent_clearly_better,
        }


def _hits(ev: Evaluator, samples: Sequence[int], wiring: tuple[int, ...]) -> np.ndarray:
    sc = Scorer(ev)
    out = []
    for i in samples:
        try:
            out.append(sc.score(i, [wiring])[0].hit)
        except InputError:
            continue
    return np.concatenate(out) if out else np.zeros(0, bool)


def measure_quantization_cost(
    ev: Evaluator, parent: Draft, samples: Sequence[int], wiring: Sequence[int]
) -> QuantizationCost:
    """The quantized draft (`ev`'s) against `parent`, on `samples` under `wiring`."""
    q = ev.draft.quantization
    if q is None:
        raise ValueError("the draft is not quantized")
    ref = ev.with_draft(parent.to(ev.draft.device, ev.draft.dtype))
    w = Wiring(tuple(wiring))
    mine = ev.run([w], indices=list(samples)).wirings[0]
    theirs = ref.run([w], indices=list(samples)).wirings[0]
    return QuantizationCost(
        quantization=q,
        parent=parent.path,
        checkpoint=ev.draft.path,
        wiring=tuple(wiring),
        samples=len(samples),
        accuracy=mine.steps[0].all_tok,
        parent_accuracy=theirs.steps[0].all_tok,
        accept_length=mine.acceptance_length,
        parent_accept_length=theirs.acceptance_length,
        parent_clearly_better=bool(
            clearly_better(_hits(ref, samples, tuple(wiring)), _hits(ev, samples, tuple(wiring)))
        ),
    )


def _al(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def quantization_cost_finding(c: QuantizationCost) -> Finding:
    what = (
        f"{c.checkpoint} is quantized, {c.quantization.label}, {len(c.quantization.tensors)} "
        "weights dequantized at load"
    )
    figures = (
        f"on {c.samples} samples under wiring {list(c.wiring)}: step-0 all-tok "
        f"{c.accuracy.fmt()} against the parent's {c.parent_accuracy.fmt()}, accept length "
        f"{_al(c.accept_length)} against {_al(c.parent_accept_length)}"
    )
    if c.parent_clearly_better:
        return Finding(
            Kind.QUANTIZATION,
            Severity.WARNING,
            f"{what}; the quantization costs acceptance: {figures}",
            "quantize with calibration data, keep the layers that cost most (fc, lm_head) "
            "unquantized, or serve the parent",
            c,
        )
    return Finding(
        Kind.QUANTIZATION,
        Severity.INFO,
        f"{what}; no clear cost against the unquantized parent {c.parent}: {figures}",
        "",
        c,
    )
