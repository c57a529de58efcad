"""How much memory the caches may hold: `--memory-budget`, `EAGLE_INSPECT_MEMORY_BUDGET`, or a
share of what the machine has free.

The budget bounds what is *kept* between samples (loaded samples, device tensors, projections,
predictions, the app's views); the working memory of the sample being computed comes on top and
grows linearly with its length. Each cache gets a fixed share (`Shares`).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from inspector.errors import InputError

ENV_VAR = "EAGLE_INSPECT_MEMORY_BUDGET"
DEFAULT_HOST_FRACTION = 0.25  # of the RAM available at start
DEFAULT_DEVICE_FRACTION = 0.4  # of the GPU memory free at start
MIN_BYTES = 64 * 2**20
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


@dataclass(frozen=True)
class Shares:
    """Fractions of the host budget per cache (device caches use the device budget on a GPU)."""

    samples: float = 0.2  # loaded sample files
    predictions: float = 0.28  # per-position results per (sample, wiring)
    replays: float = 0.02  # the serving replay's rounds per (sample, wiring, engine settings)
    verifier: float = 0.05  # the verifier's argmax per position
    app_samples: float = 0.1  # the app's per-sample view data (token texts, slot norms)
    app_predictions: float = 0.15  # the app's copies of predictions it shows
    device_slots: float = 1 / 3  # of the device budget: slots moved to the device
    projections: float = 2 / 3  # of the device budget: per (block, slot) fc projections


@dataclass(frozen=True)
class MemoryBudget:
    """Bytes the caches may keep in host memory and, on a GPU, in device memory."""

    host: int
    device: int | None = None  # None: the device is the CPU, device caches share `host`
    shares: Shares = Shares()

    def host_share(self, name: str) -> int:
        return int(self.host * getattr(self.shares, name))

    def device_share(self, name: str) -> int:
        """Bytes for a device-side cache: of the device budget, or of the host budget on CPU
        (where the device caches take the part of `host` the host caches leave)."""
        frac = getattr(self.shares, name)
        if self.device is not None:
            return int(self.device * frac)
        s = self.shares
        used = (
            s.samples + s.predictions + s.replays + s.verifier + s.app_samples + s.app_predictions
        )
        return int(self.host * max(0.0, 1.0 - used) * frac)


def parse_size(text: str, total: int | None = None, *, what: str = "--memory-budget") -> int:
    """'8G', '512M', '1.5g', '123456' (bytes) or '30%' (of `total`) -> bytes."""
    t = str(text).strip().lower().replace(" ", "")
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(%|[kmgt]?)(?:i?b)?", t)  # ASCII digits only
    if not m:
        raise InputError(None, what, f"{text!r}: expected a size like 8G, 512M or 30%")
    value, unit = float(m.group(1)), m.group(2)
    if unit == "%":
        if total is None:
            raise InputError(None, what, f"{text!r}: a percentage needs a known total")
        if not 0 < value <= 100:
            raise InputError(None, what, f"{text!r}: a percentage must be in (0, 100]")
        return int(total * value / 100)
    n = int(value * _UNITS[unit])
    if n < MIN_BYTES:
        raise InputError(None, what, f"{text!r}: at least {MIN_BYTES // 2**20}M")
    return n


def available_host_bytes(meminfo: str = "/proc/meminfo") -> int:
    """RAM available to new allocations (MemAvailable), or total RAM where that is unknown."""
    try:
        with open(meminfo, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def free_device_bytes(device: object) -> int | None:
    """Free memory of a CUDA device, None for the CPU."""
    if getattr(device, "type", str(device)) != "cuda":
        return None
    import torch

    free, _ = torch.cuda.mem_get_info(device)  # type: ignore[arg-type]
    return int(free)


def resolve_budget(spec: str | None = None, device: object = "cpu") -> MemoryBudget:
    """The budget from the option, else the environment variable, else the defaults.

    A size applies to the host and, on a GPU, also caps the device budget; a percentage is of
    the available RAM (and of the free GPU memory).
    """
    spec = spec or os.environ.get(ENV_VAR) or None
    host_avail = available_host_bytes()
    dev_free = free_device_bytes(device)
    if spec is None:
        host = max(MIN_BYTES, int(host_avail * DEFAULT_HOST_FRACTION))
        dev = None if dev_free is None else max(MIN_BYTES, int(dev_free * DEFAULT_DEVICE_FRACTION))
        return MemoryBudget(host, dev)
    what = "--memory-budget" if os.environ.get(ENV_VAR) != spec else ENV_VAR
    host = parse_size(spec, host_avail, what=what)
    dev = None
    if dev_free is not None:
        dev = parse_size(spec, dev_free, what=what) if spec.strip().endswith("%") else host
        dev = min(dev, dev_free)
    return MemoryBudget(host, dev)


_LIBC: object | None = None
# glibc's struct mallinfo2 (malloc.h, glibc >= 2.33), in order: ten size_t fields.
MALLINFO2_FIELDS = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",  # free bytes in the heaps: what heap_free_bytes reads
    "keepcost",
)
TRIM_FREE_BYTES = (
    2**30
)  # trim once the heap holds this much freed memory (or a quarter of the budget)


def _libc() -> object | None:
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6")
            if not hasattr(libc, "malloc_trim"):
                _LIBC = False
            else:
                if hasattr(libc, "mallinfo2"):

                    class MallInfo2(ctypes.Structure):
                        _fields_ = [(name, ctypes.c_size_t) for name in MALLINFO2_FIELDS]

                    libc.mallinfo2.restype = MallInfo2
                _LIBC = libc
        except OSError:
            _LIBC = False
    return _LIBC or None


def heap_free_bytes() -> int | None:
    """Freed memory glibc's heaps keep (all arenas), None where that cannot be read."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    return int(libc.mallinfo2().fordblks)  # type: ignore[attr-defined]


