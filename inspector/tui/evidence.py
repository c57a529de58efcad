"""A doctor finding's evidence (its facts' JSON form) as lines a person reads: one key a line,
nested keys indented, a list of records one record a line, numbers as the reports write them
(3 significant decimals at most, never 0.7162270545959473), no JSON punctuation.

Pure text, no Rich, no Textual: the doctor screen shows these lines behind a key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from inspector.formatting import printable

INDENT = "  "
MAX_ITEMS = 24  # a list longer than this shows its first items and how many more


def scalar(x: Any) -> str:
    """A leaf value: a float to at most 4 significant digits (NaN/Inf as such), booleans as
    yes/no, None as '-', text with control characters escaped."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if x is None:
        return "-"
    if isinstance(x, float):
        if math.isnan(x):
            return "NaN"
        if math.isinf(x):
            return "Inf" if x > 0 else "-Inf"
        if x == int(x) and abs(x) < 1e15:
            return str(int(x))
        return f"{x:.4g}"
    return printable(str(x))


def _is_leaf(x: Any) -> bool:
    return not isinstance(x, Mapping | list | tuple)


def _inline(x: Any) -> str | None:
    """A value on one line where it is a leaf or a short list of leaves; else None."""
    if _is_leaf(x):
        return scalar(x)
    if isinstance(x, list | tuple) and all(_is_leaf(v) for v in x):
        shown = [scalar(v) for v in x[:MAX_ITEMS]]
        more = f", … {len(x) - MAX_ITEMS} more" if len(x) > MAX_ITEMS else ""
        return "[" + ", ".join(shown) + more + "]"
    return None


def _record(d: Mapping[str, Any]) -> str | None:
    """A mapping of leaves (and short leaf lists) on one line: 'slot 0, label embed, ...'."""
    parts = []
    for k, v in d.items():
        text = _inline(v)
        if text is None:
            return None
        parts.append(f"{k} {text}")
    return ", ".join(parts)


def evidence_lines(value: Any, depth: int = 0) -> list[str]:
    """The lines of `value` (a finding's `evidence`: a dict of JSON values)."""
    pad = INDENT * depth
    if isinstance(value, Mapping):
        out: list[str] = []
        for k, v in value.items():
            text = _inline(v)
            if text is not None:
                out.append(f"{pad}{k}: {text}")
            elif isinstance(v, Mapping) and not v:
                out.append(f"{pad}{k}: -")
            else:
                out.append(f"{pad}{k}:")
                out.extend(evidence_lines(v, depth + 1))
        return out
    if isinstance(value, Sequence) and not isinstance(value, str):
        out = []
        for item in list(value)[:MAX_ITEMS]:
            rec = _record(item) if isinstance(item, Mapping) else _inline(item)
            if rec is not None:
                out.append(f"{pad}- {rec}")
            else:
                nested = evidence_lines(item, depth + 1)
                first = nested[0].lstrip() if nested else ""
                out.append(f"{pad}- {first}")
                out.extend(nested[1:])
        if len(value) > MAX_ITEMS:
            out.append(f"{pad}… {len(value) - MAX_ITEMS} more")
        return out
    return [pad + scalar(value)]
