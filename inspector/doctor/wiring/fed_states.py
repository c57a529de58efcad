"""What an engine feeds the draft's fc blocks, as the wiring that replays it.

An engine's feed is the HF index reaching each fc block, in block order (`engine_reading`'s
`EngineRead.fed`). Two things differ from a plain wiring of the samples' slots:

- the order: llama.cpp concatenates the states in the order its ids are listed, so `[4, 2, 0]`
  is fed as `[L4, L2, embed]`; vLLM and SGLang capture in layer order (ascending).
- a block fed nothing (None): llama.cpp captures the input of layer i, and on a Llama-family
  target there is no layer L, so an id equal to the layer count leaves its block at zeros (the
  `speculative-simple` example zeroes the buffer; `llama-server` leaves whatever the buffer held
  before, zeros on a fresh server), with no warning. A block fed zeros contributes nothing to
  fc's output, which is what the draft computes with that block's fc columns zeroed: the
  replay runs that draft (`silenced`). Where one norm spans the whole concatenation
  (`norm_before_fc`) a zero block still changes the others' scale, and this form does not hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inspector.draft import Draft
    from inspector.sample import SlotInfo

NOTHING = "nothing"  # how a block fed nothing is labelled


def silent_blocks(fed: Sequence[int | None]) -> tuple[int, ...]:
    """The fc blocks the feed leaves at zeros."""
    return tuple(b for b, k in enumerate(fed) if k is None)


def slots_fed(fed: Sequence[int | None], infos: Sequence[SlotInfo]) -> tuple[int, ...] | None:
    """The slots holding the fed HF indices, in block order (None where one is not captured). A
    block fed nothing takes the first slot: its fc columns are zeroed, so what it holds does not
    reach the output."""
    by_hf: dict[int, int] = {}
    for i, s in enumerate(infos):
        if s.hf_index is not None and not s.post_norm:
            by_hf.setdefault(s.hf_index, i)
    try:
        return tuple(0 if k is None else by_hf[k] for k in fed)
    except KeyError:
        return None


def fed_label(fed: Sequence[int | None], infos: Sequence[SlotInfo]) -> str:
    """'[L2, L4, nothing]': the slots' labels, `nothing` where a block is fed nothing."""
    by_hf = {s.hf_index: s.label for s in infos if s.hf_index is not None and not s.post_norm}
    return "[" + ", ".join(NOTHING if k is None else by_hf.get(k, f"HF {k}") for k in fed) + "]"


def can_silence(draft: Draft) -> bool:
    """Whether zeroed fc columns replay a block fed zeros (not under one norm over all blocks)."""
    return not draft.config.norm_before_fc


def silenced(draft: Draft, blocks: Sequence[int]) -> Draft:
    """The draft with these fc blocks' input columns zeroed: what it computes when the engine
    feeds those blocks zeros. A copy; the draft given is not modified."""
    if not can_silence(draft):
        raise ValueError("norm_before_fc: a zero block changes the norm over every block")
    ht = draft.config.target_hidden_size
    fc = draft.weights["fc.weight"].clone()
    for b in blocks:
        fc[:, b * ht : (b + 1) * ht] = 0
    return replace(draft, weights={**draft.weights, "fc.weight": fc})
