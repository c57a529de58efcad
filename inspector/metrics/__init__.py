"""Accuracy counts: ours (what serving sees) and the trainers' own (what their logs show)."""

from inspector.metrics.counts import Counts, StepMetrics, acceptance_length, sum_steps
from inspector.metrics.trainers import simulated_acc_len, specforge_counts, speculators_counts

__all__ = [
    "Counts",
    "StepMetrics",
    "acceptance_length",
    "simulated_acc_len",
    "specforge_counts",
    "speculators_counts",
    "sum_steps",
]
