"""Which draft a wiring key of the app feeds: the first (`open CKPT`) or the second
(`open --compare CKPT_B`).

Every cache, total, pin, fill and job of the app is keyed by a wiring key (`WiringKey`, a tuple of
slot indices). The second draft's keys carry a marker before their slots, so the same machinery
keeps the two drafts apart with no other change: switching to draft B is switching to one of its
wirings (`B`), pinning draft A under its wiring as the reference makes every side-by-side figure
and the flipped-position jumps (`f` / `F`) compare the two drafts, and the set's totals fill for
both. Slot indices are never negative, so the marker cannot be a slot. No torch, no Textual.
"""

from __future__ import annotations

from collections.abc import Sequence

from inspector.wiring import WiringKey

SECOND = -1  # the marker before the slots of a key of the second draft


def is_second(key: Sequence[int]) -> bool:
    """Whether `key` feeds the second draft."""
    return len(key) > 0 and key[0] == SECOND


def slots_of(key: Sequence[int]) -> WiringKey:
    """The slots feeding fc, whichever draft the key feeds."""
    return tuple(key[1:]) if is_second(key) else tuple(key)


def second_key(slots: Sequence[int]) -> WiringKey:
    """The key of the second draft fed `slots`."""
    if any(s < 0 for s in slots):
        raise ValueError(f"slots are never negative: {tuple(slots)}")
    return (SECOND, *slots)


def draft_letter(key: Sequence[int]) -> str:
    """'A' for the first draft's keys, 'B' for the second's (as the views name them)."""
    return "B" if is_second(key) else "A"


def switched(
    left: dict[str, WiringKey],
    current: WiringKey,
    first_a: WiringKey | None,
    first_b: WiringKey | None,
) -> WiringKey | None:
    """The key `B` switches to from `current`: the other draft's as it was left (`left`, by
    letter), else its first wiring (`first_a`: the app's initial one; `first_b`: the second
    draft's --compare-wiring, as plain slots, None while it is not loaded); `current` is
    recorded in `left`."""
    if first_b is None:
        return None
    to = "A" if is_second(current) else "B"
    target = left.get(to, second_key(first_b) if to == "B" else first_a)
    if target is not None:
        left[draft_letter(current)] = current
    return target
