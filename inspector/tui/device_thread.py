"""The one thread that owns the device, and its scheduling: which request runs next.

Everything that touches torch runs on this thread: loading, forwards, slot norms, the doctor,
exports. The UI thread only posts requests here and gets the numpy results back through the
`events.Reports` port (this module never imports Textual; the app posts one message per event).
What each request does is a job (`jobs.py`), over the loaded `backend.Backend`.

Requests are not a plain queue:
- a view request (sample + wirings) *replaces* any view request not yet started, so a held key
  costs one forward, not one per repeat; every result carries the generation number of its
  request, and the UI paints only results of the latest generation;
- then the serving replay of the sample on screen (`request_accept`; a newer one replaces it), and
  its draft trees while the tree panel is open (`request_trees`; the same), and its comparison
  with a second draft (`request_compare`; the same), and the loading of that draft
  (`request_second`);
- tasks (doctor, export) run next, in order;
- then the prefetch of the neighbouring samples;
- then, while idle, the set-wide fill: per-sample metrics and serving replays (under the current
  engine settings, `set_serving`) of the current and pinned wirings for the sample list and the
  whole-set totals, sent back in batches.
torch is imported by this thread, never by the UI thread, so the first paint does not wait for it.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from inspector.tui.jobs import Jobs, ReplayRequest, ViewRequest
from inspector.tui.loader import Loader
from inspector.tui.summary import error_text

if TYPE_CHECKING:
    from inspector.evaluate import Evaluator
    from inspector.serving.spec import DraftSpec
    from inspector.tui.backend import Backend
    from inspector.tui.events import Reports
    from inspector.tui.summary import Summary
    from inspector.tui.tau_settings import Serving
    from inspector.wiring import WiringKey

Task = Callable[["Backend"], Any]  # a submitted task: run with the backend, its result back


def freeze_what_is_loaded() -> None:
    """Take what is loaded once and kept for the session out of the garbage collector's sight.

    A full collection traverses every tracked object and holds the GIL throughout: with torch
    loaded (3*10^5 objects) it took 0.3 to 1 s on a shared 2-core machine (load average 8 to 15),
    several times a minute while the app fills, and a key press landing in one waited that long.
    None of it ever becomes garbage: `gc.freeze()` moves it to a generation never collected.
    When the rest is collected is the app's idle collector's business (`collector.py`)."""
    import gc

    gc.collect()  # what is garbage already should not be frozen with the rest
    gc.freeze()


class DeviceThread:
    """Owns the backend in one daemon thread; see the module docstring for the scheduling."""

    def __init__(
        self,
        reports: Reports,
        loader: Loader,
        *,
        initial_wiring: str | None = None,
        fill: bool = True,
        input_paths: Sequence[str] = (),
    ) -> None:
        self._reports = reports
        self._loader = loader
        self._initial_wiring = initial_wiring
        self._fill_enabled = fill
        self._input_paths = [str(p) for p in input_paths]
        self._cond = threading.Condition()
        self._stop = False
        # The requests, each replaced by a newer one until it starts (see the module docstring).
        self._view: ViewRequest | None = None
        self._accept: ReplayRequest | None = None
        self._trees: ReplayRequest | None = None  # one wiring
        self._compare: ReplayRequest | None = None  # one wiring (A's), against the second draft
        self._second = False  # the second draft is to be loaded (`request_second`)
        self._tasks: deque[tuple[str, Task]] = deque()
        self._prefetch: deque[tuple[int, tuple[WiringKey, ...]]] = deque()
        # The fill: its wirings in order, how far each got, the settings it replays under.
        self._fill_wirings: list[WiringKey] = []
        self._fill_pos: dict[WiringKey, int] = {}
        self._serving: Serving | None = None
        self.jobs: Jobs | None = None  # once loaded
        self.session: Summary | None = None
        self.loaded = False  # the session is up and its objects frozen (read by the UI thread)
        self._thread = threading.Thread(target=self._run, name="eagle-inspect-device", daemon=True)
        self.busy = False  # a job is running (read by the UI for its indicator)

    @property
    def ev(self) -> Evaluator | None:
        """The loaded evaluator (benchmarks read its caches' sizes)."""
        return self.jobs.backend.evaluator if self.jobs is not None else None

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
            self._view = ViewRequest(gen, sample, tuple(wirings), tuple(prefetch))
            self._cond.notify_all()

    def request_prefetch(
        self, sample: int, samples: Sequence[int], wirings: Sequence[WiringKey]
    ) -> None:
        """Warm samples under wirings at low priority (when the view itself came from the UI cache)."""
        with self._cond:
            if self.jobs is not None:
                self.jobs.current = sample
            self._prefetch = deque((s, tuple(wirings)) for s in samples)
            self._cond.notify_all()

    def set_fill(self, wirings: Sequence[WiringKey]) -> None:
        """Fill per-sample metrics for these wirings, in order, while idle."""
        with self._cond:
            self._fill_wirings = list(dict.fromkeys(tuple(w) for w in wirings))
            for w in self._fill_wirings:
                self._fill_pos.setdefault(w, 0)
            self._cond.notify_all()

    def request_accept(self, sample: int, wirings: Sequence[WiringKey], serving: Serving) -> None:
        """Replay a sample under wirings and settings (`Reports.accepts_ready`); replaces any
        accept request not yet started."""
        with self._cond:
            self._accept = ReplayRequest(sample, tuple(wirings), serving)
            self._cond.notify_all()

    def request_trees(self, sample: int, wiring: WiringKey, spec: DraftSpec) -> None:
        """The draft tree of every row of a sample (`Reports.trees_ready`, or `trees_failed`);
        replaces any trees request not yet started."""
        from inspector.tui.tau_settings import Serving

        with self._cond:
            self._trees = ReplayRequest(sample, (tuple(wiring),), Serving(spec))
            self._cond.notify_all()

    def request_compare(self, sample: int, wiring: WiringKey, spec: DraftSpec) -> None:
        """A sample under the first draft (`wiring`) and the second (`open --compare`)
        (`Reports.compared`, or `compare_failed`); replaces one not yet started."""
        from inspector.tui.tau_settings import Serving

        with self._cond:
            self._compare = ReplayRequest(sample, (tuple(wiring),), Serving(spec))
            self._cond.notify_all()

    def request_second(self) -> None:
        """Load the second draft (`open --compare`) for the views to switch to
        (`Reports.second_ready`, or `second_failed`)."""
        with self._cond:
            self._second = True
            self._cond.notify_all()

    def set_serving(self, serving: Serving) -> None:
        """The settings the fill replays the set under (samples it already did stay)."""
        with self._cond:
            if serving != self._serving:
                self._serving = serving
                self._fill_pos = {w: 0 for w in self._fill_pos}
            self._cond.notify_all()

    def submit(self, kind: str, fn: Task) -> None:
        """Run fn(backend) on the device thread; `Reports.task_done(kind, result|error)`."""
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
                and self._trees is None
                and self._compare is None
                and not self._second
                and not self._tasks
                and not self._prefetch
            )

    def fill_pending(self) -> bool:
        with self._cond:
            return self._next_fill() is not None or (self.jobs is not None and self.jobs.unsent())

    # --- the thread --------------------------------------------------------------------------------
    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            res = self._loader(self._reports.load_progress)
            backend = res.backend()
            session = backend.summarize(
                res.decoder,
                res.notes,
                initial_wiring=self._initial_wiring,
                input_paths=self._input_paths,
                load_s=time.perf_counter() - t0,
                first_sample=res.first_sample,
                skipped=res.skipped,
                logged=res.logged,
                sampling=res.sampling,
            )
            if self._serving is None:
                self._serving = session.serving_default()
            jobs = Jobs(backend, self._reports, session)
        except BaseException as e:  # noqa: BLE001 - reported in the app, which stays up
            self._reports.load_failed(error_text(e))
            return
        with self._cond:
            self.session, self.jobs = session, jobs
        freeze_what_is_loaded()
        self.loaded = True
        self._reports.loaded(session)
        while True:
            job = self._take()
            if job is None:
                return
            self.busy = True
            try:
                job()
            except BaseException:  # noqa: BLE001 - a bug in a job must not kill the device thread
                self._reports.job_crashed(traceback.format_exc(limit=4))
            finally:
                self.busy = False

    def _take(self) -> Callable[[], None] | None:
        """The next job, by the priorities of the module docstring; waits while there is none."""
        jobs = self.jobs
        assert jobs is not None
        with self._cond:
            while True:
                if self._stop:
                    return None
                if self._view is not None:
                    req, self._view = self._view, None
                    return lambda: self._serve_view(jobs, req)
                if self._accept is not None:
                    acc, self._accept = self._accept, None
                    return lambda: jobs.accept(acc)
                if self._trees is not None:
                    tr, self._trees = self._trees, None
                    return lambda: jobs.trees(tr)
                if self._compare is not None:
                    cmp, self._compare = self._compare, None
                    return lambda: jobs.compare(cmp)
                if self._second:
                    self._second = False
                    return jobs.second
                if self._tasks:
                    kind, fn = self._tasks.popleft()
                    return lambda: jobs.task(kind, fn)
                if self._prefetch:
                    sample, wirings = self._prefetch.popleft()
                    return lambda: jobs.prefetch(sample, wirings)
                item = self._next_fill() if self._fill_enabled else None
                if item is not None:
                    serving = self._serving
                    return lambda: jobs.fill(*item, serving)
                if jobs.unsent():
                    return jobs.flush
                self._cond.wait()

    def _serve_view(self, jobs: Jobs, req: ViewRequest) -> None:
        """The view, then its neighbours queued for prefetch (replacing older ones)."""
        jobs.view(req)
        with self._cond:
            self._prefetch = deque((s, req.wirings) for s in req.prefetch if jobs.usable(s))
        jobs.flush()

    def _next_fill(self) -> tuple[int, WiringKey] | None:
        """The fill's next (sample, wiring): the first wiring in order with a sample left."""
        jobs = self.jobs
        if jobs is None:
            return None
        n = jobs.backend.n_samples
        serving = self._serving
        for w in self._fill_wirings:
            pos = self._fill_pos.get(w, 0)
            while pos < n and (pos in jobs.bad or jobs.filled(pos, w, serving)):
                pos += 1
            self._fill_pos[w] = pos
            if pos < n:
                return pos, w
        return None
