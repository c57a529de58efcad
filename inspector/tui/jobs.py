"""The device thread's jobs: what each request does once the scheduler (`device_thread.py`) picks it.

Each job asks the `Backend` for numpy results and reports them through `Reports`; none of them
waits, locks or chooses what runs next. They also keep the ledger the scheduler reads to plan
the fill (`done`, `accepted`, `bad`) and the fill's results not sent yet, sent in batches.
Device thread only; no Textual, no torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inspector.cache import ByteLRU
from inspector.tui.backend import ServingError
from inspector.tui.events import Scored
from inspector.tui.summary import error_text

if TYPE_CHECKING:
    from inspector.evaluate import SamplePredictions
    from inspector.serving.spec import DraftSpec
    from inspector.tui.backend import Backend
    from inspector.tui.events import Reports, SampleAccept, SampleTrees
    from inspector.tui.summary import SampleData, Summary
    from inspector.tui.tau_settings import Serving
    from inspector.wiring import WiringKey

# Without a memory budget (test loaders): the sizes of the engine-side caches.
FALLBACK_SAMPLE_BYTES = 256 * 2**20
FALLBACK_TREE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class ViewRequest:
    gen: int
    sample: int
    wirings: tuple[WiringKey, ...]
    prefetch: tuple[int, ...]


@dataclass(frozen=True)
class ReplayRequest:
    """A sample's serving replays under some wirings (the accept line, the fill), or its draft
    trees under one (the tree panel: its drafting settings only)."""

    sample: int
    wirings: tuple[WiringKey, ...]
    serving: Serving


class Jobs:
    """The jobs over one loaded backend (see the module docstring)."""

    STATS_BATCH = 32
    # Every batch repaints the accuracy bar and the changed lines of the sample list. At 0.15 s,
    # when the list was a DataTable (every visible row re-rendered on any change), that rendering
    # was 40% of the UI thread's time during the fill and delayed key presses.
    STATS_INTERVAL = 0.5

    def __init__(self, backend: Backend, reports: Reports, session: Summary) -> None:
        self.backend = backend
        self.reports = reports
        self.session = session
        budget = backend.budget
        self._sample_data: ByteLRU[int, SampleData] = ByteLRU(
            budget.host_share("app_samples") if budget is not None else FALLBACK_SAMPLE_BYTES
        )
        self._trees: ByteLRU[tuple[int, WiringKey, DraftSpec], SampleTrees] = ByteLRU(
            budget.host_share("replays") if budget is not None else FALLBACK_TREE_BYTES
        )
        # The ledger: metrics noted per (sample, wiring), replays per (sample, wiring,
        # settings), samples not to try again, settings that cannot be replayed (and why).
        self.done: set[tuple[int, WiringKey]] = set()
        self.accepted: set[tuple[int, WiringKey, Serving]] = set()
        self.bad: set[int] = {i for i, _ in session.skipped}
        self.unservable: dict[Serving, str] = {}
        self._scored: list[Scored] = []
        self._errors: list[tuple[int, str]] = []
        self._accepts: list[SampleAccept] = []
        self._last_flush = time.monotonic()
        # What is on screen and next to it, kept warm on the device between jobs.
        self.current = 0
        self.neighbours: tuple[int, ...] = ()

    # --- the ledger ---------------------------------------------------------------------------
    def usable(self, i: int) -> bool:
        return 0 <= i < self.backend.n_samples and i not in self.bad

    def filled(self, i: int, w: WiringKey, serving: Serving | None) -> bool:
        """Sample i has its metrics under w and (with settings it can replay) its replay."""
        return (i, w) in self.done and (
            serving is None or serving in self.unservable or (i, w, serving) in self.accepted
        )

    def unsent(self) -> bool:
        return bool(self._scored or self._errors or self._accepts)

    # --- the jobs -----------------------------------------------------------------------------
    def view(self, req: ViewRequest) -> None:
        self.current = req.sample
        self.neighbours = req.prefetch
        try:
            data = self.sample_data(req.sample)
            preds = self._predict_all(req.sample, req.wirings)
        except Exception as e:  # noqa: BLE001 - shown in the app
            kind, text = self._failed(req.sample, e)
            self.reports.view_failed(req.gen, req.sample, text, kind)
        else:
            self.reports.view_ready(req.gen, data, preds, prefetch=False)

    def prefetch(self, sample: int, wirings: tuple[WiringKey, ...]) -> None:
        if not self.usable(sample):
            return
        try:
            data = self.sample_data(sample)
            preds = self._predict_all(sample, wirings)
        except Exception as e:  # noqa: BLE001 - the sample's row gets marked
            kind, text = self._failed(sample, e)
            if kind == "sample":
                self._errors.append((sample, text))
        else:
            self.reports.view_ready(-1, data, preds, prefetch=True)
        self._keep_warm()

    def accept(self, req: ReplayRequest) -> None:
        if not self.usable(req.sample) or req.serving in self.unservable:
            return
        out: list[SampleAccept] = []
        try:
            for w in dict.fromkeys(req.wirings):
                a = self.backend.replay(req.sample, w, req.serving)
                self.accepted.add((a.index, a.wiring, a.serving))
                out.append(a)
        except ServingError as e:
            self._unservable(req.serving, e)
            return
        except Exception as e:  # noqa: BLE001 - the sample's row gets marked
            _, text = self._failed(req.sample, e)
            self._errors.append((req.sample, text))
            self.flush()
            return
        self.reports.accepts_ready(req.sample, req.serving, out)

    def trees(self, req: ReplayRequest) -> None:
        key = (req.sample, req.wirings[0], req.serving.spec)
        trees = self._trees.get(key)
        if trees is None:
            try:
                trees = self.backend.trees(*key)
            except Exception as e:  # noqa: BLE001 - shown in the panel
                self.backend.free_after_oom(e)
                self.reports.trees_failed(error_text(e))
                return
            self._trees.put(key, trees)
        self.reports.trees_ready(trees)

    def compare(self, req: ReplayRequest) -> None:
        try:
            comparison = self.backend.compare(req.sample, req.wirings[0], req.serving.spec)
        except Exception as e:  # noqa: BLE001 - shown in the compare screen
            self.backend.free_after_oom(e)
            self.reports.compare_failed(error_text(e))
            return
        self.reports.compared(comparison)

    def second(self) -> None:
        """Load the second draft (`open --compare`) and report its summary."""
        try:
            summary = self.backend.second_summary()
        except Exception as e:  # noqa: BLE001 - said in the app
            self.backend.free_after_oom(e)
            self.reports.second_failed(error_text(e))
            return
        self.reports.second_ready(summary)

    def fill(self, i: int, w: WiringKey, serving: Serving | None) -> None:
        """One step of the fill: sample i's metrics under w, and its replay under `serving`."""
        try:
            if (i, w) not in self.done:
                self._note(i, w, self.backend.predict(i, w))
            if (
                serving is not None
                and serving not in self.unservable
                and (i, w, serving) not in self.accepted
            ):
                a = self.backend.replay(i, w, serving)
                self.accepted.add((a.index, a.wiring, a.serving))
                self._accepts.append(a)
        except ServingError as e:
            assert serving is not None  # only a replay raises it
            self._unservable(serving, e)
        except Exception as e:  # noqa: BLE001
            kind, text = self._failed(i, e)
            if kind != "sample":  # not the sample's fault: do not retry it in a loop
                self.bad.add(i)
            self._errors.append((i, text))
        self._keep_warm()
        if (
            len(self._scored) + len(self._accepts) >= self.STATS_BATCH
            or time.monotonic() - self._last_flush > self.STATS_INTERVAL
        ):
            self.flush()

    def flush(self) -> None:
        """Send what the fill (and the views) noted since the last batch."""
        self._last_flush = time.monotonic()
        if not self.unsent():
            return
        items, self._scored = self._scored, []
        errors, self._errors = self._errors, []
        accepts, self._accepts = self._accepts, []
        self.reports.scored(items, errors, accepts)

    def task(self, kind: str, fn: Callable[[Backend], Any]) -> None:
        try:
            result = fn(self.backend)
        except Exception as e:  # noqa: BLE001 - shown in the app
            self.backend.free_after_oom(e)
            self.reports.task_done(kind, error=error_text(e))
        else:
            self.reports.task_done(kind, result=result)

    # --- helpers --------------------------------------------------------------------------------
    def sample_data(self, i: int) -> SampleData:
        """The wiring-independent arrays of sample i, cached."""
        cached = self._sample_data.get(i)
        if cached is not None:
            return cached
        return self._sample_data.put(i, self.backend.sample_data(i, self.session.decoder))

    def _predict_all(
        self, i: int, wirings: Sequence[WiringKey]
    ) -> dict[WiringKey, SamplePredictions]:
        preds: dict[WiringKey, SamplePredictions] = {}
        for w in wirings:
            if w not in preds:
                preds[w] = self.backend.predict(i, w)
                self._note(i, w, preds[w])
        return preds

    def _note(self, i: int, w: WiringKey, pred: SamplePredictions) -> None:
        """Count a prediction in the fill's ledger (a view's counts too: the fill skips it)."""
        if (i, w) in self.done:
            return
        self.done.add((i, w))
        length = int(pred.steps[0].pos.size + 2) if pred.steps else 0
        self._scored.append(Scored(i, w, list(pred.metrics), length))

    def _unservable(self, serving: Serving, e: ServingError) -> None:
        """These settings cannot be replayed here: said once, and the fill skips them."""
        if serving not in self.unservable:
            self.unservable[serving] = str(e)
            self.reports.serving_failed(serving, str(e))

    def _failed(self, i: int, e: BaseException) -> tuple[str, str]:
        """(kind, text) of a failed job on sample i; a bad sample is not tried again."""
        from inspector.errors import InputError

        if self.backend.free_after_oom(e):
            return "oom", f"out of device memory on sample #{i}: {error_text(e)}"
        if isinstance(e, InputError):
            self.bad.add(i)
            return "sample", error_text(e)
        return "error", error_text(e)

    def _keep_warm(self) -> None:
        try:
            for s in (*self.neighbours[:1], self.current):
                self.backend.keep_warm(s)
        except Exception:  # noqa: BLE001 - warming is best effort
            pass
