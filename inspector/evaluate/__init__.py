"""Predictions per position, metrics per wiring, and the caches that make re-wiring cheap."""

from inspector.evaluate.device import is_oom, resolve_device
from inspector.evaluate.evaluator import Evaluator
from inspector.evaluate.predictions import (
    TOP_K,
    SamplePredictions,
    StepPredictions,
    step_metrics,
)
from inspector.evaluate.report import Report, SkippedSample, WiringReport

__all__ = [
    "TOP_K",
    "Evaluator",
    "Report",
    "SkippedSample",
    "SamplePredictions",
    "StepPredictions",
    "WiringReport",
    "is_oom",
    "resolve_device",
    "step_metrics",
]
