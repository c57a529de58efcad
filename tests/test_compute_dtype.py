"""The dtype a draft is computed in: float32 on a CPU for a half-precision draft (where the copy
fits), the stored dtype on a GPU or when named, and the header and JSON saying so."""

from __future__ import annotations

import json

import pytest
import torch

from inspector.errors import InputError
from inspector.formats import load_draft
from inspector.formats.compute_dtype import UPCAST_SHARE, compute_dtype
from inspector.synthetic import SyntheticSpec, write_synthetic

GIB = 2**30


@pytest.mark.parametrize("stored", [torch.bfloat16, torch.float16])
def test_auto_on_a_cpu_upcasts_half_precision_and_says_how_to_keep_it(stored):
    c = compute_dtype("auto", stored, device="cpu", float_bytes=GIB, available=16 * GIB)
    assert (c.dtype, c.stored) == (torch.float32, stored)
    name = str(stored).removeprefix("torch.")
    assert c.note == (
        f"computing in float32 on the CPU (stored {name}, which a CPU runs several times "
        f"slower); --dtype {name} keeps the stored dtype"
    )
    assert compute_dtype(None, stored, device="cpu", float_bytes=GIB, available=16 * GIB) == c


@pytest.mark.parametrize("device", ["cuda", "cuda:1", torch.device("cuda", 0), "meta"])
def test_auto_elsewhere_keeps_the_stored_dtype(device):
    c = compute_dtype("auto", torch.bfloat16, device=device, float_bytes=GIB, available=GIB)
    assert (c.dtype, c.stored, c.note) == (torch.bfloat16, torch.bfloat16, None)


def test_a_float32_or_float64_draft_is_left_alone_on_a_cpu():
    for stored in (torch.float32, torch.float64):
        c = compute_dtype("auto", stored, device="cpu", float_bytes=GIB, available=GIB)
        assert (c.dtype, c.note) == (stored, None)


def test_named_dtypes_win_everywhere():
    for name, dt in [
        ("bfloat16", torch.bfloat16),
        ("bf16", torch.bfloat16),
        ("fp32", torch.float32),
    ]:
        c = compute_dtype(name, torch.bfloat16, device="cpu", float_bytes=GIB, available=GIB)
        assert (c.dtype, c.stored, c.note) == (dt, torch.bfloat16, None)
    c = compute_dtype(torch.float16, torch.bfloat16, device="cpu", float_bytes=1, available=GIB)
    assert (c.dtype, c.stored, c.note) == (torch.float16, torch.bfloat16, None)
    with pytest.raises(InputError, match="unknown dtype 'int8'") as e:
        compute_dtype("int8", torch.bfloat16, device="cpu", float_bytes=1, available=GIB)
    assert e.value.field == "dtype"


def test_the_upcast_stays_within_its_share_of_the_free_ram():
    """A bf16 draft of B bytes takes 2B in float32, 3B while it is cast: it is upcast while 3B
    fits in the share."""
    available = 16 * GIB
    fits = int(UPCAST_SHARE * available) // 3
    assert (
        compute_dtype(
            "auto", torch.bfloat16, device="cpu", float_bytes=fits, available=available
        ).dtype
        == torch.float32
    )
    c = compute_dtype(
        "auto", torch.bfloat16, device="cpu", float_bytes=fits + 1, available=available
    )
    assert (c.dtype, c.stored) == (torch.bfloat16, torch.bfloat16)
    assert c.note == (
        "computing in bfloat16, as stored: its float32 copy (5.3 GiB) and the stored weights "
        "would take over half of the RAM available (16.0 GiB); a CPU runs bfloat16 several "
        "times slower"
    )


@pytest.fixture(scope="module")
def bf16_draft(tmp_path_factory):
    root = tmp_path_factory.mktemp("bf16")
    write_synthetic(root, SyntheticSpec(size="tiny", n_samples=2, seq_len=24, dtype=torch.bfloat16))
    return root


def test_a_stored_bf16_draft_loads_in_float32_on_the_cpu(bf16_draft):
    stored = load_draft(bf16_draft / "draft", dtype="bfloat16")
    auto = load_draft(bf16_draft / "draft")
    assert stored.dtype == torch.bfloat16 and stored.dtype_label == "bfloat16"
    assert stored.dtype_note is None
    assert auto.dtype == torch.float32 and auto.stored_dtype == torch.bfloat16
    assert auto.dtype_label == "float32 (stored bfloat16)"
    assert "--dtype bfloat16 keeps the stored dtype" in auto.dtype_note
    for k, v in auto.weights.items():  # the same values, exactly: bf16 -> f32 is lossless
        if v.is_floating_point():
            assert v.dtype == torch.float32
            assert torch.equal(v, stored.weights[k].float()), k


def _eval(capsys, root, *extra: str) -> tuple[str, str]:
    from inspector.cli import main

    code = main(["eval", str(root / "draft"), str(root / "samples"), "--device", "cpu", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def test_eval_says_it_in_the_header_and_the_json(bf16_draft, capsys):
    out, err = _eval(capsys, bf16_draft)
    assert "cpu float32 (stored bfloat16)" in " ".join(out.split())
    assert "note: computing in float32 on the CPU (stored bfloat16" in " ".join(err.split())
    d = json.loads(_eval(capsys, bf16_draft, "--json")[0])
    assert (d["dtype"], d["stored_dtype"]) == ("float32", "bfloat16")
    d = json.loads(_eval(capsys, bf16_draft, "--json", "--dtype", "bfloat16")[0])
    assert (d["dtype"], d["stored_dtype"]) == ("bfloat16", None)
