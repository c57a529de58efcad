"""What a weight or sample file declares, checked against what it stores, before any data is read.

A torch `.pt` / `.bin` file (torch >= 1.6) is a zip archive: `<name>/data.pkl` is a pickle that
describes the objects, and every tensor storage is a separate record `<name>/data/<key>`. The
pickle names each storage as `('storage', <storage type>, <key>, <location>, <element count>)`.
Two things can make a small file cost gigabytes: a compressed record (torch inflates it in memory)
and a storage that declares more bytes than its record holds (read past the record, or allocated
before the mismatch is noticed). `check_torch_zip` refuses both from the zip directory and the
pickle's opcodes alone, without building a single object. The pre-zip pickle format (torch < 1.6)
cannot be checked this way and is refused.

A safetensors file is an 8-byte little-endian header length, a JSON header mapping each tensor
name to `{dtype, shape, data_offsets: [begin, end]}` (offsets relative to the end of the header),
then the data. `safetensors_header` checks every declared range lies within the file and matches
its shape and dtype.
"""

from __future__ import annotations

import json
import math
import pickletools
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

from inspector.errors import InputError
from inspector.formats.files import check_regular, one_line, os_text

MAX_PICKLE_BYTES = 32 * 1024 * 1024  # data.pkl describes tensors; ~150 bytes per tensor
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024  # the safetensors library's own limit

# Bytes per element of each storage type a torch pickle can name (UntypedStorage counts bytes).
STORAGE_ITEMSIZE = {
    "FloatStorage": 4,
    "DoubleStorage": 8,
    "HalfStorage": 2,
    "BFloat16Storage": 2,
    "LongStorage": 8,
    "IntStorage": 4,
    "ShortStorage": 2,
    "CharStorage": 1,
    "ByteStorage": 1,
    "BoolStorage": 1,
    "ComplexFloatStorage": 8,
    "ComplexDoubleStorage": 16,
    "QUInt8Storage": 1,
    "QInt8Storage": 1,
    "QInt32Storage": 4,
    "QUInt4x2Storage": 1,
    "QUInt2x4Storage": 1,
    "UntypedStorage": 1,
}

SAFETENSORS_ITEMSIZE = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "C64": 8,
    "F64": 8,
    "I64": 8,
    "U64": 8,
}


@dataclass(frozen=True)
class TensorHeader:
    """One tensor as a safetensors header declares it."""

    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute byte offsets in the file
    end: int


_REBUILD = ("torch._utils _rebuild_tensor_v2", "torch._utils _rebuild_tensor_v3")
# Element sizes of the dtypes torch saves through an UntypedStorage (`_rebuild_tensor_v3`).
V3_ITEMSIZE = {"uint16": 2, "uint32": 4, "uint64": 8, "int4": 1}


@dataclass(frozen=True)
class _PickleScan:
    storages: list  # every persistent id, as stored
    tensors: list  # (persistent id, offset, size, stride, v3 dtype name or None) per tensor


