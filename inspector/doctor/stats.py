"""Paired comparisons of two wirings (or configs) scored on the same positions, and the thresholds
every check uses to call one "clearly better"."""

from __future__ import annotations

import math

import numpy as np

from inspector.doctor.finding import Severity
from inspector.metrics import Counts

Z_CLEAR = 3.0  # paired z for "clearly more accurate"
MARGIN_CLEAR = 0.02  # and at least this many accuracy points (fraction)
MARGIN_ERROR = 0.05  # a gain this large makes a finding an error rather than a warning


def paired_hits_z(a: np.ndarray, b: np.ndarray) -> float:
    """z of "a hits more than b" on the same positions (McNemar): positive when a is better."""
    only_a = int((a & ~b).sum())
    only_b = int((b & ~a).sum())
    n = only_a + only_b
    return (only_a - only_b) / math.sqrt(n) if n else 0.0


def paired_logp_z(a: np.ndarray, b: np.ndarray) -> float:
    """z of mean(a - b) over positions where both are finite: positive when a is better."""
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 2:
        return 0.0
    d = a[ok].astype(np.float64) - b[ok].astype(np.float64)
    sd = d.std(ddof=1)
    if sd == 0:
        return 0.0 if d.mean() == 0 else math.copysign(math.inf, d.mean())
    return float(d.mean() / (sd / math.sqrt(d.size)))


def clearly_better(
    a: np.ndarray, b: np.ndarray, *, z: float = Z_CLEAR, margin: float = MARGIN_CLEAR
) -> bool:
    """a beats b on the same positions by a significant paired test and a real margin."""
    if a.size == 0 or a.size != b.size:
        return False
    return paired_hits_z(a, b) >= z and (a.mean() - b.mean()) >= margin


def severity_for_gain(gain: float) -> Severity:
    """A fix worth `gain` accuracy points (fraction): an error from MARGIN_ERROR up."""
    return Severity.ERROR if gain >= MARGIN_ERROR else Severity.WARNING


def counts_of(hits: np.ndarray) -> Counts:
    return Counts(int(hits.sum()), int(hits.size))
