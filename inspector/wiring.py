"""Wiring: which captured slot feeds each fc column block, in order.

Presets mean layers, not positions: each resolves through the samples' HF indices
(`SlotInfo.hf_index`), whatever layers and order the samples hold.
- `train`: the layers the draft's trainer fed: its configured aux ids as HF indices
  (`configured_layers`: when they read one way, repeat no layer and name no negative index), each
  looked up by HF index among the pre-norm slots, in slot order. Where the draft names no such ids
  or the samples lack one of its layers, the trainers' positional rule: speculators (v0/v1/v2)
  feed every slot but the verifier's last state, in order; SpecForge `.ckpt` its N aux slots.
- `serve`: what an engine that captures decoder-layer outputs (and appends the target's last
  layer) feeds: the train layers without the embedding (HF 0) plus the last layer (the
  verifier's pre-norm state), the last N of them in ascending order. Where HF indices are
  unknown (or no pre-norm verifier slot names the last layer), the last N slots that are not the
  target's post-norm final state.
A preset never takes one layer twice: a file may hold a layer in two slots (an fc input that is
also the verifier's last state), and no engine feeds one layer to two fc blocks.
Explicit forms: `0,1,2` (slot indices) or `embed,L3,L31` (slot labels, case-insensitive).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inspector.engines.capture import EAGLE_CONFIG
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


SGLANG_IDS = EAGLE_CONFIG  # DraftConfig.aux_layer_convention of eagle_config's ids


def id_readings(aux_ids: Sequence[int] | None, convention: str | None) -> list[list[int]]:
    """HF indices a config's aux ids select: one list, or two for SGLang's eagle_config ids
    (before / since sglang PR #25454: +1 to every id; +1 only when the first id is 1)."""
    if not aux_ids:
        return []
    ids = [int(i) for i in aux_ids]
    if convention == SGLANG_IDS:
        pre = [i + 1 for i in ids]
        since = pre if ids[0] == 1 else ids
        return [pre] if since == pre else [pre, since]
    return [ids]


def configured_layers(
    aux_ids: Sequence[int] | None, convention: str | None
) -> tuple[int, ...] | None:
    """The HF indices a draft's configured aux ids name, when they read one way and are well
    formed (no layer twice, no negative index); else None (the presets then fall back to the
    slots' positions)."""
    readings = [
        r for r in id_readings(aux_ids, convention) if min(r) >= 0 and len(set(r)) == len(r)
    ]
    return tuple(readings[0]) if len(readings) == 1 else None


def _slot_of_layer(infos: Sequence[SlotInfo]) -> dict[int, int]:
    """HF index -> the first pre-norm slot that holds it."""
    by_hf: dict[int, int] = {}
    for i, s in enumerate(infos):
        if s.hf_index is not None and not s.post_norm:
            by_hf.setdefault(s.hf_index, i)
    return by_hf


def _held(layers: Sequence[int] | None, infos: Sequence[SlotInfo], n_blocks: int) -> Wiring | None:
    """The slots holding `layers` (HF indices, each once), in slot order; None when `layers`
    is not n_blocks distinct layers the samples all hold."""
    if layers is None or len(layers) != n_blocks or len(set(layers)) != len(layers):
        return None
    by_hf = _slot_of_layer(infos)
    if any(k not in by_hf for k in layers):
        return None
    return Wiring(tuple(sorted(by_hf[k] for k in layers)))


def layers_wiring(layers: Sequence[int], infos: Sequence[SlotInfo]) -> Wiring | None:
    """The slots holding `layers` (HF indices) in the order given, fc block 0 first (a block
    draft's feed, as a reader lists it); None where the samples lack one of them."""
    by_hf = _slot_of_layer(infos)
    if any(k not in by_hf for k in layers):
        return None
    return Wiring(tuple(by_hf[k] for k in layers))


def train_wiring(
    infos: Sequence[SlotInfo], n_blocks: int, layers: Sequence[int] | None = None
) -> Wiring:
    """The layers the draft's trainer fed: `layers` (its configured HF indices) where the
    samples hold them, else the first fc-width run of slots the trainers capture (every slot but
    the verifier's)."""
    by_layer = _held(layers, infos, n_blocks)
    if by_layer is not None:
        return by_layer
    candidates = _distinct([i for i, s in enumerate(infos) if not s.verifier], infos)
    return Wiring(tuple(_enough("train", candidates, n_blocks, "non-verifier")[:n_blocks]))


def _last_layer(infos: Sequence[SlotInfo]) -> int | None:
    """The target's last layer as an HF index: the verifier's pre-norm last state's."""
    last = [s.hf_index for s in infos if s.verifier and not s.post_norm and s.hf_index is not None]
    return last[-1] if last else None


def serve_wiring(
    infos: Sequence[SlotInfo], n_blocks: int, layers: Sequence[int] | None = None
) -> Wiring:
    """What an engine that captures decoder-layer outputs and appends the last layer feeds: the
    train layers but the embedding, plus the last layer, the last N in ascending order; where HF
    indices are unknown, the last pre-norm slots."""
    last = _last_layer(infos)
    try:
        train = train_wiring(infos, n_blocks, layers)
    except InputError:
        train = None
    if train is not None and last is not None:
        hf = [infos[i].hf_index for i in train.slots]
        if all(k is not None for k in hf):
            fed = sorted({k for k in hf if k != 0} | {last})
            if len(fed) >= n_blocks:
                by_hf = _slot_of_layer(infos)
                return Wiring(tuple(by_hf[k] for k in fed[-n_blocks:]))
    pre_norm = [i for i, s in enumerate(infos) if not s.post_norm]
    candidates = _distinct(pre_norm[::-1], infos)[::-1]
    return Wiring(tuple(_enough("serve", candidates, n_blocks, "pre-norm")[-n_blocks:]))


def preset(
    name: str, infos: Sequence[SlotInfo], n_blocks: int, layers: Sequence[int] | None = None
) -> Wiring:
    """Preset `name` over the slots; `layers`: the draft's configured HF indices
    (`configured_layers`), None where it names none."""
    if name == "train":
        return train_wiring(infos, n_blocks, layers)
    if name == "serve":
        return serve_wiring(infos, n_blocks, layers)
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


def parse_wiring(
    text: str | Sequence[int],
    infos: Sequence[SlotInfo],
    n_blocks: int,
    layers: Sequence[int] | None = None,
) -> Wiring:
    """A wiring from a preset name, `0,1,2`, `embed,L3,L31` or a sequence of ints; validated.
    `layers`: the draft's configured HF indices the presets resolve through (`preset`)."""
    if isinstance(text, str):
        t = text.strip()
        name = preset_name(t)
        if name is not None:
            return preset(name, infos, n_blocks, layers)
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
