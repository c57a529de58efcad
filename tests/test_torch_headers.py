"""inspector.formats.headers.check_torch_zip on hand-made torch archives: what each storage and
tensor view declares, in every pickle protocol, against what the records hold."""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
import torch._utils

from inspector.errors import InputError
from inspector.formats.headers import check_torch_zip
from inspector.formats.tensorfiles import load_torch_file


class _Storage:
    """Stands for a storage: pickled as torch does, by persistent id."""

    def __init__(self, pid: object) -> None:
        self.pid = pid


class _View:
    """A tensor view of a storage, pickled as torch's rebuild call with any arguments."""

    def __init__(self, *args: object, v3: bool = False) -> None:
        self.args, self.v3 = args, v3

    def __reduce__(self):
        fn = torch._utils._rebuild_tensor_v3 if self.v3 else torch._utils._rebuild_tensor_v2
        return (fn, self.args)


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj: object) -> object:
        return obj.pid if isinstance(obj, _Storage) else None


def _archive(path: Path, obj: object, records: dict[str, bytes], protocol: int = 2) -> Path:
    buf = io.BytesIO()
    _Pickler(buf, protocol=protocol).dump(obj)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/version", b"3\n")
        z.writestr("archive/byteorder", b"little")
        for key, data in records.items():
            z.writestr(f"archive/data/{key}", data)
    return path


def _pid(key: str = "0", numel: int = 6, kind: object = torch.FloatStorage) -> tuple:
    return ("storage", kind, key, "cpu", numel)


def _v2(pid: tuple, offset: object = 0, size: object = (6,), stride: object = (1,)) -> _View:
    return _View(_Storage(pid), offset, size, stride, False, OrderedDict())


def _err(path: Path) -> str:
    with pytest.raises(InputError) as e:
        check_torch_zip(path)
    return str(e.value)


def test_a_consistent_hand_made_archive_loads(tmp_path: Path) -> None:
    f = _archive(tmp_path / "ok.pt", {"x": _v2(_pid())}, {"0": bytes(24)})
    check_torch_zip(f)
    assert torch.equal(load_torch_file(f)["x"], torch.zeros(6))


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_every_pickle_protocol_is_followed(tmp_path: Path, protocol: int) -> None:
    # 300 tensors: memo indices past 255 (LONG_BINPUT / LONG_BINGET), shared storages (GET)
    state = {f"t{i}": torch.full((2,), float(i)) for i in range(300)}
    state["tied"] = state["t7"]
    f = tmp_path / "ok.pt"
    torch.save(state, f, pickle_protocol=protocol)
    check_torch_zip(f)
    g = tmp_path / "lie.pt"
    torch.save({"a": torch.zeros(3), "b": torch.zeros(2)}, g, pickle_protocol=protocol)
    with zipfile.ZipFile(g) as z:
        entries = {i.filename: z.read(i.filename) for i in z.infolist()}
    name = next(n for n in entries if n.endswith("/data/1"))
    entries[name] = bytes(4)  # the record of "b" holds 4 bytes; its storage declares 8
    with zipfile.ZipFile(g, "w") as z:
        for n, data in entries.items():
            z.writestr(n, data)
    assert _err(g) == f"{g}: data/1: declares 8 bytes but the record holds 4"


