"""The main screen: the panels, and the wiring between them, the keys and the device thread.

What is shown and known lives in `state.ViewModel` (no Textual); each panel is a widget of its own
(`widgets/`) that paints itself from the state it is given. This screen turns the device thread's
messages (`messages.py`) and the keys into state changes and tells the panels they touch to
repaint. The display modes (colour, masked only, the accuracy view, the status) are reactive:
setting one repaints what depends on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import var

from inspector.formatting import printable
from inspector.tui.drafts import is_second, slots_of
from inspector.tui.input_clock import InputClock
from inspector.tui.keys import MAIN_KEYS
from inspector.tui.messages import FirstLookProgress
from inspector.tui.screens.device_messages import DeviceMessages
from inspector.tui.state import ViewModel, next_metrics
from inspector.tui.widgets.accuracy import AccuracyBar
from inspector.tui.widgets.footer import KeptFooter
from inspector.tui.widgets.header import HeaderBar
from inspector.tui.widgets.sample_rows import COLUMN_SORTS
from inspector.tui.widgets.sample_view import SampleView
from inspector.tui.widgets.samples import SampleList
from inspector.tui.widgets.strip import TokenStrip

if TYPE_CHECKING:
    from inspector.tui.device_thread import DeviceThread
    from inspector.tui.tau_settings import Serving
    from inspector.wiring import WiringKey

T = TypeVar("T")


def if_given(fn: Callable[[T], object]) -> Callable[[T | None], None]:
    """A dialog's callback: fn(result), unless the dialog was cancelled (its result is None)."""

    def done(result: T | None) -> None:
        if result is not None:
            fn(result)

    return done


