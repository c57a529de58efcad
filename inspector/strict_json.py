"""JSON has no NaN or Infinity: the one cleaning every writer of JSON (the CLI's reports, the
eval position spool, the app's sample export) applies before a strict `json.dumps`."""

from __future__ import annotations

import math
from typing import Any


def json_safe(obj: Any) -> tuple[Any, int]:
    """A copy of `obj` with every NaN / +-Inf float replaced by None, and how many were."""
    count = 0

    def walk(x: Any) -> Any:
        nonlocal count
        if isinstance(x, float):
            if math.isfinite(x):
                return x
            count += 1
            return None
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [walk(v) for v in x]
        return x

    return walk(obj), count
