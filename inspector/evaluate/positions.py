"""Where `eval --positions` puts one object per position and step: a list in memory (tests,
torchrun's gather) or a spool on disk, so a whole training set can be written out without holding
it (10^5 samples x 2K tokens x 3 steps is ~10^9 objects)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Protocol

from inspector.strict_json import json_safe


class PositionSink(Protocol):
    def add(self, wiring: int, rows: Iterable[dict]) -> None: ...


class PositionList:
    """Positions kept in memory, per wiring."""

    def __init__(self, n_wirings: int) -> None:
        self.rows: list[list[dict]] = [[] for _ in range(n_wirings)]

    def add(self, wiring: int, rows: Iterable[dict]) -> None:
        self.rows[wiring].extend(rows)


class PositionSpool:
    """Positions written as JSON text to one temporary file per wiring as they come; NaN/Inf
    become null (the samples where that happened are kept in `nonfinite_samples`)."""

    def __init__(self, n_wirings: int, directory: str | None = None) -> None:
        self._files: list[IO[str]] = [
            tempfile.TemporaryFile("w+", encoding="utf-8", dir=directory) for _ in range(n_wirings)
        ]
        self._count = [0] * n_wirings
        self.nonfinite = 0
        self.nonfinite_samples: set[int] = set()

    def add(self, wiring: int, rows: Iterable[dict]) -> None:
        f = self._files[wiring]
        for row in rows:
            clean, bad = json_safe(row)
            if bad:
                self.nonfinite += bad
                self.nonfinite_samples.add(int(row.get("sample", -1)))
            f.write(("," if self._count[wiring] else "") + json.dumps(clean, allow_nan=False))
            self._count[wiring] += 1

    def count(self, wiring: int) -> int:
        return self._count[wiring]

    def chunks(self, wiring: int, size: int = 1 << 20) -> Iterator[str]:
        """The wiring's positions as the text inside a JSON array, in chunks."""
        f = self._files[wiring]
        f.flush()
        f.seek(0)
        while chunk := f.read(size):
            yield chunk

    def close(self) -> None:
        for f in self._files:
            f.close()
