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
    h = Holder(np.zeros(100, dtype=np.float32), [torch.zeros(50), "abc"])
    assert 600 <= nbytes(h) < 1000
    assert nbytes(None) == 0


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
