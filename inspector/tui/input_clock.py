"""When the user last typed or clicked: background work waits for a pause in the input."""

from __future__ import annotations

import time
from collections.abc import Callable


class InputClock:
    """`input_seen()` on every key and mouse event (the app calls it); `quiet_s()` since."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self._last = float("-inf")

    def input_seen(self) -> None:
        self._last = self.clock()

    def quiet_s(self) -> float:
        """Seconds since the last input (infinite before the first)."""
        return self.clock() - self._last