def _scan(pkl: bytes) -> _PickleScan:
    """The storages and tensor views a torch pickle declares, read from its opcodes alone.

    A model stack tracks literal values only (strings, numbers, globals as 'module name', tuples
    of those); everything else is a placeholder, so nothing is imported, called or built.
    """
    stack: list = []
    marks: list[int] = []
    memo: dict = {}
    scan = _PickleScan([], [])
    for op, arg, _pos in pickletools.genops(pkl):
        name = op.name
        if name == "MARK":
            marks.append(len(stack))
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = stack[-1]
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif name == "GLOBAL":
            stack.append(("global", arg))  # genops gives "module name"
        elif name == "STACK_GLOBAL":
            mod, attr = stack.pop(-2), stack.pop()
            stack.append(("global", f"{mod} {attr}"))
        elif name == "TUPLE":
            start = marks.pop()
            items = tuple(stack[start:])
            del stack[start:]
            stack.append(items)
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            items = tuple(stack[-n:])
            del stack[-n:]
            stack.append(items)
        elif name == "EMPTY_TUPLE":
            stack.append(())
        elif name in ("BINPERSID", "PERSID"):
            pid = stack.pop() if name == "BINPERSID" else arg
            scan.storages.append(pid)
            stack.append(("pid", pid))
        elif name == "REDUCE":
            func, args = stack.pop(-2), stack.pop()
            _note_tensor(scan, func, args)
            stack.append(None)
        elif op.arg is not None and not op.stack_before and len(op.stack_after) == 1:
            stack.append(arg)  # a literal: string, bytes, number
        else:
            before = op.stack_before
            if pickletools.markobject in before:
                del stack[marks.pop() :]
                n = before.index(pickletools.markobject)
            else:
                n = len(before)
            if n > len(stack):
                raise ValueError(f"stack underflow at {name}")
            if n:
                del stack[-n:]
            stack.extend([None] * len(op.stack_after))
    return scan


def _note_tensor(scan: _PickleScan, func: object, args: object) -> None:
    if not (isinstance(func, tuple) and func[:1] == ("global",) and func[1] in _REBUILD):
        return
    if not (isinstance(args, tuple) and len(args) >= 4 and isinstance(args[0], tuple)):
        return
    if args[0][:1] != ("pid",):
        return
    dtype = args[6][1].split()[-1] if len(args) > 6 and isinstance(args[6], tuple) else None
    scan.tensors.append((args[0][1], args[1], args[2], args[3], dtype))


def _declared_bytes(path: Path, pid: object) -> tuple[str, int]:
    """(record key, bytes) of one ('storage', type, key, location, numel) persistent id."""
    if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
        raise InputError(path, "data.pkl", f"unexpected persistent id {one_line(repr(pid))[:80]}")
    _, stype, key, _location, numel = pid
    kind = stype[1].split()[-1] if isinstance(stype, tuple) and len(stype) == 2 else None
    if kind not in STORAGE_ITEMSIZE:
        raise InputError(path, "data.pkl", f"unknown storage type {one_line(repr(stype))[:80]}")
    if not isinstance(key, str) or isinstance(numel, bool) or not isinstance(numel, int):
        raise InputError(path, "data.pkl", "malformed storage reference")
    if numel < 0:
        raise InputError(path, f"data/{key}", f"declares {numel} elements")
    return key, numel * STORAGE_ITEMSIZE[kind]


