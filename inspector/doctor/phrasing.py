"""Phrasing the checks share: a finding's two texts, and the command lines they quote.

A leaf: it imports no check (each check words its own findings, in its own module).
"""

from __future__ import annotations

from typing import NamedTuple


class Text(NamedTuple):
    """A finding's words: what is wrong (or fine), and the fix ("" when none is needed)."""

    summary: str
    fix: str = ""


# The fix for an order no engine can feed (the wiring and serving findings quote it).
WRITE_FIXED = "eagle-inspect doctor CKPT SAMPLES --write-fixed OUT"
