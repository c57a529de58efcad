"""The main screen: the panels, and the wiring between them, the keys and the device thread.

What is shown and known lives in `state.ViewModel` (no Textual); what each panel shows is computed
by `view`, `panels` and `accuracy`. This screen turns device events and keys into state changes
and repaints the panels they touch. The display modes (colour, masked only, the accuracy view,
the status) are reactive: setting one repaints what depends on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean
from typing import TYPE_CHECKING

from textual.containers import Horizontal, Vertical
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Sparkline, Static

from inspector.formatting import printable
from inspector.tui import messages as msg
from inspector.tui.keys import MAIN_KEYS
from inspector.tui.state import ViewModel, next_metrics
from inspector.tui.widgets.samples import COLUMN_SORTS, SampleList
from inspector.tui.widgets.strip import TokenStrip

if TYPE_CHECKING:
    from inspector.serving.spec import DraftSpec
    from inspector.tui.engine import Engine
    from inspector.wiring import WiringKey


class MainScreen(Screen):
    """Header, sample list, token strip, sparkline, position detail, slot panel, accuracy bar."""

    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-medium"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall")]
    BINDINGS = MAIN_KEYS

    colour = var("hit", init=False)  # token colouring: "hit" (hit/miss) or "p" (p(true))
    mask_only = var(False, init=False)  # show and step through loss-masked positions only
    rounds = var(True, init=False)  # the strip's rounds line (a per position, the walk's rounds)
    tree = var(False, init=False)  # the draft tree panel in place of the slot panel
    metrics = var("ours", init=False)  # the accuracy bar's view (state.METRICS)
    status = var("starting", init=False)  # loading stage, shown in the header

    def __init__(self) -> None:
        super().__init__()
        self.state = ViewModel()
        self.messages: list[str] = []  # every notification text, for tests and the log

    @property
    def engine(self) -> Engine | None:
        return self.app.engine  # type: ignore[attr-defined]

    # --- layout ------------------------------------------------------------------------------------
    def compose(self):
        yield Static(id="header")
        with Horizontal(id="body"):
            yield SampleList(id="samples")
            with Vertical(id="center"):
                yield TokenStrip(id="strip")
                with Horizontal(id="spark-row"):
                    yield Static("p(true)", id="spark-label")
                    yield Sparkline([], id="spark", summary_function=fmean)
                with Horizontal(id="lower"):
                    yield Static(id="detail")
                    yield Static(id="slots")
                    yield Static(id="tree")
        yield Static(id="accuracy")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#samples").border_title = "samples"
        self.query_one("#strip").border_title = "tokens"
        self.query_one("#detail").border_title = "position"
        self.query_one("#slots").border_title = "slots"
        self.query_one("#tree").border_title = "draft tree"
        self.query_one("#accuracy").border_title = "accuracy"  # until loaded: refresh_accuracy
        self.refresh_header()

    def say(self, text: str, *, severity: str = "information", timeout: float = 5) -> None:
        """A notification (markup off, control characters escaped), remembered in `messages`."""
        text = printable(text)
        self.messages.append(text)
        self.notify(text, severity=severity, timeout=timeout, markup=False)  # type: ignore[arg-type]

    # --- reactive display modes --------------------------------------------------------------------
    def watch_status(self) -> None:
        self.refresh_header()

    def watch_colour(self, colour: str) -> None:
        self.query_one(TokenStrip).set_mode(colour)
        self.refresh_header()

    def watch_mask_only(self, on: bool) -> None:
        if on:
            self.state.snap_to_masked()
        self.paint_view()
        self.refresh_header()

    def watch_rounds(self, on: bool) -> None:
        self.query_one(TokenStrip).set_show_rounds(on)

    def watch_tree(self, on: bool) -> None:
        self.query_one("#tree").display = on
        self.query_one("#slots").display = not on
        self.request_trees()
        self.paint_tree()

    def watch_metrics(self, metrics: str) -> None:
        self.refresh_accuracy()

    # --- device events -----------------------------------------------------------------------------
    def on_load_progress(self, e: msg.LoadProgress) -> None:
        self.query_one(TokenStrip).show_message(f"{e.text}…")
        self.status = e.text

    def on_load_failed(self, e: msg.LoadFailed) -> None:
        self.query_one(TokenStrip).show_message(f"could not load: {e.error}")
        self.status = "load failed"
        self.say(f"could not load: {e.error}", severity="error", timeout=30)

    def on_loaded(self, e: msg.Loaded) -> None:
        s = e.session
        st = self.state
        known_bad = st.load(s)
        self.status = ""
        lst = self.query_one(SampleList)
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
            self.query_one(TokenStrip).show_message(f"no usable wiring: {errs}")
            self.say(f"no usable wiring: {errs}", severity="error", timeout=30)
        else:
            self.request_view()

    def on_view_ready(self, e: msg.ViewReady) -> None:
        st = self.state
        data = e.sample
        if st.clear_error(data.index):  # a retry worked (e.g. after an out-of-memory error)
            self.query_one(SampleList).clear_error(data.index)
            if data.index == st.sample:
                self.request_accepts()  # its replays left with the error
        for w in st.remember_sample(data):
            self.say(f"sample #{data.index}: {w}", severity="warning")
        added = st.add_predictions(data, e.preds)
        if added:
            self.update_list_row(data.index)
        shown = False
        if (e.gen == st.gen and not e.prefetch) or (st.pending and data.index == st.sample):
            # The view asked for, or a prefetch that completed what the current view needs.
            shown = self.show_if_ready()
        if shown:
            st.applied()
            self.refresh_header()
        elif added:
            self.refresh_accuracy()  # set totals moved

    def on_view_failed(self, e: msg.ViewFailed) -> None:
        st = self.state
        self.mark_error(e.sample, e.error)
        if e.gen != st.gen:
            return
        st.applied()
        if e.sample == st.sample:
            st.view = None
            self.query_one(TokenStrip).show_message(f"sample #{e.sample}: {e.error}")
            self.query_one("#detail", Static).update("")
            self.query_one("#slots", Static).update("")
        self.say(e.error, severity="error", timeout=12)
        self.refresh_header()
        self.refresh_accuracy()

    def on_scored_batch(self, e: msg.ScoredBatch) -> None:
        changed = {s.sample for s in e.items if self.state.add_stats(*s)}
        for i, err in e.errors:
            self.mark_error(i, err)
        for i in changed:
            self.update_list_row(i)
        accepted = [a for a in e.accepts if self.state.add_accept(a)]
        if changed or e.errors or accepted:
            self.refresh_accuracy()
        if any(a.index == self.state.sample for a in e.accepts):
            self.paint_rounds()

    def on_accepts_ready(self, e: msg.AcceptsReady) -> None:
        """The serving replay of a sample the UI asked for (it may be another one by now)."""
        for a in e.accepts:
            self.state.add_accept(a)
        self.refresh_accuracy()
        if e.sample == self.state.sample:
            self.paint_rounds()

    def on_trees_ready(self, e: msg.TreesReady) -> None:
        t = e.trees
        key = (t.index, t.wiring, t.spec)
        self.state.trees.put(key, t)
        if key == self.state.trees_key():
            self.paint_tree()

    def on_trees_failed(self, e: msg.TreesFailed) -> None:
        self.query_one("#tree", Static).update(f"no draft tree: {printable(e.error)}")
        self.say(f"draft tree failed: {e.error}", severity="error", timeout=12)

    def on_task_done(self, e: msg.TaskDone) -> None:
        if e.kind == "export":
            if e.error:
                self.say(f"export failed: {e.error}", severity="error", timeout=12)
            else:
                self.say(f"exported to {e.result}")
        elif e.kind != "doctor" and e.error:  # the doctor screen receives its own outcome
            self.say(f"internal error: {e.error}", severity="error", timeout=20)

    def on_job_crashed(self, e: msg.JobCrashed) -> None:
        self.say(f"internal error: {e.error}", severity="error", timeout=20)

    def mark_error(self, i: int, error: str) -> None:
        if not self.state.mark_error(i, error):
            return
        self.query_one(SampleList).set_values(i, error=error)
        if i != self.state.sample:
            self.say(f"sample #{i} skipped: {error}", severity="error", timeout=10)

    # --- painting ------------------------------------------------------------------------------
    def update_list_row(self, i: int) -> None:
        r = self.state.list_row(i)
        if r is not None:
            self.query_one(SampleList).set_values(
                i, length=r.length, cur=r.cur, ref=r.ref, has_ref=r.has_ref
            )

    def update_all_rows(self) -> None:
        with self.app.batch_update():
            for i in range(self.state.n_samples):
                self.update_list_row(i)

    def request_view(self) -> None:
        """Show (sample, wirings) from the local cache, or ask the device thread for it."""
        st, engine = self.state, self.engine
        if st.session is None or st.wiring is None or engine is None:
            return
        gen = st.request()
        wirings = st.distinct()
        if st.spec is not None:
            engine.set_spec(st.spec)
        engine.set_fill(wirings)
        if self.show_if_ready():
            st.applied()
            engine.request_prefetch(st.sample, st.missing(st.neighbours()), wirings)
        else:
            st.pending = True
            engine.request_view(gen, st.sample, wirings, st.neighbours())
            if st.shown is None:
                self.query_one(TokenStrip).show_message(f"computing sample #{st.sample}…")
        self.request_accepts()
        self.request_trees()
        self.refresh_header()

    def request_trees(self) -> None:
        """While the tree panel is open: ask for the shown sample's draft trees if not here."""
        st, engine = self.state, self.engine
        key = st.trees_key()
        if self.tree and key is not None and key not in st.trees and engine is not None:
            engine.request_trees(*key)

    def request_accepts(self) -> None:
        """Ask for the serving replays of the current sample the UI does not hold yet."""
        st, engine = self.state, self.engine
        missing = st.missing_accepts()
        if missing and engine is not None and st.spec is not None:
            engine.request_accept(st.sample, missing, st.spec)

    def show_if_ready(self) -> bool:
        if not self.state.build_view(self.mask_only):
            return False
        self.paint_view()
        return True

    def paint_view(self) -> None:
        """Everything that depends on the view (not only the cursor)."""
        from inspector.tui.view import strip_marks

        st = self.state
        v = st.view
        if v is None or st.session is None:
            return
        kind, pbin, show = strip_marks(v, self.mask_only)
        strip = self.query_one(TokenStrip)
        strip.mode = self.colour
        sep = "" if st.session.decoder.has_text else " "
        with self.app.batch_update():
            strip.set_tokens(
                v.data.texts, v.data.ends_line, kind, pbin, show, sep=sep, cursor=st.row + 2
            )
            self.paint_rounds()
            self.paint_spark()
            self.paint_position()
            self.refresh_accuracy()
            self.query_one(SampleList).show_sample(st.sample)

    def paint_rounds(self) -> None:
        """The strip's rounds line: the current wiring's replay under the current settings."""
        from inspector.tui.view import round_marks

        st = self.state
        v = st.view
        if v is None:
            return
        accept = st.accepts.get((v.sample, v.wiring, st.spec)) if st.spec is not None else None
        marks = round_marks(accept, v.data.length)
        self.query_one(TokenStrip).set_rounds(*(marks or (None, None)))

    def paint_spark(self) -> None:
        import numpy as np

        v = self.state.view
        if v is None:
            return
        p = np.nan_to_num(v.s0.p_true.astype(np.float64), nan=0.0)
        if self.mask_only and len(v.masked_rows):
            p = p[v.masked_rows]
        self.query_one(Sparkline).data = p.tolist() or [0.0]

    def paint_position(self) -> None:
        """The cursor: strip mark, position and slot panels, header."""
        from inspector.tui.panels import detail_renderable, slots_renderable

        st = self.state
        v, row = st.view, st.row
        if v is None or row is None or st.session is None:
            return
        self.query_one(TokenStrip).set_cursor(row + 2)
        detail = self.query_one("#detail", Static)
        width = detail.content_size.width or 48
        detail.update(detail_renderable(st.session, v, row, width))
        self.query_one("#slots", Static).update(slots_renderable(st.session, v, row))
        self.paint_tree()
        self.refresh_header()

    def paint_tree(self) -> None:
        """The tree panel at the cursor (when open)."""
        from inspector.tui.panels import tree_renderable

        st = self.state
        v, row, key = st.shown, st.row, st.trees_key()
        if not self.tree or v is None or row is None or st.session is None or key is None:
            return
        panel = self.query_one("#tree", Static)
        width = panel.content_size.width or 36
        height = panel.content_size.height or 15
        trees = st.trees.get(key)
        panel.update(tree_renderable(st.session, v, trees, row, width, height))

    def refresh_header(self) -> None:
        from inspector.tui.view import header_text

        text = header_text(
            self.state, status=self.status, mask_only=self.mask_only, mode=self.colour
        )
        self.query_one("#header", Static).update(text)

    def refresh_accuracy(self) -> None:
        from inspector.tui.accuracy import accuracy_text, accuracy_title

        bar = self.query_one("#accuracy", Static)
        title = accuracy_title(self.metrics, self.state.spec)
        if bar.border_title != title:
            bar.border_title = title
        narrow, width = self.size.width < 100, max(bar.content_size.width, 20)
        text = accuracy_text(self.state, metrics=self.metrics, narrow=narrow, width=width)
        if text is not None:
            bar.update(text)

    def on_resize(self) -> None:
        self.refresh_accuracy()
        self.call_after_refresh(self.paint_position)  # panel widths changed

    # --- state changes from keys and dialogs ---------------------------------------------------------
    def set_row(self, row: int | None) -> None:
        st = self.state
        if row is None or not st.set_row(row):
            return
        self.paint_position()
        if st.view is not None and st.view.ref is not None:
            self.refresh_accuracy()  # the flipped list highlights the cursor

    def set_sample(self, i: int) -> None:
        if self.state.select_sample(i):
            self.query_one(SampleList).show_sample(self.state.sample)
            self.request_view()

    def set_wiring(self, w: Sequence[int]) -> bool:
        """Validate and switch to a wiring; False (with a notification) when it is invalid."""
        st = self.state
        if st.session is None:
            return False
        try:
            key = st.parse_wiring(w)
        except Exception as e:  # noqa: BLE001 - InputError, shown
            self.say(f"bad wiring: {e}", severity="error")
            return False
        if key != st.wiring:
            st.wiring = key
            self.request_view()
            self.call_after_refresh(self.update_all_rows)  # the panels paint first
        return True

    def ready_for(self, action: str) -> bool:
        """Whether an action can run now (the palette asks; the keys stay live and say why not).

        Keys are not dimmed through check_action: that recomposes the footer on every state
        change, which costs a tenth of a second each time on a small CPU."""
        return self.state.ready_for(action)

    # --- mouse -------------------------------------------------------------------------------------
    def on_token_strip_clicked(self, m: TokenStrip.Clicked) -> None:
        if self.state.view is not None and m.token >= 2:
            self.set_row(m.token - 2)

    def on_data_table_header_selected(self, m: DataTable.HeaderSelected) -> None:
        """A click on a column header sorts by it."""
        mode = COLUMN_SORTS.get(str(m.column_key.value))
        if mode is not None:
            desc = self.query_one(SampleList).cycle_sort(self.state.sample, mode)
            self.say(f"samples sorted by {desc}", timeout=3)

    def on_data_table_row_selected(self, m: DataTable.RowSelected) -> None:
        if m.row_key.value is not None:
            self.set_sample(int(m.row_key.value))

    # --- actions (the bindings in keys.py) ---------------------------------------------------------
    def action_step(self, delta: int) -> None:
        """One position left (-1) or right (+1); masked positions only with mask_only."""
        self.set_row(self.state.step_target(delta, self.mask_only))

    def action_edge(self, last: bool) -> None:
        self.set_row(self.state.edge_target(last, self.mask_only))

    def action_sample(self, delta: int) -> None:
        i = self.state.sample + delta
        if 0 <= i < self.state.n_samples:
            self.set_sample(i)

    def action_jump(self, what: str, delta: int) -> None:
        """To the next (delta 1) or previous miss ("miss") or flipped position ("flip")."""
        v = self.state.view
        if v is None:
            return
        if what == "flip" and not self.state.pins:
            self.say("pin a reference wiring first (p)")
            return
        rows, name = (
            (v.miss_rows, "misses") if what == "miss" else (v.flipped_rows, "flipped positions")
        )
        target = self.state.jump_target(rows, delta > 0)
        if target is None:
            self.say(f"no {name} in this sample")
        self.set_row(target)

    def action_goto(self) -> None:
        from inspector.tui.screens.dialogs import GotoScreen

        st = self.state
        v = st.view
        if v is None or st.row is None:
            return

        def done(row: int | None) -> None:
            if row is None:
                return
            if not 0 <= row < v.n_rows:
                self.say(f"position {row} is outside 0..{v.n_rows - 1}", severity="error")
                return
            self.set_row(row)

        self.app.push_screen(GotoScreen(v.n_rows, st.row), done)

    def action_wiring_editor(self) -> None:
        from inspector.tui.screens.wiring import WiringEditor

        st = self.state
        if st.session is None or st.wiring is None:
            return

        def done(w: WiringKey | None) -> None:
            if w is not None:
                self.set_wiring(w)

        self.app.push_screen(WiringEditor(st.session, st.wiring), done)

    def action_preset(self, name: str) -> None:
        s = self.state.session
        if s is None:
            return
        w = s.presets.get(name)
        if w is None:
            self.say(s.preset_errors.get(name, f"no {name} preset"), severity="error")
            return
        self.set_wiring(w)

    def action_pin(self) -> None:
        st = self.state
        w = st.wiring
        pinned = st.toggle_pin()
        if pinned is None or w is None or st.session is None:
            return
        label = st.session.wiring_label(w)
        self.say(f"pinned {label} as the reference" if pinned else f"unpinned {label}")
        self.request_view()
        self.call_after_refresh(self.update_all_rows)

    def set_spec(self, spec: DraftSpec) -> None:
        """Replay τ under new engine settings: this sample now, the set in the fill (the replays
        already made under other settings stay, so going back is immediate)."""
        from inspector.tui.accuracy import serving_label

        st, engine = self.state, self.engine
        if not st.set_spec(spec):
            return
        if engine is not None:
            engine.set_spec(spec)
        self.request_accepts()
        self.request_trees()
        self.refresh_accuracy()
        self.paint_rounds()
        self.paint_tree()
        self.say(f"τ replays a {serving_label(spec)}: {spec.flags()}", timeout=4)

    def action_serving(self) -> None:
        from inspector.tui.screens.dialogs import ServingScreen

        st = self.state
        if st.spec is None:
            return

        def done(spec: DraftSpec | None) -> None:
            if spec is not None:
                self.set_spec(spec)

        self.app.push_screen(ServingScreen(st.spec), done)

    def action_serving_steps(self, delta: int) -> None:
        spec = self.state.stepped_spec(delta)
        if spec is None:
            self.say("a round drafts at least one step")
            return
        self.set_spec(spec)

    def action_cycle_metrics(self) -> None:
        layout = self.state.session.layout if self.state.session else ""
        self.metrics = next_metrics(self.metrics, layout)

    def action_toggle_mask(self) -> None:
        self.mask_only = not self.mask_only

    def action_toggle_tree(self) -> None:
        self.tree = not self.tree

    def action_toggle_rounds(self) -> None:
        self.rounds = not self.rounds

    def action_toggle_colour(self) -> None:
        self.colour = "p" if self.colour == "hit" else "hit"

    def action_cycle_sort(self) -> None:
        desc = self.query_one(SampleList).cycle_sort(self.state.sample)
        self.say(f"samples sorted by {desc}", timeout=3)

    def action_export(self) -> None:
        from inspector.tui.tasks import export_task

        st, engine = self.state, self.engine
        v = st.shown
        if st.session is None or engine is None or v is None:
            return
        wirings = st.export_wirings(st.sample)
        engine.submit("export", export_task(st.session, st.sample, wirings, v.data.input_ids))
        self.say(f"exporting sample #{st.sample} ({len(wirings)} wirings)…", timeout=3)

    def action_doctor(self) -> None:
        from inspector.tui.screens.doctor import DoctorScreen

        if self.state.session is None or self.engine is None:
            return
        self.app.push_screen(DoctorScreen(self.engine, self.state.session), self.doctor_done)

    def doctor_done(self, w: WiringKey | None) -> None:
        if w is not None and self.set_wiring(w) and self.state.session is not None:
            self.say(f"applied the doctor's wiring {self.state.session.wiring_label(w)}")

    def action_help(self) -> None:
        from inspector.tui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen())

    async def action_quit(self) -> None:
        self.app.exit()
