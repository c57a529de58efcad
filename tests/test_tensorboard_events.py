"""TensorBoard event files without TensorBoard (`commands/tensorboard_events.py`): the checksum's
known answer, the bytes TensorBoard's own writer makes for the same events, and `sweep
--tensorboard` read back scalar by scalar against the sweep's JSON."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.cli import main
from inspector.commands.tensorboard_events import crc32c, event, record

# Written by TensorBoard 2.21 (`RecordWriter` over `event_pb2.Event`): the file version at
# wall time 1.5e9, then accept_length 2.25 at step 50, 2.5 at 100 and per_depth/1 0.625 at 100,
# each at wall time 1.5e9 + step.
GOLDEN = bytes.fromhex(
    "1800000000000000a37f4b2209000000c00b5ad6411a0d627261696e2e4576656e743a324ca9a464310000000000"
    "00009d8383e909000080cc0b5ad64110322a240a220a1b6561676c652d696e73706563742f6163636570745f6c65"
    "6e6774681500001040f137aa0f31000000000000009d8383e909000000d90b5ad64110642a240a220a1b6561676c"
    "652d696e73706563742f6163636570745f6c656e6774681500002040c02e9ced2f000000000000006d5d1d500900"
    "0000d90b5ad64110642a220a200a196561676c652d696e73706563742f7065725f64657074682f31150000203fb7"
    "21e77a"
)


def test_crc32c_known_answer():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(b"") == 0


def test_the_bytes_are_tensorboards_own():
    out = record(event(1.5e9, 0, file_version="brain.Event:2"))
    for step, tag, value in (
        (50, "eagle-inspect/accept_length", 2.25),
        (100, "eagle-inspect/accept_length", 2.5),
        (100, "eagle-inspect/per_depth/1", 0.625),
    ):
        out += record(event(1.5e9 + step, step, scalar=(tag, value)))
    assert out == GOLDEN


def _fields(buf: bytes) -> list[tuple[int, object]]:
    """(field number, value) of a protobuf message: varints as ints, fixed64 / fixed32 as raw
    bytes, length-delimited as bytes."""
    out, i = [], 0

    def varint() -> int:
        nonlocal i
        n = shift = 0
        while True:
            b = buf[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return n

    while i < len(buf):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, varint()))
        elif wire == 1:
            out.append((number, buf[i : i + 8]))
            i += 8
        elif wire == 5:
            out.append((number, buf[i : i + 4]))
            i += 4
        else:
            n = varint()
            out.append((number, buf[i : i + n]))
            i += n
    return out


def read_scalars(path: Path) -> tuple[str, list[tuple[int, str, float]]]:
    """The file version and every (step, tag, value) of an event file, each record's checksums
    checked."""
    data, i, events = path.read_bytes(), 0, []
    while i < len(data):
        (n,) = struct.unpack_from("<Q", data, i)
        head, payload = data[i : i + 8], data[i + 12 : i + 12 + n]
        assert record(payload)[:12] == data[i : i + 12] and head == data[i : i + 8]
        assert record(payload) == data[i : i + 16 + n]  # both masked checksums
        events.append(dict(_fields(payload)))
        i += 16 + n
    version = events[0][3].decode()
    scalars = []
    for e in events[1:]:
        (value,) = [dict(_fields(v)) for _, v in _fields(e[5])]
        scalars.append((e.get(2, 0), value[1].decode(), struct.unpack("<f", value[2])[0]))
    return version, scalars


@pytest.fixture
def tiny_run(tiny_synthetic, tmp_path):
    draft, samples = tiny_synthetic
    g = torch.Generator().manual_seed(0)
    run = tmp_path / "run"
    for i in range(3):
        dst = run / f"epoch_{i}_step_{(i + 1) * 50}"
        dst.mkdir(parents=True)
        shutil.copy(draft / "config.json", dst / "config.json")
        w = load_file(str(draft / "model.safetensors"))
        w["fc.weight"] = w["fc.weight"] + 0.3 * torch.randn(w["fc.weight"].shape, generator=g)
        save_file(w, str(dst / "model.safetensors"))
    return run, samples


def test_sweep_writes_its_figures_as_scalars_against_the_step(tiny_run, tmp_path, capsys):
    run, samples = tiny_run
    logs = tmp_path / "logs"
    argv = ["sweep", str(run), str(samples), "--device", "cpu", "--fresh", "--json", "--steps", "2"]
    capsys.readouterr()
    assert main([*argv, "--tensorboard", str(logs)]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    (path,) = logs.glob("events.out.tfevents.*")
    assert str(path) in out.err
    version, scalars = read_scalars(path)
    assert version == "brain.Event:2"
    got = {(step, tag): v for step, tag, v in scalars}
    assert len(got) == len(scalars)  # one value per figure and step
    for c in doc["checkpoints"]:
        s = c["step"]
        assert got[(s, "eagle-inspect/accept_length")] == pytest.approx(c["accept_length"])
        est = got[(s, "eagle-inspect/acceptance_length_estimate")]
        assert est == pytest.approx(c["estimate"])
        for k, v in enumerate(c["per_depth"]):
            assert got[(s, f"eagle-inspect/per_depth/{k + 1}")] == pytest.approx(v)
        for k, v in enumerate(c["step_acc"]):
            assert got[(s, f"eagle-inspect/all_tok_acc/step_{k}")] == pytest.approx(v)
    assert {s for s, _ in got} == {50, 100, 150}


def test_sweep_never_writes_its_scalars_into_the_run(tiny_run, capsys):
    run, samples = tiny_run
    before = sorted(p.name for p in run.rglob("*"))
    capsys.readouterr()
    rc = main(["sweep", str(run), str(samples), "--fresh", "--tensorboard", str(run / "tb")])
    err = capsys.readouterr().err
    assert rc == 2 and "--tensorboard" in err and "never written" in err
    assert sorted(p.name for p in run.rglob("*")) == before
