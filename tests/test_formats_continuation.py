"""The target's continuation past a request's stop, as capture writes it beside a speculators v1
sample: read when whole, refused in one line naming the file and the key otherwise."""

from __future__ import annotations

import pytest
import torch

from inspector.errors import InputError
from inspector.formats.samples import load_sample


def _write(path, **extra):
    data = {
        "input_ids": torch.arange(6),
        "hidden_states": [torch.randn(6, 8), torch.randn(6, 8)],
        "loss_mask": torch.tensor([0, 0, 1, 1, 1, 1]),
        **extra,
    }
    torch.save(data, path)
    return path


def _cont(c: int = 3, **over):
    d = {
        "continuation_ids": torch.arange(c),
        "continuation_hidden_states": [torch.randn(c, 8), torch.randn(c, 8)],
        "finish_reason": "stop",
    }
    d.update(over)
    return d


def test_a_whole_continuation_is_read_and_none_is_none(tmp_path):
    s = load_sample(_write(tmp_path / "a.pt", **_cont()))
    assert s.continuation is not None
    assert s.continuation.length == 3 and s.continuation.finish == "stop"
    assert [t.shape for t in s.continuation.slots] == [(3, 8), (3, 8)]
    assert s.length == 6  # the request is unchanged
    assert load_sample(_write(tmp_path / "b.pt")).continuation is None
    # an empty continuation (no room past the stop) still says how the request stopped
    s = load_sample(_write(tmp_path / "c.pt", **_cont(0, finish_reason="length")))
    assert s.continuation.length == 0 and s.continuation.finish == "length"
    one = load_sample(_write(tmp_path / "d.pt", **_cont(1)))
    assert one.continuation.length == 1
    assert s.prefix(4).continuation is None  # a prefix stops nowhere the target stopped


@pytest.mark.parametrize(
    ("over", "field", "message"),
    [
        ({"finish_reason": None}, "finish_reason", "missing beside continuation_ids"),
        ({"finish_reason": "eos"}, "finish_reason", "'eos': one of length, stop"),
        (
            {"continuation_hidden_states": [torch.randn(3, 8)]},
            "continuation_hidden_states",
            "1 slots; the sample has 2",
        ),
        (
            {"continuation_hidden_states": [torch.randn(3, 8), torch.randn(2, 8)]},
            "continuation_hidden_states[1]",
            "shape (2, 8), expected [3, hidden]",
        ),
        (
            {"continuation_hidden_states": [torch.randn(3, 4), torch.randn(3, 4)]},
            "continuation_hidden_states",
            "widths differ from the sample's slots",
        ),
        ({"continuation_ids": torch.tensor([1.0, 2.0])}, "continuation_ids", "dtype torch.float32"),
        (
            {"continuation_ids": torch.tensor([1, 999, 2])},
            "continuation_ids",
            "token id 999 at position 1 is outside the vocabulary [0, 100)",
        ),
    ],
)
def test_a_broken_continuation_is_one_line(tmp_path, over, field, message):
    extra = _cont(**{k: v for k, v in over.items() if v is not None})
    for k, v in over.items():
        if v is None:
            del extra[k]
    path = _write(tmp_path / "x.pt", **extra)
    with pytest.raises(InputError) as e:
        load_sample(path, vocab_size=100)
    assert e.value.path == str(path) and e.value.field == field
    assert message in e.value.message and "\n" not in str(e.value)
