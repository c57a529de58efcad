"""The main screen's handlers of the device thread's messages (`messages.py`), one per message.

`DeviceMessages` is the main screen's base: each handler takes a result into the state
(`state.ViewModel`) and repaints what it moved through the screen's painting methods, which the
screen (`main.MainScreen`) defines; the base declares them so that the handlers read on their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from textual.screen import Screen

from inspector.tui import messages as msg
from inspector.tui.input_clock import InputClock

BATCH_QUIET_S = 0.15  # the fill's repaints wait for this long a pause in the input
BATCH_CHECK_S = 0.05  # ... checked this often

if TYPE_CHECKING:
    from inspector.tui.state import ViewModel
    from inspector.tui.tau_settings import Serving
    from inspector.tui.widgets.sample_view import SampleView
    from inspector.tui.widgets.samples import SampleList


class DeviceMessages(Screen):
    """The handlers; the painting and requests they call are the main screen's."""

    state: ViewModel
    sample_list: SampleList
    center: SampleView
    status: str  # the main screen's reactive loading stage
    looking: bool  # the doctor's search for the trained wiring runs
    look_progress: str  # ... and how far it got
    inputs: InputClock  # when the user last typed or clicked

    def __init__(self) -> None:
        super().__init__()
        self._batch_rows: set[int] = set()  # the fill's rows not yet painted
        self._batch_accuracy = False  # ... and the bar

    def on_mount(self) -> None:
        # The screen's own timer, started in the app's event loop, for as long as it lives.
        self.set_interval(BATCH_CHECK_S, self.paint_batch)

    def say(self, text: str, *, severity: str = "information", timeout: float = 5) -> None:
        raise NotImplementedError

    def request_view(self) -> None:
        raise NotImplementedError

    def request_accepts(self) -> None:
        raise NotImplementedError

    def show_if_ready(self) -> bool:
        raise NotImplementedError

    def paint_rounds(self) -> None:
        raise NotImplementedError

    def paint_tree(self) -> None:
        raise NotImplementedError

    def refresh_header(self) -> None:
        raise NotImplementedError

    def refresh_accuracy(self) -> None:
        raise NotImplementedError

    def set_serving(self, serving: Serving) -> None:
        raise NotImplementedError

    def request_first_look(self) -> None:
        raise NotImplementedError

    def wirings_changed(self) -> None:
        raise NotImplementedError

    def on_load_progress(self, e: msg.LoadProgress) -> None:
        self.center.strip.show_message(f"{e.text}…")
        self.status = e.text

    def on_load_failed(self, e: msg.LoadFailed) -> None:
        self.center.strip.show_message(f"could not load: {e.error}")
        self.status = "load failed"
        self.say(f"could not load: {e.error}", severity="error", timeout=30)

    def on_loaded(self, e: msg.Loaded) -> None:
        s = e.session
        st = self.state
        known_bad = st.load(s)
        self.status = ""
        lst = self.sample_list
        lst.set_samples(len(s.files))
        for i, error in known_bad:
            lst.set_values(i, error=error)
            self.say(f"sample #{i} skipped: {error}", severity="error", timeout=10)
        for note in s.notes:
            self.say(note, severity="warning")
        if s.initial_error:
            self.say(s.initial_error, severity="error", timeout=15)
        if st.wiring is None:
            errs = "; ".join(s.preset_errors.values())
            self.center.strip.show_message(f"no usable wiring: {errs}")
            self.say(f"no usable wiring: {errs}", severity="error", timeout=30)
        else:
            self.request_view()
            self.request_first_look()

    def on_view_ready(self, e: msg.ViewReady) -> None:
        st = self.state
        data = e.sample
        if st.clear_error(data.index):  # a retry worked (e.g. after an out-of-memory error)
            self.sample_list.clear_error(data.index)
            if data.index == st.sample:
                self.request_accepts()  # its replays left with the error
        for w in st.remember_sample(data):
            self.say(f"sample #{data.index}: {w}", severity="warning")
        added = st.add_predictions(data, e.preds)
        if added:
            self._batch_rows.add(data.index)  # its list row, with the fill's (paint_batch)
        shown = False
        if (e.gen == st.gen and not e.prefetch) or (st.pending and data.index == st.sample):
            # The view asked for, or a prefetch that completed what the current view needs.
            shown = self.show_if_ready()
        if shown:
            st.applied()
            self.refresh_header()
        elif added:
            self._batch_accuracy = True  # set totals moved
        self.paint_batch()

    def on_view_failed(self, e: msg.ViewFailed) -> None:
        st = self.state
        self.mark_error(e.sample, e.error)
        if e.gen != st.gen:
            return
        st.applied()
        if e.sample == st.sample:
            st.view = None
            self.center.show_failed(f"sample #{e.sample}: {e.error}")
        self.say(e.error, severity="error", timeout=12)
        self.refresh_header()
        self.refresh_accuracy()

    def on_scored_batch(self, e: msg.ScoredBatch) -> None:
        """The fill's results go into the state now; the sample list and the accuracy bar show
        them at the next pause in the input (`paint_batch`)."""
        changed = {s.sample for s in e.items if self.state.add_stats(*s)}
        for i, err in e.errors:
            self.mark_error(i, err)
        accepted = [a for a in e.accepts if self.state.add_accept(a)]
        self._batch_rows |= changed
        self._batch_accuracy |= bool(changed or e.errors or accepted)
        self.paint_batch()
        if any(a.index == self.state.sample for a in e.accepts):
            self.paint_rounds()

    def paint_batch(self) -> None:
        """Repaint the rows and the bar the fill changed, if the input paused for BATCH_QUIET_S
        (else they wait: `on_mount` checks again every BATCH_CHECK_S).

        A changed row repaints its own line of the sample list only (`widgets/samples.py`); the
        bar re-renders whole. Painted in a pause, neither is in a key press's way; held keys
        defer them until they are released. (When the list was a DataTable, any changed row
        re-rendered every visible one, 30 ms a frame while the fill shared the CPU, and a key
        press that arrived during that frame waited for it: p99 41 -> 94-124 ms.)"""
        if not (self._batch_rows or self._batch_accuracy):
            return
        if self.inputs.quiet_s() < BATCH_QUIET_S:
            return
        rows, self._batch_rows = self._batch_rows, set()
        with self.app.batch_update():
            for i in sorted(rows):
                self.sample_list.show_row(i, self.state.list_row(i))
        if self._batch_accuracy:
            self._batch_accuracy = False
            self.refresh_accuracy()

    @property
    def batch_pending(self) -> bool:
        """Results in the state that the list or the bar does not show yet."""
        return bool(self._batch_rows or self._batch_accuracy)

    def repaint_rows(self, rows: Iterable[int]) -> None:
        """These list rows again, with the next batch."""
        self._batch_rows.update(rows)
        self.paint_batch()

    def on_accepts_ready(self, e: msg.AcceptsReady) -> None:
        """The serving replay of a sample the UI asked for (it may be another one by now)."""
        for a in e.accepts:
            self.state.add_accept(a)
        self.refresh_accuracy()
        if e.sample == self.state.sample:
            self.paint_rounds()

    def on_serving_failed(self, e: msg.ServingFailed) -> None:
        """τ cannot run under these settings: greedy again, and why."""
        from inspector.tui.tau_settings import Serving

        self.say(f"τ stays greedy: {e.error}", severity="error", timeout=15)
        if self.state.serving == e.serving:
            self.set_serving(Serving(e.serving.spec))

    def on_trees_ready(self, e: msg.TreesReady) -> None:
        t = e.trees
        key = (t.index, t.wiring, t.spec)
        self.state.trees.put(key, t)
        if key == self.state.trees_key():
            self.paint_tree()

    def on_trees_failed(self, e: msg.TreesFailed) -> None:
        self.center.tree_panel.failed(e.error)
        self.say(f"draft tree failed: {e.error}", severity="error", timeout=12)

    def on_compared(self, e: msg.Compared) -> None:
        """A sample under both drafts: kept, and shown if the compare screen waits for it."""
        from inspector.tui.screens.compare import CompareScreen

        c = e.comparison
        self.state.comparisons.put((c.index, c.wiring, c.spec), c)
        screen = self.app.screen
        if isinstance(screen, CompareScreen) and screen.comparison is None:
            screen.show(c)

    def on_compare_failed(self, e: msg.CompareFailed) -> None:
        from inspector.tui.screens.compare import CompareScreen

        screen = self.app.screen
        if isinstance(screen, CompareScreen):
            screen.failed(e.error)
        else:
            self.say(f"compare failed: {e.error}", severity="error", timeout=12)

    def on_second_ready(self, e: msg.SecondReady) -> None:
        """The second draft is loaded: switch to it if `B` asked."""
        st = self.state
        if st.session is None:
            return
        st.session.second = e.summary
        for note in e.summary.notes:
            self.say(f"B: {note}", timeout=8)
        if self.switch_pending:
            self.switch_pending = False
            self.action_switch_draft()

    def on_second_failed(self, e: msg.SecondFailed) -> None:
        self.switch_pending = False
        self.say(f"the second draft did not load: {e.error}", severity="error", timeout=12)

    def on_task_done(self, e: msg.TaskDone) -> None:
        if e.kind == "first_look":
            self.first_look_done(e.result, e.error)
        elif e.kind == "export":
            if e.error:
                self.say(f"export failed: {e.error}", severity="error", timeout=12)
            else:
                from inspector.export import shown_path

                self.say(f"exported to {shown_path(e.result)}")
        elif e.kind != "doctor" and e.error:  # the doctor screen receives its own outcome
            self.say(f"internal error: {e.error}", severity="error", timeout=20)

    def first_look_done(self, look: object, error: str | None) -> None:
        """The doctor's search answered: the views name the two wirings by role and, unless the
        user chose a wiring already (at the command line or by a key), the trained one is shown
        with the fed one pinned beside it (`first_look.arranged`)."""
        from inspector.tui.first_look import FirstLook, arranged

        st = self.state
        self.looking, self.look_progress = False, ""
        if error or not isinstance(look, FirstLook) or st.session is None:
            self.say(f"the trained wiring was not found: {error}", severity="warning", timeout=10)
            self.refresh_accuracy()
            return
        st.session.first_look = look
        shown = None
        if getattr(self.app, "initial_wiring", None) is None:  # no --wiring
            shown = arranged(look, st.wiring, st.pins, st.session.initial)
        if shown is not None:
            st.wiring, st.pins = shown
            self.wirings_changed()
        self.refresh_header()
        self.refresh_accuracy()

    def on_job_crashed(self, e: msg.JobCrashed) -> None:
        self.say(f"internal error: {e.error}", severity="error", timeout=20)

    def mark_error(self, i: int, error: str) -> None:
        if not self.state.mark_error(i, error):
            return
        self.sample_list.set_values(i, error=error)
        if i != self.state.sample:
            self.say(f"sample #{i} skipped: {error}", severity="error", timeout=10)
