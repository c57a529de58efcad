"""The byte-bounded cache and the memory budget."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from inspector.cache import ByteLRU, nbytes
from inspector.errors import InputError
from inspector.memory import ENV_VAR, MemoryBudget, Shares, parse_size, resolve_budget


def test_nbytes_counts_data_not_entries():
    @dataclass
    class Holder:
        a: np.ndarray
        b: list

    assert nbytes(torch.zeros(10, 4)) == 160
    assert nbytes(torch.zeros(10, dtype=torch.bfloat16)) == 20
    assert nbytes(np.zeros(8, dtype=np.int64)) == 64
    assert nbytes("abc") == 3 and nbytes(b"ab") == 2 and nbytes(7) == 0 and nbytes(None) == 0
    h = Holder(np.zeros(100, dtype=np.float32), [torch.zeros(50), "abc", (np.zeros(2),)])
    assert nbytes(h) == 400 + 200 + 3 + 16
    assert nbytes({"x": torch.zeros(3), "y": {"z": np.zeros(1)}}) == 12 + 8
    assert nbytes({1, 2}) == 0 and nbytes(frozenset()) == 0
    deep: list = [np.zeros(1)]
    for _ in range(7):
        deep = [deep]
    assert nbytes(deep) == 8  # eight levels deep still counted
    assert nbytes([deep]) == 0  # past that, no recursion without end


def test_evicts_least_recently_used_by_bytes():
    c: ByteLRU[str, np.ndarray] = ByteLRU(250)
    c.put("a", np.zeros(10))  # 80 bytes
    c.put("b", np.zeros(10))
    c.put("c", np.zeros(10))
    assert c.bytes == 240 and len(c) == 3
    c.get("a")  # a is now the most recent
    c.put("d", np.zeros(5))  # 40 more bytes: b (least recent) goes
    assert "b" not in c and {"a", "c", "d"} == set(c.keys())
    assert c.bytes == 200
    c.put("e", np.zeros(20))  # 160 bytes: c, then a (the least recent) go
    assert set(c.keys()) == {"d", "e"} and c.bytes == 200


def test_value_over_budget_is_returned_not_kept():
    c: ByteLRU[int, np.ndarray] = ByteLRU(100)
    c.put(1, np.zeros(5))
    big = np.zeros(100)
    assert c.put(2, big) is big
    assert 2 not in c and 1 in c and c.bytes == 40
    exact = np.zeros(100, dtype=np.uint8)  # exactly the budget: kept, alone
    c.put(3, exact)
    assert list(c.keys()) == [3] and c.bytes == 100
    assert ByteLRU(0).put("k", b"x") == b"x" and len(ByteLRU(-5)) == 0
    z: ByteLRU[str, bytes] = ByteLRU(0)
    z.put("k", b"x")
    assert "k" not in z and z.max_bytes == 0


def test_get_peek_put_again_and_clear():
    c: ByteLRU[str, np.ndarray] = ByteLRU(1000)
    a, b = np.zeros(2), np.zeros(3)
    c.put("a", a)
    c.put("b", b)
    assert c.get("a") is a and c.get("nope", "d") == "d"
    assert list(c.keys()) == ["b", "a"]
    assert c.peek("b") is b and list(c.keys()) == ["b", "a"]  # peek keeps the order
    c.touch("b")
    assert list(c.keys()) == ["a", "b"]
    c.touch("missing")
    c.put("a", np.zeros(10))  # replacing a key: its old bytes go
    assert c.bytes == 24 + 80 and list(c.keys()) == ["b", "a"]
    c.clear()
    assert c.bytes == 0 and len(c) == 0
    c.put("x", np.zeros(1))
    assert c.bytes == 8


def test_get_or_make_touch_pop_and_resize():
    made = []
    c: ByteLRU[tuple[int, int], np.ndarray] = ByteLRU(1000)

    def make(i):
        made.append(i)
        return np.zeros(10)

    for i in range(3):
        for j in range(2):
            c.get_or_make((i, j), lambda i=i: make(i))
    c.get_or_make((0, 0), lambda: make(99))
    assert made == [0, 0, 1, 1, 2, 2]
    c.touch_where(lambda k: k[0] == 1)  # sample 1 most recent
    c.max_bytes = 160  # room for two entries: sample 1's
    assert set(c.keys()) == {(1, 0), (1, 1)}
    c.pop_where(lambda k: k[1] == 0)
    assert set(c.keys()) == {(1, 1)} and c.bytes == 80
    assert c.pop((1, 1)) is not None and c.bytes == 0 and c.pop((1, 1)) is None
    assert c.peek("x", "default") == "default"


@pytest.mark.parametrize(
    "text,total,expected",
    [
        ("8G", None, 8 * 2**30),
        ("512m", None, 512 * 2**20),
        ("1.5GiB", None, int(1.5 * 2**30)),
        ("100000000", None, 100000000),
        ("30%", 10 * 2**30, 3 * 2**30),
    ],
)
def test_parse_size(text, total, expected):
    assert parse_size(text, total) == expected


@pytest.mark.parametrize("text", ["lots", "-1G", "0%", "150%", "1k", "8 X"])
def test_parse_size_rejects_nonsense_naming_the_flag(text):
    with pytest.raises(InputError) as e:
        parse_size(text, 2**30)
    assert "--memory-budget" in str(e.value)


def test_available_host_bytes_reads_meminfo(tmp_path, monkeypatch):
    from inspector import memory

    f = tmp_path / "meminfo"
    f.write_text("MemTotal: 1000 kB\nMemFree: 10 kB\nMemAvailable:     2048 kB\n")
    assert memory.available_host_bytes(str(f)) == 2048 * 1024
    f.write_text("MemTotal: 1000 kB\n")  # no MemAvailable line: total RAM from sysconf
    monkeypatch.setattr(
        memory.os, "sysconf", {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 10}.__getitem__
    )
    assert memory.available_host_bytes(str(f)) == 40960
    assert memory.available_host_bytes(str(tmp_path / "missing")) == 40960

    def broken(k):
        raise ValueError(k)

    monkeypatch.setattr(memory.os, "sysconf", broken)
    assert memory.available_host_bytes(str(tmp_path / "missing")) == 8 * 2**30


def test_budget_on_a_gpu(monkeypatch):
    from inspector import memory

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 100 * 2**30)
    monkeypatch.setattr(memory, "free_device_bytes", lambda d: 80 * 2**30)
    b = resolve_budget(None, "cuda")
    assert b.host == 25 * 2**30 and b.device == 32 * 2**30
    b = resolve_budget("10%", "cuda")
    assert b.host == 10 * 2**30 and b.device == 8 * 2**30
    b = resolve_budget("100G", "cuda")  # a size caps the device at what is free
    assert b.host == 100 * 2**30 and b.device == 80 * 2**30
    monkeypatch.setattr(memory, "free_device_bytes", lambda d: None)
    assert resolve_budget("2G", "cpu") == MemoryBudget(2 * 2**30, None)
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 100)  # a tiny machine: the floor
    assert resolve_budget(None, "cpu").host == 64 * 2**20


def test_free_device_bytes(monkeypatch):
    import torch

    from inspector import memory

    assert memory.free_device_bytes("cpu") is None
    assert memory.free_device_bytes(torch.device("cpu")) is None
    seen = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: seen.append(d) or (123, 456))
    assert memory.free_device_bytes(torch.device("cuda", 1)) == 123
    assert seen == [torch.device("cuda", 1)]


def test_trim_host_heap_trims_only_above_min_free(monkeypatch):
    from inspector import memory

    calls = []

    class Info:
        fordblks = 300

    class Libc:
        def malloc_trim(self, pad):
            calls.append(pad)

        def mallinfo2(self):
            return Info()

    monkeypatch.setattr(memory, "_LIBC", Libc())
    assert memory.heap_free_bytes() == 300
    assert memory.trim_host_heap(301) is False and calls == []
    assert memory.trim_host_heap(300) is True and calls == [0]
    assert memory.trim_host_heap() is False  # the default threshold is far above 300 bytes
    assert calls == [0]

    class OldLibc:  # glibc < 2.33: no mallinfo2, so the free size is unknown: always trim
        def malloc_trim(self, pad):
            calls.append(pad)

    monkeypatch.setattr(memory, "_LIBC", OldLibc())
    assert memory.heap_free_bytes() is None
    assert memory.trim_host_heap() is True and calls == [0, 0]

    monkeypatch.setattr(memory, "_LIBC", False)  # no glibc: nothing to call
    assert memory.heap_free_bytes() is None
    assert memory.trim_host_heap(0) is False and calls == [0, 0]

    monkeypatch.setattr(memory, "_LIBC", None)  # the first call finds the real libc (or none)
    memory.trim_host_heap()
    import platform

    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert hasattr(memory._LIBC, "malloc_trim")
        assert hasattr(memory._LIBC, "mallinfo2") == (memory.heap_free_bytes() is not None)
    else:
        assert memory._LIBC is False


def test_heap_trimmer_checks_at_most_once_per_interval():
    from inspector.memory import HeapTrimmer

    now = [100.0]
    calls = []
    trimmer = HeapTrimmer(
        5, interval=1.0, clock=lambda: now[0], trim=lambda n: calls.append(n) or True
    )
    assert trimmer() is True and calls == [5]  # the first call checks
    now[0] = 100.999
    assert trimmer() is False and calls == [5]  # not due
    now[0] = 101.0
    assert trimmer() is True and calls == [5, 5]  # due exactly one interval later
    now[0] = 101.5
    assert trimmer() is False
    now[0] = 102.2
    assert trimmer() is True and calls == [5, 5, 5]
    not_worth_it = HeapTrimmer(7, clock=lambda: 0.0, trim=lambda n: calls.append(n) or False)
    assert not_worth_it() is False and calls[-1] == 7


def test_budget_from_env_and_defaults(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    b = resolve_budget(None, "cpu")
    assert b.device is None and b.host >= 64 * 2**20
    monkeypatch.setenv(ENV_VAR, "2G")
    assert resolve_budget(None, "cpu").host == 2 * 2**30
    assert resolve_budget("1G", "cpu").host == 2**30  # the option wins over the environment
    monkeypatch.setenv(ENV_VAR, "nonsense")
    with pytest.raises(InputError, match=ENV_VAR):
        resolve_budget(None, "cpu")


def test_shares_split_the_host_budget_on_cpu():
    b = MemoryBudget(host=1000, device=None, shares=Shares())
    host_total = sum(
        b.host_share(n)
        for n in ("samples", "predictions", "verifier", "app_samples", "app_predictions")
    )
    device_total = b.device_share("device_slots") + b.device_share("projections")
    assert host_total + device_total <= 1000
    assert device_total >= 150  # the device caches get what the host caches leave
    gpu = MemoryBudget(host=1000, device=9000)
    assert gpu.device_share("projections") == 6000


def test_percentages_and_floors_of_parse_size():
    assert parse_size("100%", 1000) == 1000
    assert parse_size("0.5%", 2**40) == int(2**40 * 0.005)
    assert parse_size("64M") == 64 * 2**20  # the floor itself is allowed
    with pytest.raises(InputError, match=r"at least 64M"):
        parse_size(str(64 * 2**20 - 1))
    with pytest.raises(InputError, match="a percentage needs a known total") as e:
        parse_size("10%", None, what="--x")
    assert e.value.field == "--x"
    assert parse_size(" 8 G ") == 8 * 2**30


def test_free_device_bytes_of_a_device_name(monkeypatch):
    import torch

    from inspector import memory

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (77, 99))
    assert memory.free_device_bytes("cuda") == 77  # a plain string names the device too
    assert memory.free_device_bytes("cpu") is None


def test_mallinfo2_layout_and_a_real_free_total():
    import platform

    from inspector import memory

    assert memory.MALLINFO2_FIELDS == (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
    )  # fmt: skip
    assert memory.HeapTrimmer(5).interval == 1.0  # at most one check a second by default
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        monkey_free = memory.heap_free_bytes()
        if monkey_free is not None:  # glibc >= 2.33
            libc = memory._libc()
            info = libc.mallinfo2()  # type: ignore[attr-defined]
            assert [n for n, _ in type(info)._fields_] == list(memory.MALLINFO2_FIELDS)
            assert 0 <= monkey_free <= info.arena + info.hblkhd
