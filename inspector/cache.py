"""The one cache type of the inspector: least-recently-used, bounded by bytes, not entry counts.

A sample of a real draft is 2K-32K tokens with four 7168-wide slots: one entry can weigh a
gigabyte, another a few kilobytes. Counting entries bounds nothing, so every per-sample cache (the
sample set, device slots, fc projections, predictions, the app's views) is a `ByteLRU` whose size
is the sum of its values' `nbytes`. A value larger than the whole budget is returned but not kept.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MAX_DEPTH = 8


def nbytes(obj: Any, _depth: int = 0) -> int:
    """Bytes of data held by `obj`: tensors and arrays by their data, strings by their length,
    containers and dataclasses by the sum of their members; anything else counts 0 (the few
    scalars around per-sample arrays are noise next to them)."""
    if obj is None or _depth > _MAX_DEPTH:
        return 0
    n = getattr(obj, "nbytes", None)  # numpy arrays and torch tensors
    if isinstance(n, int):
        return n
    if isinstance(obj, str | bytes):
        return len(obj)
    if isinstance(obj, dict):
        return sum(nbytes(v, _depth + 1) for v in obj.values())
    if isinstance(obj, list | tuple | set | frozenset):
        return sum(nbytes(v, _depth + 1) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(nbytes(getattr(obj, f.name), _depth + 1) for f in dataclasses.fields(obj))
    return 0


class ByteLRU(Generic[K, V]):
    """An LRU map holding at most `max_bytes` of values (measured once, when stored).

    Not thread-safe: each cache belongs to one thread (the device thread or the UI thread).
    """

    def __init__(self, max_bytes: int, *, sizeof: Callable[[Any], int] = nbytes) -> None:
        self._max = max(0, int(max_bytes))
        self._sizeof = sizeof
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0

    @property
    def max_bytes(self) -> int:
        return self._max

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        self._max = max(0, int(value))
        self._evict(0)

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def keys(self) -> Iterator[K]:
        return iter(list(self._items))

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value (now most recently used), or default."""
        item = self._items.get(key)
        if item is None:
            return default
        self._items.move_to_end(key)
        return item[0]

    def peek(self, key: K, default: V | None = None) -> V | None:
        """The value without changing its recency."""
        item = self._items.get(key)
        return default if item is None else item[0]

    def put(self, key: K, value: V) -> V:
        """Store value (evicting the least recently used); a value over the budget is not kept."""
        self.pop(key)
        size = self._sizeof(value)
        if size <= self._max:
            self._evict(size)
            self._items[key] = (value, size)
            self._bytes += size
        return value

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
            return item[0]
        return self.put(key, make())

    def touch(self, key: K) -> None:
        if key in self._items:
            self._items.move_to_end(key)

    def touch_where(self, match: Callable[[K], bool]) -> None:
        """Mark every entry whose key matches most recently used (e.g. all of one sample's)."""
        for key in [k for k in self._items if match(k)]:
            self._items.move_to_end(key)

    def pop(self, key: K) -> V | None:
        item = self._items.pop(key, None)
        if item is None:
            return None
        self._bytes -= item[1]
        return item[0]

    def pop_where(self, match: Callable[[K], bool]) -> None:
        for key in [k for k in self._items if match(k)]:
            self.pop(key)

    def clear(self) -> None:
        self._items.clear()
        self._bytes = 0

    def _evict(self, incoming: int) -> None:
        while self._items and self._bytes + incoming > self._max:
            _, (_, size) = self._items.popitem(last=False)
            self._bytes -= size
