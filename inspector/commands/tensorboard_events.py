"""TensorBoard event files, written without TensorBoard: a sweep's figures as scalars against the
training step, beside the training curves a trainer logged (`sweep --tensorboard DIR`).

The format is TensorBoard's own: a file of TFRecords (little-endian length, its masked CRC-32C,
the payload, its masked CRC-32C), each holding one serialized `Event` protocol buffer:

    Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
    Summary { repeated Value value = 1; }
    Value   { string tag = 1; float simple_value = 2; }

The first event names the file version ("brain.Event:2"); then one event per scalar. Only these
fields are written, so the few lines of protobuf encoding below are the whole of it (a test holds
the bytes to those TensorBoard's own writer makes).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable
from pathlib import Path

FILE_VERSION = "brain.Event:2"


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # Castagnoli, reflected
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum TFRecords carry."""
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def record(payload: bytes) -> bytes:
    """One TFRecord around `payload`."""
    head = struct.pack("<Q", len(payload))
    return head + struct.pack("<I", _masked(head)) + payload + struct.pack("<I", _masked(payload))


def _varint(n: int) -> bytes:
    n &= 0xFFFFFFFFFFFFFFFF  # int64 as protobuf encodes it (a negative one in ten bytes)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes(number: int, data: bytes) -> bytes:
    return _field(number, 2) + _varint(len(data)) + data


def event(wall_time: float, step: int, *, file_version: str | None = None, scalar=None) -> bytes:
    """One serialized Event: the file version, or one scalar (tag, value)."""
    out = _field(1, 1) + struct.pack("<d", wall_time)
    if step:
        out += _field(2, 0) + _varint(step)
    if file_version is not None:
        out += _bytes(3, file_version.encode())
    if scalar is not None:
        tag, value = scalar
        v = _bytes(1, str(tag).encode()) + _field(2, 5) + struct.pack("<f", float(value))
        out += _bytes(5, _bytes(1, v))
    return out


def write_scalars(
    folder: Path, scalars: Iterable[tuple[int, str, float]], *, wall_time: float | None = None
) -> Path:
    """An event file in `folder` (made if missing) with every (step, tag, value); its path. Named
    as TensorBoard names its own, so `tensorboard --logdir` finds it."""
    folder.mkdir(parents=True, exist_ok=True)
    t = time.time() if wall_time is None else wall_time
    path = folder / f"events.out.tfevents.{int(t)}.{socket.gethostname()}.eagle-inspect"
    with open(path, "wb") as f:
        f.write(record(event(t, 0, file_version=FILE_VERSION)))
        for step, tag, value in scalars:
            f.write(record(event(t, int(step), scalar=(tag, value))))
    return path