class MainScreen(DeviceMessages):
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

    def __init__(self, inputs: InputClock) -> None:
        super().__init__()
        self.state = ViewModel()
        self.inputs = inputs  # the app's: when the user last typed or clicked
        self.messages: list[str] = []  # every notification text, for tests and the log
        self.switch_pending = False  # `B` waits for the second draft to load
        self.looking = False  # the doctor's search for the trained wiring runs (`first_look`)
        self.look_progress = ""  # ... and how far it got

    @property
    def device(self) -> DeviceThread | None:
        return self.app.device  # type: ignore[attr-defined]

    # --- layout ------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        self.header_bar = HeaderBar(id="header")
        self.sample_list = SampleList(id="samples")
        self.center = SampleView(id="center")
        self.accuracy_bar = AccuracyBar(id="accuracy")
        yield self.header_bar
        with Horizontal(id="body"):
            yield self.sample_list
            yield self.center
        yield self.accuracy_bar
        yield KeptFooter()

    def on_mount(self) -> None:
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
        self.center.strip.set_mode(colour)
        self.refresh_header()

    def watch_mask_only(self, on: bool) -> None:
        if on:
            self.state.snap_to_masked()
        self.paint_view()
        self.refresh_header()

    def watch_rounds(self, on: bool) -> None:
        self.center.strip.set_show_rounds(on)

    def watch_tree(self, on: bool) -> None:
        self.center.show_tree(on)
        self.request_trees()
        self.paint_tree()

    def watch_metrics(self, metrics: str) -> None:
        self.refresh_accuracy()

    # --- requests and painting ---------------------------------------------------------------
    def request_view(self) -> None:
        """Show (sample, wirings) from the local cache, or ask the device thread for it."""
        st, device = self.state, self.device
        if st.session is None or st.wiring is None or device is None:
            return
        gen = st.request()
        wirings = st.distinct()
        if st.serving is not None:
            device.set_serving(st.serving)
        device.set_fill(wirings)
        if self.show_if_ready():
            st.applied()
            device.request_prefetch(st.sample, st.missing(st.neighbours()), wirings)
        else:
            st.pending = True
            device.request_view(gen, st.sample, wirings, st.neighbours())
            if st.shown is None:
                self.center.strip.show_message(f"computing sample #{st.sample}…")
        self.request_accepts()
        self.request_trees()
        self.refresh_header()

    def request_first_look(self) -> None:
        """Ask the device thread for the trained wiring (the doctor's search) and the one an
        engine feeds, once per session (`first_look.py`); off where the app was made without."""
        st, device = self.state, self.device
        if not getattr(self.app, "first_look", False) or device is None or st.session is None:
            return
        from inspector.tui.first_look import first_look_task

        def progress(stage: str, done: int, total: int) -> None:  # device thread
            self.post_message(FirstLookProgress(f"{stage} {done}/{total}"))  # thread-safe

        self.looking = True
        device.submit("first_look", first_look_task(st.session.presets, progress))
        self.refresh_accuracy()

    def on_first_look_progress(self, m: FirstLookProgress) -> None:
        if self.looking:
            self.look_progress = m.text
            self.refresh_accuracy()

    def request_trees(self) -> None:
        """While the tree panel is open: ask for the shown sample's draft trees if not here."""
        st, device = self.state, self.device
        key = st.trees_key()
        if self.tree and key is not None and key not in st.trees and device is not None:
            device.request_trees(*key)

    def request_accepts(self) -> None:
        """Ask for the serving replays of the current sample the UI does not hold yet."""
        st, device = self.state, self.device
        missing = st.missing_accepts()
        if missing and device is not None and st.serving is not None:
            device.request_accept(st.sample, missing, st.serving)

    def show_if_ready(self) -> bool:
        if not self.state.build_view(self.mask_only):
            return False
        self.paint_view()
        return True

    def paint_view(self) -> None:
        """Everything that depends on the view (not only the cursor)."""
        with self.app.batch_update():
            if self.center.paint(
                self.state, colour=self.colour, mask_only=self.mask_only, tree=self.tree
            ):
                self.refresh_header()
                self.refresh_accuracy()
                self.sample_list.show_sample(self.state.sample)

    def paint_rounds(self) -> None:
        self.center.paint_rounds(self.state)

    def paint_position(self) -> None:
        """The cursor: strip mark, position and slot panels (or the tree), header."""
        if self.center.paint_cursor(self.state, tree=self.tree):
            self.refresh_header()

    def paint_tree(self) -> None:
        self.center.paint_tree(self.state, tree=self.tree)

    def refresh_header(self) -> None:
        self.header_bar.paint(
            self.state, status=self.status, mask_only=self.mask_only, colour=self.colour
        )

    def refresh_accuracy(self) -> None:
        looking = (self.look_progress or "…") if self.looking else None
        self.accuracy_bar.paint(
            self.state, metrics=self.metrics, narrow=self.size.width < 100, looking=looking
        )

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
            self.sample_list.show_sample(self.state.sample)
            self.request_view()

    def set_wiring(self, w: Sequence[int], second: bool | None = None) -> bool:
        """Validate and switch to a wiring of a draft (`second`; None: the one shown); False
        (with a notification) when it is invalid."""
        st = self.state
        if st.session is None:
            return False
        try:
            key = st.parse_wiring(w, second)
        except Exception as e:  # noqa: BLE001 - InputError, shown
            self.say(f"bad wiring: {e}", severity="error")
            return False
        if key != st.wiring:
            st.wiring = key
            self.wirings_changed()
        return True

    def wirings_changed(self) -> None:
        """The current wiring or the pins changed: the view, then (at a pause) every list row."""
        self.request_view()
        self.repaint_rows(range(self.state.n_samples))

    def ready_for(self, action: str) -> bool:
        """Whether an action can run now (the palette asks; the keys stay live and say why not).

        Keys are not dimmed through check_action: that recomposes the footer on every state
        change, which costs a tenth of a second each time on a small CPU."""
        return self.state.ready_for(action)

    # --- mouse -------------------------------------------------------------------------------------
    def on_token_strip_clicked(self, m: TokenStrip.Clicked) -> None:
        if self.state.view is not None and m.token >= 2:
            self.set_row(m.token - 2)

    def on_sample_list_header_clicked(self, m: SampleList.HeaderClicked) -> None:
        """A click on a column header sorts by it."""
        mode = COLUMN_SORTS.get(m.column)
        if mode is not None:
            self.action_cycle_sort(mode)

    def on_sample_list_selected(self, m: SampleList.Selected) -> None:
        self.set_sample(m.sample)

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

        v, row = self.state.view, self.state.row
        if v is not None and row is not None:
            self.app.push_screen(GotoScreen(v.n_rows, row), if_given(self.goto))

    def goto(self, row: int) -> None:
        """The cursor to a typed position (a notification when it is out of range)."""
        v = self.state.view
        if v is not None and not 0 <= row < v.n_rows:
            self.say(f"position {row} is outside 0..{v.n_rows - 1}", severity="error")
            return
        self.set_row(row)

    def action_wiring_editor(self) -> None:
        from inspector.tui.screens.wiring import WiringEditor

        st = self.state
        if st.session is not None and st.wiring is not None:
            editor = WiringEditor(st.session.of_draft(st.wiring), slots_of(st.wiring))
            self.app.push_screen(editor, if_given(self.set_wiring))

    def action_preset(self, name: str) -> None:
        """The preset of the draft shown."""
        st = self.state
        if st.session is None or st.wiring is None:
            return
        s = st.session.of_draft(st.wiring)
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
        self.wirings_changed()

    def set_serving(self, serving: Serving) -> None:
        """Replay τ under new settings: this sample now, the set in the fill (the replays
        already made under other settings stay, so going back is immediate)."""
        st, device = self.state, self.device
        if not st.set_serving(serving):
            return
        if device is not None:
            device.set_serving(serving)
        self.request_accepts()
        self.request_trees()
        self.refresh_accuracy()
        self.paint_rounds()
        self.paint_tree()
        self.say(f"τ replays a {serving.label()}: {serving.spec.flags()}", timeout=4)

    def action_serving(self) -> None:
        from inspector.tui.screens.dialogs import ServingScreen

        st = self.state
        if st.serving is None or st.session is None:
            return
        sweep = None  # the settings sweep runs the first draft
        if st.wiring is not None and not is_second(st.wiring) and self.device is not None:
            from inspector.tui.screens.sweep import SweepScreen

            wiring, device, label = st.wiring, self.device, st.session.wiring_label(st.wiring)

            def sweep() -> SweepScreen:
                return SweepScreen(device, wiring, label)

        screen = ServingScreen(st.serving, sweep, has_target=st.session.target is not None)
        self.app.push_screen(screen, if_given(self.set_serving))

    def action_serving_steps(self, delta: int) -> None:
        serving = self.state.stepped_serving(delta)
        if serving is None:
            self.say("a round drafts at least one step")
            return
        self.set_serving(serving)

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

    def action_cycle_sort(self, mode: int | None = None) -> None:
        """The sample list sorted by the next mode (or by `mode`: a column header's)."""
        desc = self.sample_list.cycle_sort(self.state.sample, mode)
        self.say(f"samples sorted by {desc}", timeout=3)

    def action_export(self) -> None:
        from inspector.tui.tasks import export_task

        st, device = self.state, self.device
        v = st.shown
        if st.session is None or device is None or v is None:
            return
        # the export writes the first draft's predictions (its file names one checkpoint)
        wirings = [w for w in st.export_wirings(st.sample) if not is_second(w)]
        if not wirings:
            self.say("the export writes draft A's predictions: show one of its wirings (B)")
            return
        out_dir = getattr(self.app, "export_dir", None)
        device.submit(
            "export", export_task(st.session, st.sample, wirings, v.data.input_ids, out_dir)
        )
        self.say(f"exporting sample #{st.sample} ({len(wirings)} wirings)…", timeout=3)

    def action_compare(self) -> None:
        """The shown sample under both drafts (`open --compare`), computed if not here."""
        from inspector.tui.screens.compare import CompareScreen

        st, device = self.state, self.device
        if st.session is None or device is None:
            return
        key = st.compare_key()
        if key is None:
            self.say(
                "no second draft to compare with: open with --compare CKPT_B"
                if not st.session.compare
                else "no sample shown yet"
            )
            return
        screen = CompareScreen(st.session, st.comparisons.get(key))
        if st.comparisons.get(key) is None:
            device.request_compare(*key)
        self.app.push_screen(screen, if_given(self.set_row))

    def action_switch_draft(self) -> None:
        """Show the other draft (`open --compare`), loading the second on first use."""
        st, device = self.state, self.device
        if st.session is None or device is None or st.wiring is None:
            return
        if not st.session.compare:
            self.say("no second draft to switch to: open with --compare CKPT_B")
            return
        if st.session.second is None:
            self.switch_pending = True
            device.request_second()
            self.say(f"loading the second draft {printable(st.session.compare)}…", timeout=3)
            return
        if st.switch_draft() is None:
            self.say("the second draft has no wiring that fits", severity="error")
            return
        self.wirings_changed()
        self.say(f"showing {st.session.wiring_label(st.wiring)}", timeout=3)

    def action_doctor(self) -> None:
        from inspector.tui.screens.doctor import DoctorScreen, doctor_sampling

        if self.state.session is None or self.device is None:
            return
        serving = self.state.serving
        sampling = None if serving is None else doctor_sampling(serving)
        screen = DoctorScreen(
            self.device, self.state.session, sampling=sampling, trace=self.state.sample
        )
        self.app.push_screen(screen, self.doctor_done)

    def doctor_done(self, w: WiringKey | None) -> None:
        """The doctor's wiring is the first draft's (it diagnoses that one)."""
        if w is not None and self.set_wiring(w, second=False) and self.state.session is not None:
            self.say(f"applied the doctor's wiring {self.state.session.wiring_label(w)}")

    def action_help(self) -> None:
        from inspector.tui.screens.help import HelpScreen

        focused = self.app.focused
        ids = [w.id for w in (focused, *focused.ancestors) if w.id] if focused is not None else []
        self.app.push_screen(HelpScreen(ids))

    async def action_quit(self) -> None:
        self.app.exit()
