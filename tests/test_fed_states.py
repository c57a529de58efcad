"""`doctor.wiring.fed_states`: what an engine feeds the fc blocks, as a wiring that replays it."""

from __future__ import annotations

import torch

from inspector.doctor.wiring.fed_states import (
    can_silence,
    fed_label,
    silenced,
    silent_blocks,
    slots_fed,
)
from inspector.formats.samples import v1_slot_info


def _infos():
    return v1_slot_info([0, 2, 4, 6, None])  # embed, L2, L4, L6, the post-norm final state


def test_slots_in_the_order_fed_and_a_block_fed_nothing():
    infos = _infos()
    assert slots_fed((4, 2, 0), infos) == (2, 1, 0)  # as listed, not ascending
    assert slots_fed((2, 2, 4), infos) == (1, 1, 2)  # a repeat feeds two blocks
    assert slots_fed((2, 4, None), infos) == (1, 2, 0)  # nothing: any slot, its block zeroed
    assert slots_fed((1, 2, 4), infos) is None  # L1 not captured
    assert silent_blocks((2, None, 4, None)) == (1, 3)
    assert silent_blocks((0, 2, 4)) == ()
    assert fed_label((2, 4, None), infos) == "[L2, L4, nothing]"
    assert fed_label((4, 3), infos) == "[L4, HF 3]"


def test_silenced_zeroes_only_those_blocks_and_leaves_the_draft_alone(demo):
    from inspector.formats import load_draft

    demo_draft = load_draft(demo.draft, dtype="float32", device="cpu")
    fc = demo_draft.weights["fc.weight"]
    ht = demo_draft.config.target_hidden_size
    out = silenced(demo_draft, [2])
    assert out is not demo_draft and demo_draft.weights["fc.weight"] is fc
    assert bool((fc[:, 2 * ht :] != 0).any())  # the input is untouched
    assert bool((out.weights["fc.weight"][:, 2 * ht :] == 0).all())
    assert torch.equal(out.weights["fc.weight"][:, : 2 * ht], fc[:, : 2 * ht])
    assert can_silence(demo_draft)


def test_a_post_norm_slot_is_never_what_an_engine_feeds():
    """The target's post-norm final state carries the last layer's index: an engine feeds the
    pre-norm state of that index, never the post-norm one (what mutation testing asked)."""
    from inspector.sample import SlotInfo

    infos = [
        SlotInfo("final(post-norm)", 6, post_norm=True),
        SlotInfo("embed", 0),
        SlotInfo("L6", 6),
    ]
    assert slots_fed((0, 6), infos) == (1, 2)
    assert fed_label((6, 0), infos) == "[L6, embed]"
    assert slots_fed((6,), infos[:1]) is None
    after = [SlotInfo("L6", 6), SlotInfo("final(post-norm)", 6, post_norm=True)]
    assert fed_label((6,), after) == "[L6]"


def test_silenced_zeroes_the_first_block_alone_and_refuses_norm_before_fc(demo):
    from dataclasses import replace

    import pytest

    from inspector.formats import load_draft

    draft = load_draft(demo.draft, dtype="float32", device="cpu")
    ht = draft.config.target_hidden_size
    fc = draft.weights["fc.weight"]
    out = silenced(draft, [0]).weights["fc.weight"]
    assert bool((out[:, :ht] == 0).all())
    assert torch.equal(out[:, ht:], fc[:, ht:])  # the next block untouched
    normed = replace(draft, config=replace(draft.config, norm_before_fc=True))
    assert not can_silence(normed)
    with pytest.raises(ValueError, match="^norm_before_fc: a zero block changes the norm"):
        silenced(normed, [0])