def test_storage_declarations(tmp_path: Path) -> None:
    f = tmp_path / "s.pt"
    cases = [
        (
            {"x": _v2(_pid(numel=7))},
            {"0": bytes(24)},
            "data/0: declares 28 bytes but the record holds 24",
        ),
        (
            {"x": _v2(_pid(kind=torch.UntypedStorage, numel=24))},
            {"0": bytes(20)},
            "data/0: declares 24 bytes but the record holds 20",
        ),
        (
            {"x": _v2(_pid(kind=torch.BFloat16Storage, numel=3), size=(3,))},
            {"0": bytes(4)},
            "data/0: declares 6 bytes but the record holds 4",
        ),
        ({"x": _v2(_pid(numel=-1))}, {"0": b""}, "data/0: declares -1 elements"),
        ({"x": _v2(_pid(key="9"))}, {"0": bytes(24)}, "data/9: storage record missing"),
        (
            {"x": _v2(_pid()), "y": _v2(_pid(numel=3), size=(3,))},
            {"0": bytes(24)},
            "data/0: declared with two different sizes",
        ),
        (
            {"x": _v2(("storage", torch.FloatStorage, "0", "cpu"))},
            {},
            "data.pkl: unexpected persistent id ('storage', ('global', 'torch FloatStorage'), '0', 'cpu')",
        ),
        (
            {"x": _v2(("tensor", torch.FloatStorage, "0", "cpu", 6))},
            {},
            "data.pkl: unexpected persistent id",
        ),
        (
            {"x": _v2(_pid(kind=torch.Tensor))},
            {},
            "data.pkl: unknown storage type ('global', 'torch Tensor')",
        ),
        (
            {"x": _v2(_pid(kind="FloatStorage"))},
            {},
            "data.pkl: unknown storage type 'FloatStorage'",
        ),
        ({"x": _v2(_pid(numel=True))}, {}, "data.pkl: malformed storage reference"),
        ({"x": _v2(_pid(numel="6"))}, {}, "data.pkl: malformed storage reference"),
        (
            {"x": _v2(("storage", torch.FloatStorage, 0, "cpu", 6))},
            {},
            "data.pkl: malformed storage reference",
        ),
    ]
    for obj, records, text in cases:
        _archive(f, obj, records)
        msg = _err(f)
        assert msg.startswith(f"{f}: {text}"), msg
        assert "\n" not in msg


def test_tensor_views_must_fit_their_storage(tmp_path: Path) -> None:
    f = tmp_path / "v.pt"
    ok = [
        _v2(_pid(), 0, (2, 3), (3, 1)),
        _v2(_pid(), 0, (3, 2), (1, 3)),  # a transposed view
        _v2(_pid(), 5, (1,), (1,)),  # the last element
        _v2(_pid(), 6, (0,), (1,)),  # empty: no element needed
        _v2(_pid(), 0, (6, 0), (0, 1)),
        _v2(_pid(), 0, (), ()),  # a scalar
        _v2(_pid(), 0, (4,), (0,)),  # a broadcast view: one element, four times
    ]
    for view in ok:
        _archive(f, {"x": view}, {"0": bytes(24)})
        check_torch_zip(f)
    bad = [
        (
            _v2(_pid(), 1, (2, 3), (3, 1)),
            "a tensor of shape [2, 3] needs 7 elements; the record holds 6",
        ),
        (_v2(_pid(), 0, (7,), (1,)), "a tensor of shape [7] needs 7 elements; the record holds 6"),
        (
            _v2(_pid(), 0, (2, 2), (5, 1)),
            "a tensor of shape [2, 2] needs 7 elements; the record holds 6",
        ),
        (_v2(_pid(), 6, (1,), (1,)), "a tensor of shape [1] needs 7 elements; the record holds 6"),
        (_v2(_pid(), -1, (1,), (1,)), "malformed tensor shape or stride"),
        (_v2(_pid(), 0, (-2,), (1,)), "malformed tensor shape or stride"),
        (_v2(_pid(), 0, (2,), (-1,)), "malformed tensor shape or stride"),
        (_v2(_pid(), 0, (2, 3), (1,)), "malformed tensor shape or stride"),
        (_v2(_pid(), 0, [2], (1,)), "malformed tensor shape or stride"),
        (_v2(_pid(), 0, (2,), [1]), "malformed tensor shape or stride"),
        (_v2(_pid(), 0.5, (2,), (1,)), "malformed tensor shape or stride"),
        (_v2(_pid(), 0, ("2",), (1,)), "malformed tensor shape or stride"),
        (_v2(_pid(), 0, (2,), ("1",)), "malformed tensor shape or stride"),
    ]
    for view, text in bad:
        _archive(f, {"x": view}, {"0": bytes(24)})
        assert _err(f) == f"{f}: data/0: {text}"


