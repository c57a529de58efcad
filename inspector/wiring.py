"""Wiring: which captured slot feeds each fc column block, in order.

Presets:
- `train`: what the sample format's trainer feeds. speculators (v0/v1/v2) feed every slot but the
  verifier's last state, in order; SpecForge `.ckpt` feeds its N aux slots in order.
- `serve`: the last N slots that are not the target's post-norm final state: what an engine that
  captures only decoder-layer outputs (in ascending order) feeds.
A preset never takes one layer twice: a file may hold a layer in two slots (an fc input that is
also the verifier's last state), and no engine feeds one layer to two fc blocks.
Explicit forms: `0,1,2` (slot indices) or `embed,L3,L31` (slot labels, case-insensitive).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inspector.errors import InputError

if TYPE_CHECKING:  # the app imports this module before torch: no torch (inspector.sample) here
    from inspector.sample import SlotInfo

PRESETS = ("train", "serve")

WiringKey = tuple[int, ...]  # a wiring's slots, as the views key their caches and rows by it


@dataclass(frozen=True)
class Wiring:
    slots: WiringKey  # slot index feeding fc block 0..N-1

    def label(self, infos: Sequence[SlotInfo]) -> str:
        return (
            "[" + ", ".join(infos[i].label if i < len(infos) else f"s{i}" for i in self.slots) + "]"
        )

    def key(self) -> str:
        return ",".join(map(str, self.slots))

    def __len__(self) -> int:
        return len(self.slots)


def _enough(preset: str, candidates: list[int], n_blocks: int, kind: str) -> list[int]:
    if len(candidates) < n_blocks:
        raise InputError(
            None,
            "wiring",
            f"preset '{preset}' needs {n_blocks} {kind} slots, the samples have {len(candidates)}",
        )
    return candidates


def _distinct(slots: Sequence[int], infos: Sequence[SlotInfo]) -> list[int]:
    """`slots` in order, each layer once (the first slot that holds it)."""
    seen: set[object] = set()
    out = []
    for i in slots:
        s = infos[i]
        layer = ("hf", s.hf_index) if s.hf_index is not None else ("label", s.label)
        if layer not in seen:
            seen.add(layer)
            out.append(i)
    return out


def train_wiring(infos: Sequence[SlotInfo], n_blocks: int) -> Wiring:
    """The first fc-width run of slots the trainers capture (every slot but the verifier's)."""
    candidates = _distinct([i for i, s in enumerate(infos) if not s.verifier], infos)
    return Wiring(tuple(_enough("train", candidates, n_blocks, "non-verifier")[:n_blocks]))


def serve_wiring(infos: Sequence[SlotInfo], n_blocks: int) -> Wiring:
    """The last pre-norm slots: what an engine that appends the last layer feeds."""
    pre_norm = [i for i, s in enumerate(infos) if not s.post_norm]
    candidates = _distinct(pre_norm[::-1], infos)[::-1]
    return Wiring(tuple(_enough("serve", candidates, n_blocks, "pre-norm")[-n_blocks:]))


def preset(name: str, infos: Sequence[SlotInfo], n_blocks: int) -> Wiring:
    if name == "train":
        return train_wiring(infos, n_blocks)
    if name == "serve":
        return serve_wiring(infos, n_blocks)
    raise InputError(None, "wiring", f"unknown preset {name!r} (train, serve)")


def preset_name(text: str | Sequence[int]) -> str | None:
    """The preset `text` names ("train", "serve"; any case, spaces around), else None."""
    if isinstance(text, str) and text.strip().lower() in PRESETS:
        return text.strip().lower()
    return None


def named_label(wiring: Wiring, infos: Sequence[SlotInfo], name: str | None = None) -> str:
    """How every view labels a wiring: its slots, after its name when it has one (a preset, or
    "configured"): "train [embed, L2, L4]"."""
    slots = wiring.label(infos)
    return f"{name} {slots}" if name else slots


def parse_wiring(text: str | Sequence[int], infos: Sequence[SlotInfo], n_blocks: int) -> Wiring:
    """A wiring from a preset name, `0,1,2`, `embed,L3,L31` or a sequence of ints; validated."""
    if isinstance(text, str):
        t = text.strip()
        name = preset_name(t)
        if name is not None:
            return preset(name, infos, n_blocks)
        parts = [p.strip() for p in t.strip("[]").split(",") if p.strip()]
        by_label = {s.label.lower(): i for i, s in enumerate(infos)}
        slots: list[int] = []
        for p in parts:
            if p.isascii() and p.lstrip("-").isdigit():
                slots.append(int(p))
            elif p.lower() in by_label:
                slots.append(by_label[p.lower()])
            else:
                known = ", ".join(s.label for s in infos)
                raise InputError(None, "wiring", f"{p!r} names no slot (slots: {known})")
    else:
        slots = [int(i) for i in text]
    w = Wiring(tuple(slots))
    validate(w, infos, n_blocks)
    return w


def validate(w: Wiring, infos: Sequence[SlotInfo], n_blocks: int) -> None:
    if len(w.slots) != n_blocks:
        raise InputError(
            None, "wiring", f"{list(w.slots)} has {len(w.slots)} slots; fc takes {n_blocks}"
        )
    for i in w.slots:
        if i < 0 or i >= len(infos):
            raise InputError(
                None,
                "wiring",
                f"slot {i} does not exist (the samples have slots 0..{len(infos) - 1})",
            )
