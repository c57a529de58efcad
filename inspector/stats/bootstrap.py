"""The paired bootstrap of a difference of pooled ratios, with requests (samples) as the unit.

Each arm's statistic is pooled like the engines pool their counters: sum(num) / sum(den) over
the requests (accepted / rounds: the accept length less its 1). A resample draws the requests
with replacement and applies the same draw to both arms (the pairing), so what the two drafts
share (hard requests, easy ones) cancels in the difference.

The draw, for n requests: `numpy.random.default_rng(seed).integers(0, n, size=(resamples, n))`,
one call, row r the requests of resample r; every statistic of one `Resampler` reads the same
rows. The interval is the percentile interval of the resampled differences
(`numpy.nanquantile`, its default linear method), a resample whose denominator is 0 left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_RESAMPLES = 2000
DEFAULT_LEVEL = 0.95


@dataclass(frozen=True)
class PairedDiff:
    """B - A of a pooled ratio, and its percentile interval."""

    a: float | None  # sum(num_a) / sum(den_a) over every request; None when sum(den_a) is 0
    b: float | None
    diff: float | None  # b - a
    low: float | None
    high: float | None
    level: float

    @property
    def excludes_zero(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)

    def to_dict(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "diff": self.diff,
            "ci_low": self.low,
            "ci_high": self.high,
            "level": self.level,
        }


def _ratio(num: np.ndarray, den: np.ndarray) -> float | None:
    d = float(den.sum())
    return float(num.sum()) / d if d else None


class Resampler:
    """One draw of `resamples` paired resamples of n requests (module docstring)."""

    def __init__(
        self,
        n: int,
        *,
        resamples: int = DEFAULT_RESAMPLES,
        seed: int = 0,
        level: float = DEFAULT_LEVEL,
    ) -> None:
        if resamples < 1:
            raise ValueError("resamples must be at least 1")
        if not 0 < level < 1:
            raise ValueError("level must be in (0, 1)")
        self.n = n
        self.resamples = resamples
        self.seed = seed
        self.level = level
        rng = np.random.default_rng(seed)
        self.rows = rng.integers(0, n, size=(resamples, n)) if n else None

    def _sums(self, values: np.ndarray) -> np.ndarray:
        assert self.rows is not None
        return np.asarray(values, dtype=np.float64)[self.rows].sum(axis=1)

    def ratio_diff(
        self,
        num_a: np.ndarray,
        den_a: np.ndarray,
        num_b: np.ndarray,
        den_b: np.ndarray,
    ) -> PairedDiff:
        """B - A of sum(num) / sum(den), per-request arrays of length n, paired by index."""
        arrays = [np.asarray(x, dtype=np.float64) for x in (num_a, den_a, num_b, den_b)]
        if any(x.shape != (self.n,) for x in arrays):
            raise ValueError(f"expected {self.n} values per array")
        na, da, nb, db = arrays
        a, b = _ratio(na, da), _ratio(nb, db)
        diff = None if a is None or b is None else b - a
        if diff is None or self.rows is None:
            return PairedDiff(a, b, diff, None, None, self.level)
        sa, sb = self._sums(da), self._sums(db)
        ok = (sa > 0) & (sb > 0)
        if not ok.any():
            return PairedDiff(a, b, diff, None, None, self.level)
        with np.errstate(invalid="ignore", divide="ignore"):
            d = np.where(ok, self._sums(nb) / sb - self._sums(na) / sa, np.nan)
        tail = (1 - self.level) / 2
        low, high = np.nanquantile(d, [tail, 1 - tail])
        return PairedDiff(a, b, diff, float(low), float(high), self.level)
