"""What each engine feeds a draft whose config names no aux layer ids: its default layers.

vLLM falls back to `(2, L//2, L-3)` as HF indices (its ids are HF indices); SGLang, before and
since PR #25454, captures `[2, L//2, L-3]` with no +1 (the +1 applies to explicit ids only). So
every engine feeds HF `[2, L//2, L-3]`, deduplicated and ascending: on a small target two of them
coincide and the engine captures fewer states than the fc takes. A draft trained on other layers
collapses (vllm#50170: 1.036 accepted tokens per step instead of 2.77).

The doctor scores that wiring when the samples hold those layers (it is among the named wirings
the search keeps), else says which capture produces them. Pure: the facts come from
the engines' modules (`CaptureRelease`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inspector.doctor.serving import slots_for_hf
from inspector.engines import capture_releases
from inspector.sample import SlotInfo

# the release lines with a row of their own, each engine's module naming it
DEFAULT_ROWS = sorted(
    (c for c in capture_releases() if c.default_name is not None), key=lambda c: c.default_rank
)


@dataclass(frozen=True)
class EngineFeed:
    """The engines that feed the same default HF indices, and what the samples make of them.

    wiring: the slots holding those layers (None: the samples lack `missing`, or the engines
      cannot serve the draft); serves: False when the engines capture a state count other than
      the fc's blocks (two defaults coincide on a small target) and cannot serve the draft."""

    engines: tuple[str, ...]
    engine_keys: tuple[str, ...]
    hf: tuple[int, ...]
    wiring: tuple[int, ...] | None
    missing: tuple[int, ...]
    serves: bool

    @property
    def names(self) -> str:
        return ", ".join(self.engines)

    def to_dict(self) -> dict:
        return {
            "engines": list(self.engines),
            "hf_indices": list(self.hf),
            "wiring": list(self.wiring) if self.wiring is not None else None,
            "missing": list(self.missing),
            "serves": self.serves,
        }


def engine_defaults(
    infos: Sequence[SlotInfo], n_blocks: int, num_layers: int | None
) -> list[EngineFeed]:
    """The engines' default feeds: what they capture when the draft's config names no aux ids
    ([] when the target's layer count is unknown). Computed for any draft, so the wiring is
    scored beside the others whenever the samples hold it."""
    if num_layers is None:
        return []
    groups: dict[tuple[int, ...], list[str]] = {}
    names = {c.key: c.default_name for c in DEFAULT_ROWS}
    for row in DEFAULT_ROWS:
        cap = row.capture(None, None, num_layers)
        groups.setdefault(cap.hf_indices, []).append(row.key)
    held = {s.hf_index for s in infos if s.hf_index is not None and not s.post_norm}
    out = []
    for hf, keys in groups.items():
        serves = len(hf) == n_blocks
        missing = tuple(k for k in hf if k not in held)
        wiring = slots_for_hf(hf, infos) if serves and not missing else None
        out.append(
            EngineFeed(tuple(str(names[k]) for k in keys), tuple(keys), hf, wiring, missing, serves)
        )
    return out