def check_torch_zip(path: Path) -> None:
    """Refuse a torch file whose records are compressed or lie about their sizes (see module doc)."""
    size = check_regular(path)
    if not zipfile.is_zipfile(path):
        raise InputError(
            path,
            None,
            "not a torch zip archive (pickle files and the pre-1.6 torch format are not read)",
        )
    try:
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
            records: dict[str, zipfile.ZipInfo] = {}
            for info in infos:
                if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
                    raise InputError(
                        path, info.filename, "compressed record: torch writes records uncompressed"
                    )
                if info.header_offset + info.file_size > size:
                    raise InputError(path, info.filename, "record extends past the end of the file")
                records[info.filename] = info
            pickles = [n for n in records if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(pickles) != 1:
                raise InputError(path, "data.pkl", f"{len(pickles)} found, expected one")
            pkl_name = pickles[0]
            if records[pkl_name].file_size > MAX_PICKLE_BYTES:
                raise InputError(path, pkl_name, "larger than a tensor description can be")
            pkl = z.read(pkl_name)
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - zipfile raises several types for a broken archive
        raise InputError(path, None, f"not a readable zip archive: {one_line(str(e))}") from None
    try:
        scan = _scan(pkl)
    except Exception as e:  # noqa: BLE001 - genops raises several types for a broken pickle
        raise InputError(path, "data.pkl", f"malformed pickle: {one_line(str(e))}") from None
    prefix = pkl_name[: -len("data.pkl")]
    declared: dict[str, int] = {}
    for pid in scan.storages:
        key, nbytes = _declared_bytes(path, pid)
        if declared.setdefault(key, nbytes) != nbytes:
            raise InputError(path, f"data/{key}", "declared with two different sizes")
    for pid, offset, shape, stride, v3_dtype in scan.tensors:
        _check_view(path, pid, offset, shape, stride, v3_dtype)
    for key, nbytes in declared.items():
        info = records.get(f"{prefix}data/{key}")
        if info is None:
            raise InputError(path, f"data/{key}", "storage record missing")
        if info.file_size != nbytes:
            raise InputError(
                path,
                f"data/{key}",
                f"declares {nbytes} bytes but the record holds {info.file_size}",
            )


def _check_view(
    path: Path, pid: tuple, offset: object, shape: object, stride: object, v3_dtype: str | None
) -> None:
    """A tensor's extent (offset + sum((size-1)*stride) + 1 elements) must fit its storage."""
    key, nbytes = _declared_bytes(path, pid)
    if v3_dtype is not None:
        itemsize = V3_ITEMSIZE.get(v3_dtype, 1 if "float8" in v3_dtype else None)
        if itemsize is None:
            return  # a dtype this check does not know: torch's own bounds check applies
        numel = nbytes // itemsize
    else:
        numel = nbytes // STORAGE_ITEMSIZE[pid[1][1].split()[-1]]
    ints = (int,)
    if (
        not isinstance(offset, ints)
        or not isinstance(shape, tuple)
        or not isinstance(stride, tuple)
        or len(shape) != len(stride)
        or not all(isinstance(d, ints) and d >= 0 for d in shape)
        or not all(isinstance(d, ints) and d >= 0 for d in stride)
        or offset < 0
    ):
        raise InputError(path, f"data/{key}", "malformed tensor shape or stride")
    if 0 in shape:
        return
    extent = offset + sum((d - 1) * st for d, st in zip(shape, stride, strict=True)) + 1
    if extent > numel:
        raise InputError(
            path,
            f"data/{key}",
            f"a tensor of shape {list(shape)} needs {extent} elements; the record holds {numel}",
        )


def safetensors_header(path: Path) -> dict[str, TensorHeader]:
    """The tensors a safetensors file declares, each checked to lie within the file."""
    size = check_regular(path)
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise InputError(path, None, "not a safetensors file: shorter than its header")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_SAFETENSORS_HEADER or 8 + n > size:
                raise InputError(path, None, f"not a safetensors file: header length {n}")
            raw = f.read(n)
    except OSError as e:
        raise InputError(path, None, f"cannot read: {os_text(e)}") from None
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise InputError(path, None, f"not a safetensors file: {one_line(str(e))}") from None
    if not isinstance(header, dict):
        raise InputError(path, None, "not a safetensors file: header is not an object")
    base = 8 + n
    out: dict[str, TensorHeader] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        out[name] = _tensor_header(path, name, entry, base, size)
    return out


def _tensor_header(path: Path, name: str, entry: object, base: int, size: int) -> TensorHeader:
    def bad(why: str) -> InputError:
        return InputError(path, name, f"header {why}")

    if not isinstance(entry, dict):
        raise bad("entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str):
        raise bad("dtype missing")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise bad(f"shape {one_line(repr(shape))[:60]} is not a list of sizes")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise bad("data_offsets is not [begin, end]")
    begin, end = offsets[0] + base, offsets[1] + base
    if not base <= begin <= end <= size:
        raise bad(f"data_offsets {offsets} lie outside the file's {size - base} data bytes")
    itemsize = SAFETENSORS_ITEMSIZE.get(dtype)
    if itemsize is not None and math.prod(shape) * itemsize != end - begin:
        raise bad(f"shape {shape} of {dtype} does not fit its {end - begin} bytes")
    return TensorHeader(dtype, tuple(shape), begin, end)
