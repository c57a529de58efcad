"""When the garbage collector runs: in the pauses between key presses, not inside one.

Textual makes cyclic garbage on every frame (each rendered `Strip` holds caches that refer back
to it), a few thousand objects per key press. Left to its thresholds, the collector picked a
moment by allocation count, which was often the middle of the next frame: a young collection
there cost 6-11 ms and an older one 40-52 ms (measured on 2 cores with `bench/app_latency.py`),
the worst key presses of a run. After the draft is loaded, the app turns automatic collection
off and collects here on a timer, only when no input arrived in the last QUIET_S seconds, in the
generational rhythm CPython itself keeps (every tenth young collection reaches the next
generation, every tenth of those the oldest). A full collection is the long one (30-190 ms over
what a 60-sample fill made), so once due it waits for a longer pause, FULL_QUIET_S, the time a
user spends reading a screen. Held input never starves either: past FORCE_AT young objects a
young collection runs anyway, and FULL_FORCE_S after it fell due a full one does.
"""

from __future__ import annotations

import gc

from inspector.tui.input_clock import InputClock

QUIET_S = 0.15  # no input for this long: the user is reading, not typing
FORCE_AT = 200_000  # young objects: collect even while keys are held (a few seconds of repeat)
EVERY = 10  # young collections per middle one, middle ones per full one (CPython's defaults)
FULL_QUIET_S = 1.0  # a due full collection waits for this long a pause in the input
FULL_FORCE_S = 60.0  # ... but no longer than this after it fell due


class IdleCollector:
    """`tick()` on a timer, `stop()` when the app closes; `inputs` says how long input paused."""

    def __init__(self, inputs: InputClock) -> None:
        self.inputs = inputs
        self._young_runs = 0
        self._middle_runs = 0
        self._full_due_at: float | None = None
        self.running = False

    def start(self) -> None:
        """Take over from the automatic collector."""
        if not self.running:
            gc.disable()
            self.running = True

    def stop(self) -> None:
        """Hand collection back to CPython (tests run many apps in one process)."""
        if self.running:
            gc.enable()
            self.running = False

    def tick(self) -> int | None:
        """Collect if it is time; the generation collected, or None."""
        if not self.running:
            return None
        young = gc.get_count()[0]
        if young == 0:
            return None
        now = self.inputs.clock()
        quiet = self.inputs.quiet_s()
        if quiet < QUIET_S and young < FORCE_AT:
            return None
        generation = 0
        self._young_runs += 1
        if self._young_runs % EVERY == 0:
            generation = 1
            self._middle_runs += 1
            if self._middle_runs % EVERY == 0 and self._full_due_at is None:
                self._full_due_at = now
        due = self._full_due_at
        if due is not None and (quiet >= FULL_QUIET_S or now - due >= FULL_FORCE_S):
            generation, self._full_due_at = 2, None
        gc.collect(generation)
        return generation