def trim_host_heap(min_free: int = TRIM_FREE_BYTES) -> bool:
    """Give freed heap memory back to the OS once there is at least `min_free` of it (glibc
    `malloc_trim`; a no-op elsewhere). Returns whether it trimmed.

    A thread that allocates and frees many megabyte-sized tensors (the app's device thread scoring
    a sample set) fragments glibc's per-thread arena: measured on a mid-size draft, anonymous
    memory grew by ~17 MB per 256-token sample while the caches stayed at their budget. Trimming
    after every sample kept it flat but cost ~10% of eval's speed on 1K-token samples (the
    returned pages fault in again on the next sample; the heap keeps ~0.5 GB free between samples
    there), so it trims only once the freed memory is worth it: growth stays bounded by
    `min_free`, and eval runs at the untrimmed speed.
    """
    libc = _libc()
    if libc is None:
        return False
    free = heap_free_bytes()
    if free is not None and free < min_free:
        return False
    libc.malloc_trim(0)  # type: ignore[attr-defined]
    return True


class HeapTrimmer:
    """`trim_host_heap(min_free)` at most once per `interval` seconds.

    Reading glibc's free total (mallinfo2) walks every heap chunk: measured 0.8 ms, growing to
    1.6 ms as the heap fragments, which was a quarter of eval's time on 64-token samples when
    checked after each one. Once a second costs nothing measurable and still bounds the growth.
    """

    def __init__(
        self,
        min_free: int,
        interval: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        trim: Callable[[int], bool] | None = None,
    ) -> None:
        self.min_free = min_free
        self.interval = interval
        self._clock = clock
        self._trim = trim
        self._next = clock()  # the first call checks

    def __call__(self) -> bool:
        """Trim if due and worth it; returns whether it trimmed."""
        now = self._clock()
        if now < self._next:
            return False
        self._next = now + self.interval
        trim = self._trim if self._trim is not None else trim_host_heap
        return trim(self.min_free)
