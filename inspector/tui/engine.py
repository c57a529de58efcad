"""The one thread that owns the device.

Everything that touches torch runs here: loading, forwards, slot norms, the doctor, exports. The UI
thread only posts requests and reads the numpy results that come back as `events` (plain
dataclasses: this module never imports Textual; the app turns them into messages).

Requests are not a plain queue:
- a view request (sample + wirings) *replaces* any view request not yet started, so a held key
  costs one forward, not one per repeat; every result carries the generation number of its
  request, and the UI paints only results of the latest generation;
- tasks (doctor, export) run next, in order;
- then the prefetch of the neighbouring samples;
- then the serving replay of the sample on screen (`request_accept`; a newer one replaces it), and
  its draft trees while the tree panel is open (`request_trees`; the same);
- then, while idle, the set-wide fill: per-sample metrics and serving replays (under the current
  engine settings, `set_spec`) of the current and pinned wirings for the sample list and the
  whole-set totals, sent back in batches.
torch is imported by this thread, never by the UI thread, so the first paint does not wait for it.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inspector.cache import ByteLRU
from inspector.tui.events import (
    AcceptData,
    Event,
    Loaded,
    LoadFailed,
    LoadProgress,
    SampleAccept,
    SampleTrees,
    StatsBatch,
    TaskDone,
    ViewData,
    ViewFailed,
)
from inspector.tui.loader import Loader
from inspector.tui.summary import (
    SampleData,
    Session,
    accept_at,
    build_sample_data,
    error_text,
    make_session,
)

if TYPE_CHECKING:
    from inspector.metrics import StepMetrics
    from inspector.serving.spec import DraftSpec
    from inspector.wiring import WiringKey


def calm_the_collector() -> None:
    """Keep the garbage collector's full collections, which hold the GIL, out of the UI's way.

    A full collection traverses every tracked object and holds the GIL throughout: with torch
    loaded (3*10^5 objects) it took 0.3 to 1 s on a shared 2-core machine (load average 8 to 15),
    several times a minute while the app fills, and a key press landing in one waited that long:
    it was the worst key press, fill or no fill. What is loaded once and kept for the session
    never becomes garbage: `gc.freeze()` moves it out of the collector's sight.

    What Textual and the fill make afterwards still reached the oldest generation often enough
    for a full collection every 2-3 s (12-139 ms each at load 3-5). With a young generation of
    10^4 allocations instead of 700, a frame's temporaries die before they are promoted: one
    full collection in a 60-sample fill instead of 13 (young collections stay at a few ms)."""
    import gc

    gc.collect()  # what is garbage already should not be frozen with the rest
    gc.freeze()
    gc.set_threshold(10_000, *gc.get_threshold()[1:])


# --- the engine ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _ViewRequest:
    gen: int
    sample: int
    wirings: tuple[WiringKey, ...]
    prefetch: tuple[int, ...]


@dataclass(frozen=True)
class _AcceptRequest:
    sample: int
    wirings: tuple[WiringKey, ...]
    spec: DraftSpec


class Engine:
    """Owns the evaluator in one daemon thread; see the module docstring for the scheduling."""

    STATS_BATCH = 32
    # Every batch repaints the sample list (DataTable re-renders all its visible rows): at 0.15 s
    # that rendering was 40% of the UI thread's time during the fill and delayed key presses.
    STATS_INTERVAL = 0.5

    def __init__(
        self,
        post: Callable[[Event], Any],
        loader: Loader,
        *,
        initial_wiring: str | None = None,
        fill: bool = True,
        input_paths: Sequence[str] = (),
    ) -> None:
        self._post = post
        self._loader = loader
        self._initial_spec = initial_wiring
        self._fill_enabled = fill
        self._input_paths = [str(p) for p in input_paths]
        self._cond = threading.Condition()
        self._stop = False
        self._view: _ViewRequest | None = None
        self._accept: _AcceptRequest | None = None
        self._spec: DraftSpec | None = None  # the fill's engine settings (from the session)
        self._replayer: Any = None  # serving.replay.Replayer, made on the device thread
        self._accepted: set[tuple[int, WiringKey, DraftSpec]] = set()
        self._accepts: list[SampleAccept] = []
        self._trees_req: _AcceptRequest | None = None  # one wiring
        self._trees: ByteLRU[tuple[int, WiringKey, DraftSpec], SampleTrees] = ByteLRU(0)
        self._tasks: deque[tuple[str, Callable[[Any], Any]]] = deque()
        self._prefetch: deque[tuple[int, tuple[WiringKey, ...]]] = deque()
        self._fill_wirings: list[WiringKey] = []
        self._fill_pos: dict[WiringKey, int] = {}
        self._done: set[tuple[int, WiringKey]] = set()
        self._bad: set[int] = set()
        self._stats: list[tuple[int, WiringKey, list[StepMetrics], int]] = []
        self._stat_errors: list[tuple[int, str]] = []
        self._last_flush = time.monotonic()
        self._current = 0
        self._neighbours: tuple[int, ...] = ()
        self._sample_data: ByteLRU[int, SampleData] = ByteLRU(0)  # sized once loaded
        self.ev: Any = None
        self.session: Session | None = None
        self._thread = threading.Thread(target=self._run, name="eagle-inspect-device", daemon=True)
        self.busy = False  # a job is running (read by the UI for its indicator)

    # --- UI-thread API ----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def request_view(
        self, gen: int, sample: int, wirings: Sequence[WiringKey], prefetch: Sequence[int] = ()
    ) -> None:
        """Compute (or fetch) a sample under wirings; replaces any view request not yet started."""
        with self._cond:
            self._view = _ViewRequest(gen, sample, tuple(wirings), tuple(prefetch))
            self._cond.notify_all()

    def request_prefetch(self, sample: int, samples: Sequence[int], wirings: Sequence[WiringKey]):
        """Warm samples under wirings at low priority (when the view itself came from the UI cache)."""
        with self._cond:
            self._current = sample
            self._prefetch = deque((s, tuple(wirings)) for s in samples)
            self._cond.notify_all()

    def set_fill(self, wirings: Sequence[WiringKey]) -> None:
        """Fill per-sample metrics for these wirings, in order, while idle."""
        with self._cond:
            self._fill_wirings = list(dict.fromkeys(tuple(w) for w in wirings))
            for w in self._fill_wirings:
                self._fill_pos.setdefault(w, 0)
            self._cond.notify_all()

    def request_accept(self, sample: int, wirings: Sequence[WiringKey], spec: DraftSpec) -> None:
        """Replay a sample under wirings and engine settings (an AcceptData comes back); replaces
        any accept request not yet started."""
        with self._cond:
            self._accept = _AcceptRequest(sample, tuple(wirings), spec)
            self._cond.notify_all()

    def request_trees(self, sample: int, wiring: WiringKey, spec: DraftSpec) -> None:
        """The draft tree of every row of a sample (a SampleTrees comes back, or a TaskDone
        "trees" with the error); replaces any trees request not yet started."""
        with self._cond:
            self._trees_req = _AcceptRequest(sample, (tuple(wiring),), spec)
            self._cond.notify_all()

    def set_spec(self, spec: DraftSpec) -> None:
        """The engine settings the fill replays the set under (samples it already did stay)."""
        with self._cond:
            if spec != self._spec:
                self._spec = spec
                self._fill_pos = {w: 0 for w in self._fill_pos}
            self._cond.notify_all()

    def submit(self, kind: str, fn: Callable[[Any], Any]) -> None:
        """Run fn(evaluator) on the device thread; a TaskDone(kind, result|error) comes back."""
        with self._cond:
            self._tasks.append((kind, fn))
            self._cond.notify_all()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def idle(self) -> bool:
        """Nothing running or queued except fill (for tests and benchmarks)."""
        with self._cond:
            return (
                not self.busy
                and self._view is None
                and self._accept is None
                and self._trees_req is None
                and not self._tasks
                and not self._prefetch
            )

    def fill_pending(self) -> bool:
        with self._cond:
            return self._next_fill() is not None or self._unsent()

    def _unsent(self) -> bool:
        return bool(self._stats or self._stat_errors or self._accepts)

    # --- the thread --------------------------------------------------------------------------------
    def _send(self, message: Event) -> None:
        try:
            self._post(message)
        except Exception:  # noqa: BLE001 - the app may be closing
            pass

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            res = self._loader(lambda text: self._send(LoadProgress(text)))
            self.ev = res.ev
            if self._spec is None:
                from inspector.tui.summary import default_serving

                self._spec = default_serving(int(res.ev.ttt_steps))
            budget = getattr(res.ev, "budget", None)
            self._sample_data.max_bytes = (
                budget.host_share("app_samples") if budget is not None else 256 * 2**20
            )
            self._trees.max_bytes = (
                budget.host_share("replays") if budget is not None else 64 * 2**20
            )
            self._bad.update(i for i, _ in res.skipped)
            self.session = make_session(
                res.ev,
                res.decoder,
                res.notes,
                initial_spec=self._initial_spec,
                input_paths=self._input_paths,
                load_s=time.perf_counter() - t0,
                first_sample=res.first_sample,
                skipped=res.skipped,
                logged=getattr(res, "logged", None),
            )
        except BaseException as e:  # noqa: BLE001 - reported in the app, which stays up
            self._send(LoadFailed(error_text(e)))
            return
        calm_the_collector()
        self._send(Loaded(self.session))
        while True:
            job = self._take()
            if job is None:
                return
            self.busy = True
            try:
                job()
            except BaseException:  # noqa: BLE001 - a bug in a job must not kill the device thread
                self._send(TaskDone("internal", error=traceback.format_exc(limit=4)))
            finally:
                self.busy = False

    def _take(self) -> Callable[[], None] | None:
        with self._cond:
            while True:
                if self._stop:
                    return None
                if self._view is not None:
                    req, self._view = self._view, None
                    return lambda: self._serve_view(req)
                if self._accept is not None:
                    acc, self._accept = self._accept, None
                    return lambda: self._serve_accept(acc)
                if self._trees_req is not None:
                    tr, self._trees_req = self._trees_req, None
                    return lambda: self._serve_trees(tr)
                if self._tasks:
                    kind, fn = self._tasks.popleft()
                    return lambda: self._run_task(kind, fn)
                if self._prefetch:
                    sample, wirings = self._prefetch.popleft()
                    return lambda: self._serve_prefetch(sample, wirings)
                item = self._next_fill() if self._fill_enabled else None
                if item is not None:
                    return lambda: self._fill_one(*item)
                if self._unsent():
                    return self._flush_stats
                self._cond.wait()

    # --- jobs --------------------------------------------------------------------------------------
    def sample_data(self, i: int) -> SampleData:
        """The wiring-independent arrays of sample i (device thread only)."""
        cached = self._sample_data.get(i)
        if cached is not None:
            return cached
        decoder = self.session.decoder if self.session else None
        return self._sample_data.put(i, build_sample_data(self.ev, i, decoder))

    def _predict_all(self, i: int, wirings: Sequence[WiringKey]) -> dict[WiringKey, Any]:
        from inspector.wiring import Wiring

        preds: dict[WiringKey, Any] = {}
        for w in wirings:
            if w not in preds:
                preds[w] = self.ev.predict(i, Wiring(tuple(w)))
                self._note(i, w, preds[w])
        return preds

    def _note(self, i: int, w: WiringKey, pred: Any) -> None:
        key = (i, w)
        if key in self._done:
            return
        self._done.add(key)
        length = int(pred.steps[0].pos.size + 2) if pred.steps else 0
        self._stats.append((i, w, list(pred.metrics), length))

    def _failed(self, i: int, e: BaseException) -> tuple[str, str]:
        """(kind, text) of a failed job on sample i; a bad sample is not tried again."""
        from inspector.errors import InputError

        if self._free_after_oom(e):
            return "oom", f"out of device memory on sample #{i}: {error_text(e)}"
        if isinstance(e, InputError):
            self._bad.add(i)
            return "sample", error_text(e)
        return "error", error_text(e)

    @staticmethod
    def _free_after_oom(e: BaseException) -> bool:
        """After an out-of-memory error, hand the allocator's cached blocks back; True if it was one."""
        from inspector.evaluate import is_oom

        if not is_oom(e):
            return False
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - freeing is best effort
            pass
        return True

    def _serve_view(self, req: _ViewRequest) -> None:
        self._current = req.sample
        self._neighbours = req.prefetch
        try:
            data = self.sample_data(req.sample)
            preds = self._predict_all(req.sample, req.wirings)
        except Exception as e:  # noqa: BLE001 - shown in the app
            kind, text = self._failed(req.sample, e)
            self._send(ViewFailed(req.gen, req.sample, text, kind))
        else:
            self._send(ViewData(req.gen, data, preds, prefetch=False))
        n = len(self.ev.samples)
        with self._cond:
            self._prefetch = deque(
                (s, req.wirings) for s in req.prefetch if 0 <= s < n and s not in self._bad
            )
        self._flush_stats()

    def replay(self, i: int, w: WiringKey, spec: DraftSpec) -> SampleAccept:
        """Sample i's serving replay (device thread only), cached by the Replayer's ByteLRU under
        the budget's `replays` share, keyed by (sample, wiring, settings)."""
        from inspector.serving.replay import Replayer
        from inspector.wiring import Wiring

        if self._replayer is None:
            self._replayer = Replayer(self.ev, spec)
        self._replayer.spec = spec  # the cache key holds the settings (and so the convention)
        r = self._replayer.replay(i, Wiring(tuple(w)))
        mask = self.ev.samples[i].loss_mask.numpy()
        a_at = accept_at(r.a_by_start, mask)
        return SampleAccept(
            i, tuple(w), spec, r.a_by_start, r.starts, r.accepted, r.emitted, r.stats, a_at
        )

    def _note_accept(self, a: SampleAccept) -> None:
        key = (a.index, a.wiring, a.spec)
        if key not in self._accepted:
            self._accepted.add(key)
            self._accepts.append(a)

    def _serve_accept(self, req: _AcceptRequest) -> None:
        if req.sample in self._bad or not (0 <= req.sample < len(self.ev.samples)):
            return
        out: list[SampleAccept] = []
        try:
            for w in dict.fromkeys(req.wirings):
                a = self.replay(req.sample, w, req.spec)
                self._accepted.add((a.index, a.wiring, a.spec))
                out.append(a)
        except Exception as e:  # noqa: BLE001 - the sample's row gets marked
            _, text = self._failed(req.sample, e)
            self._stat_errors.append((req.sample, text))
            self._flush_stats()
            return
        self._send(AcceptData(req.sample, req.spec, out))

    def _serve_trees(self, req: _AcceptRequest) -> None:
        from inspector.tui.trees import sample_trees

        key = (req.sample, req.wirings[0], req.spec)
        trees = self._trees.get(key)
        if trees is None:
            try:
                trees = sample_trees(self.ev, req.sample, req.wirings[0], req.spec)
            except Exception as e:  # noqa: BLE001 - shown in the panel
                self._free_after_oom(e)
                self._send(TaskDone("trees", error=error_text(e)))
                return
            self._trees.put(key, trees)
        self._send(trees)

    def _serve_prefetch(self, sample: int, wirings: tuple[WiringKey, ...]) -> None:
        if sample in self._bad or not (0 <= sample < len(self.ev.samples)):
            return
        try:
            data = self.sample_data(sample)
            preds = self._predict_all(sample, wirings)
        except Exception as e:  # noqa: BLE001 - the sample's row gets marked
            kind, text = self._failed(sample, e)
            if kind == "sample":
                self._stat_errors.append((sample, text))
        else:
            self._send(ViewData(-1, data, preds, prefetch=True))
        self._keep_warm()

    def _next_fill(self) -> tuple[int, WiringKey] | None:
        if self.ev is None:
            return None
        n = len(self.ev.samples)
        spec = self._spec
        for w in self._fill_wirings:
            pos = self._fill_pos.get(w, 0)
            while pos < n and (
                pos in self._bad
                or ((pos, w) in self._done and (spec is None or (pos, w, spec) in self._accepted))
            ):
                pos += 1
            self._fill_pos[w] = pos
            if pos < n:
                return pos, w
        return None

    def _fill_one(self, i: int, w: WiringKey) -> None:
        from inspector.wiring import Wiring

        spec = self._spec
        try:
            if (i, w) not in self._done:
                self._note(i, w, self.ev.predict(i, Wiring(w)))
            if spec is not None and (i, w, spec) not in self._accepted:
                self._note_accept(self.replay(i, w, spec))
        except Exception as e:  # noqa: BLE001
            kind, text = self._failed(i, e)
            if kind != "sample":  # not the sample's fault: do not retry it in a loop
                self._bad.add(i)
            self._stat_errors.append((i, text))
        self._keep_warm()
        now = time.monotonic()
        if (
            len(self._stats) + len(self._accepts) >= self.STATS_BATCH
            or now - self._last_flush > self.STATS_INTERVAL
        ):
            self._flush_stats()

    def _keep_warm(self) -> None:
        warm = getattr(self.ev, "keep_warm", None)
        if warm is None:
            return
        try:
            for s in (*self._neighbours[:1], self._current):
                warm(s)
        except Exception:  # noqa: BLE001 - warming is best effort
            pass

    def _flush_stats(self) -> None:
        self._last_flush = time.monotonic()
        if not self._unsent():
            return
        items, self._stats = self._stats, []
        errors, self._stat_errors = self._stat_errors, []
        accepts, self._accepts = self._accepts, []
        self._send(StatsBatch(items, errors, accepts))

    def _run_task(self, kind: str, fn: Callable[[Any], Any]) -> None:
        try:
            result = fn(self.ev)
        except Exception as e:  # noqa: BLE001 - shown in the app
            self._free_after_oom(e)
            self._send(TaskDone(kind, error=error_text(e)))
        else:
            self._send(TaskDone(kind, result=result))
