"""Wiring presets, parsing and validation."""

from __future__ import annotations

import pytest

from inspector.errors import InputError
from inspector.sample import SlotInfo
from inspector.wiring import Wiring, parse_wiring, preset, serve_wiring, train_wiring, validate

SPEC = [
    SlotInfo("embed", 0),
    SlotInfo("L3", 3),
    SlotInfo("L31", 31),
    SlotInfo("L59", 59, verifier=True),
]
FORGE = [
    SlotInfo("L2", 2),
    SlotInfo("L30", 30),
    SlotInfo("L58", 58),
    SlotInfo("final", post_norm=True, verifier=True),
]


def test_train_preset_skips_the_verifier_slot_and_keeps_order():
    assert train_wiring(SPEC, 3) == Wiring((0, 1, 2))
    assert train_wiring(SPEC, 2) == Wiring((0, 1))
    assert train_wiring(FORGE, 3) == Wiring((0, 1, 2))


def test_serve_preset_takes_the_last_pre_norm_slots():
    assert serve_wiring(SPEC, 3) == Wiring((1, 2, 3))  # the verifier's pre-norm state is capturable
    assert serve_wiring(FORGE, 3) == Wiring((0, 1, 2))  # a post-norm state is not
    assert serve_wiring(SPEC, 4) == Wiring((0, 1, 2, 3))


def test_presets_need_enough_slots():
    msg = "preset 'train' needs 4 non-verifier slots, the samples have 3"
    with pytest.raises(InputError, match=msg) as e1:
        train_wiring(SPEC, 4)
    msg = "preset 'serve' needs 4 pre-norm slots, the samples have 3"
    with pytest.raises(InputError, match=msg) as e2:
        serve_wiring(FORGE, 4)
    with pytest.raises(InputError, match=r"unknown preset 'best' \(train, serve\)") as e3:
        preset("best", SPEC, 3)
    assert e1.value.field == e2.value.field == e3.value.field == "wiring"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("train", (0, 1, 2)),
        ("SERVE", (1, 2, 3)),
        (" 2,1,0 ", (2, 1, 0)),
        ("[0, 3, 1]", (0, 3, 1)),
        ("[[2,0,1]]", (2, 0, 1)),
        ("embed,l3,L31", (0, 1, 2)),
        ("L59,embed,L3", (3, 0, 1)),
        ((1, 2, 3), (1, 2, 3)),
        ([3, 2, 1], (3, 2, 1)),
    ],
)
def test_parse(text, expected):
    assert parse_wiring(text, SPEC, 3).slots == expected


@pytest.mark.parametrize(
    "text,message",
    [
        ("0,1", r"\[0, 1\] has 2 slots; fc takes 3"),
        ("0,1,2,3", "has 4 slots; fc takes 3"),
        ("0,1,4", r"slot 4 does not exist \(the samples have slots 0..3\)"),
        ("0,-1,2", "slot -1 does not exist"),
        ("0,1,L7", r"'L7' names no slot \(slots: embed, L3, L31, L59\)"),
        ("0,1,٢", "names no slot"),  # a non-ASCII digit is not a slot index
    ],
)
def test_parse_errors(text, message):
    with pytest.raises(InputError, match=message) as e:
        parse_wiring(text, SPEC, 3)
    assert e.value.field == "wiring"


def test_validate_and_labels():
    validate(Wiring((0, 1, 2)), SPEC, 3)
    w = Wiring((3, 0, 1))
    assert w.label(SPEC) == "[L59, embed, L3]"
    assert Wiring((0, 9)).label(SPEC) == "[embed, s9]"
    assert Wiring((0, 4)).label(SPEC) == "[embed, s4]"  # one past the last slot
    assert w.key() == "3,0,1" and len(w) == 3
