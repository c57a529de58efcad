"""Whole-set results: per wiring, the summed counts and (optionally) every position; the samples
skipped (`SkippedSample`, defined with the sample loader that records them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inspector.draft import dtype_label
from inspector.formats.sample_set import SampleWarning, SkippedSample
from inspector.metrics import StepMetrics, acceptance_length, simulated_acc_len
from inspector.metrics.rounds import AcceptStats
from inspector.sample import SlotInfo
from inspector.wiring import Wiring


@dataclass
class WiringReport:
    wiring: Wiring
    label: str
    steps: list[StepMetrics]
    per_sample: list[tuple[int, str, list[StepMetrics]]] = field(default_factory=list)
    positions: list[dict] = field(default_factory=list)
    # The replayed greedy chain (as many steps as --ttt-steps), pooled over the set's rounds.
    accept: AcceptStats | None = None
    name: str | None = None  # a preset's name, "configured"; None for a wiring given by slots

    @property
    def acceptance_length(self) -> float | None:
        """1 + accepted / rounds, as a chain engine (vLLM) logs it, replayed; None without
        rounds. A lower bound where `accept.is_bound` (see `chain_accept_stats`)."""
        return self.accept.accept_length if self.accept is not None else None

    @property
    def acceptance_length_estimate(self) -> float:
        """The closed form 1 + sum_k prod_m<=k cond_m over every row, kept for comparison."""
        return acceptance_length(self.steps)

    @property
    def specforge_simulated_acc_len(self) -> float | None:
        if not self.steps or any(s.specforge is None for s in self.steps):
            return None
        return simulated_acc_len([s.specforge.acc for s in self.steps])  # type: ignore[union-attr]

    def to_dict(self) -> dict:
        d = {
            "wiring": list(self.wiring.slots),
            "label": self.label,
            "steps": [s.to_dict() for s in self.steps],
            "acceptance_length": self.acceptance_length,
            "acceptance_length_estimate": self.acceptance_length_estimate,
            "per_sample": [
                {"index": i, "path": p, "steps": [s.to_dict() for s in steps]}
                for i, p, steps in self.per_sample
            ],
        }
        if self.steps and self.steps[0].specforge is not None:
            d["specforge_simulated_acc_len"] = self.specforge_simulated_acc_len
        if self.accept is not None:
            a = self.accept
            d["accept"] = {
                "rounds": a.rounds,
                "accepted": a.accepted,
                "emitted": a.emitted,
                "per_depth": a.per_depth,
                "accept_length_is_lower_bound": a.is_bound,
                "lower_bound_requests": a.bounded,
            }
        if self.positions:
            d["positions"] = self.positions
        return d


@dataclass(kw_only=True)
class RunReport:
    """What every report says about its run, whatever it computed: the draft, how many samples
    counted, where it ran, the slots the wirings index, the samples skipped and the warnings
    about those read, and where the verifier's head came from (if anywhere)."""

    checkpoint: str
    samples: int
    device: str
    dtype: str
    slots: list[SlotInfo]
    skipped: list[SkippedSample] = field(default_factory=list)
    warnings: list[SampleWarning] = field(default_factory=list)
    verifier: str | None = None
    stored_dtype: str | None = None  # the weight file's, where the draft is computed in another

    @property
    def dtype_label(self) -> str:
        """`float32 (stored bfloat16)` where the two differ, for header lines."""
        return dtype_label(self.dtype, self.stored_dtype)

    @staticmethod
    def fields_of(ev: Any, todo: Sequence[int], skipped: list[SkippedSample]) -> dict[str, Any]:
        """The run fields of a pass of evaluator `ev` over samples `todo`."""
        return {
            "checkpoint": ev.draft.path,
            "samples": len(todo) - len(skipped),
            "device": str(ev.device),
            "dtype": str(ev.draft.dtype).replace("torch.", ""),
            "stored_dtype": ev.draft.stored_dtype_name,
            "slots": ev.slot_info,
            "skipped": skipped,
            "warnings": ev.warnings(todo),
            "verifier": ev.target_head.path if ev.target_head is not None else None,
        }

    @staticmethod
    def merged_fields(parts: Sequence[RunReport]) -> dict[str, Any]:
        """The run fields of the ranks' reports of one torchrun pass, as one process's."""
        return {
            "samples": sum(p.samples for p in parts),
            "device": f"{parts[0].device} x{len(parts)}",
            "skipped": sorted((e for p in parts for e in p.skipped), key=lambda e: e.index or 0),
            "warnings": sorted((w for p in parts for w in p.warnings), key=lambda w: w.index),
        }

    def run_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint,
            "samples": self.samples,
            "device": self.device,
            "dtype": self.dtype,
            "stored_dtype": self.stored_dtype,
            "verifier": self.verifier,
            "slots": [s.to_dict(i) for i, s in enumerate(self.slots)],
        }

    def skipped_dict(self) -> dict:
        return {
            "skipped": [e.to_dict() for e in self.skipped],
            "warnings": [w.to_dict() for w in self.warnings],
        }


@dataclass(kw_only=True)
class Report(RunReport):
    """`eval`'s report: per wiring, the trainers' metrics and ours, TTT step by step."""

    layout: str
    sample_format: str
    ttt_steps: int
    wirings: list[WiringReport]

    def to_dict(self) -> dict:
        return {
            **self.run_dict(),
            "layout": self.layout,
            "sample_format": self.sample_format,
            "ttt_steps": self.ttt_steps,
            "wirings": [w.to_dict() for w in self.wirings],
            **self.skipped_dict(),
        }