def test_v3_views_count_in_their_dtype(tmp_path: Path) -> None:
    f = tmp_path / "v3.pt"

    def v3(dtype: object, size: tuple, nbytes: int = 12) -> _View:
        pid = _pid(kind=torch.UntypedStorage, numel=nbytes)
        return _View(_Storage(pid), 0, size, (1,), False, OrderedDict(), dtype, v3=True)

    for dtype, fits, too_big in (
        (torch.uint16, (6,), (7,)),
        (torch.uint32, (3,), (4,)),
        (torch.uint64, (1,), (2,)),
        (torch.float8_e4m3fn, (12,), (13,)),
        (torch.float8_e5m2, (12,), (13,)),
    ):
        _archive(f, {"x": v3(dtype, fits)}, {"0": bytes(12)})
        check_torch_zip(f)
        _archive(f, {"x": v3(dtype, too_big)}, {"0": bytes(12)})
        assert _err(f) == (
            f"{f}: data/0: a tensor of shape [{too_big[0]}] needs {too_big[0]} elements; "
            f"the record holds {fits[0]}"
        )
    # a dtype the check does not know is left to torch's own bounds check
    _archive(f, {"x": v3(torch.complex32, (100,))}, {"0": bytes(12)})
    check_torch_zip(f)
    # a v3 call whose dtype argument is no global is read as a plain v2 view of bytes
    pid = _pid(kind=torch.UntypedStorage, numel=12)
    _archive(
        f,
        {"x": _View(_Storage(pid), 0, (13,), (1,), False, OrderedDict(), "x", v3=True)},
        {"0": bytes(12)},
    )
    assert _err(f) == f"{f}: data/0: a tensor of shape [13] needs 13 elements; the record holds 12"


def test_other_reduce_calls_are_not_views(tmp_path: Path) -> None:
    f = tmp_path / "o.pt"
    # an OrderedDict() and a short or odd rebuild call are no views: nothing to check
    for obj in (
        {"x": _View(_Storage(_pid()), 0)},  # too few arguments
        {"x": _View("not a storage", 0, (99,), (1,), False, OrderedDict())},
        {"x": _View((1, 2), 0, (99,), (1,), False, OrderedDict())},
    ):
        _archive(f, obj, {"0": bytes(24)})
        try:
            check_torch_zip(f)
        except InputError as e:  # only the storage declaration may be refused
            assert "data/0: a tensor" not in str(e)


def test_archive_structure(tmp_path: Path) -> None:
    f = tmp_path / "a.pt"
    with zipfile.ZipFile(f, "w") as z:
        z.writestr("data.pkl", pickle.dumps({"a": 1}, protocol=2))  # at the top: fine
    check_torch_zip(f)
    with zipfile.ZipFile(f, "w") as z:
        z.writestr("archive/other.pkl", b"x")
    assert _err(f) == f"{f}: data.pkl: 0 found, expected one"
    with zipfile.ZipFile(f, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02K\x01K\x02t.")  # TUPLE without its MARK
    assert _err(f).startswith(f"{f}: data.pkl: malformed pickle: ")
    with zipfile.ZipFile(f, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02.")  # STOP on an empty stack
    assert _err(f).startswith(f"{f}: data.pkl: malformed pickle: ")
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02K\x01." * 10)
    assert _err(f) == f"{f}: archive/data.pkl: compressed record: torch writes records uncompressed"
    data = bytearray(_archive(tmp_path / "b.pt", {"x": _v2(_pid())}, {"0": bytes(24)}).read_bytes())
    f.write_bytes(bytes(data[: len(data) - 30]))  # the end of central directory cut off
    assert _err(f).startswith(f"{f}: not a torch zip archive")


def test_records_past_the_end_and_big_pickles(tmp_path: Path, monkeypatch) -> None:
    import inspector.formats.headers as headers

    f = _archive(tmp_path / "a.pt", {"x": _v2(_pid())}, {"0": bytes(24)})
    monkeypatch.setattr(headers, "MAX_PICKLE_BYTES", 10)
    assert _err(f) == f"{f}: archive/data.pkl: larger than a tensor description can be"
    monkeypatch.undo()
    # a central directory that points a record past the end of the file
    raw = bytearray(f.read_bytes())
    cd = raw.rindex(b"PK\x01\x02")  # the last entry: archive/data/0
    offset = int.from_bytes(raw[cd + 42 : cd + 46], "little")
    raw[cd + 42 : cd + 46] = (len(raw) - 10).to_bytes(4, "little")
    assert offset < len(raw)
    f.write_bytes(bytes(raw))
    assert _err(f) == f"{f}: archive/data/0: record extends past the end of the file"
