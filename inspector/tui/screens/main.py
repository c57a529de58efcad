"""The main screen: every panel, every key, and the state that ties them to the device thread."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean
from typing import TYPE_CHECKING, Any

from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Sparkline, Static

from inspector.cache import ByteLRU
from inspector.tui import engine as eng
from inspector.tui.widgets.samples import SORTS, SampleList
from inspector.tui.widgets.strip import TokenStrip

if TYPE_CHECKING:
    from inspector.tui.view import SetTotals, ViewState

WiringKey = tuple[int, ...]

POSITION = Binding.Group("position", compact=True)
SAMPLE = Binding.Group("sample", compact=True)
MISS = Binding.Group("miss", compact=True)

# Long descriptions: the help screen and the command palette read these.
ACTIONS: dict[str, tuple[str, str]] = {
    "prev_pos": ("Previous position", "Move the cursor one position left (←, h)."),
    "next_pos": ("Next position", "Move the cursor one position right (→, l)."),
    "first_pos": ("First position", "Jump to the first position (Home)."),
    "last_pos": ("Last position", "Jump to the last position (End)."),
    "prev_sample": ("Previous sample", "Show the previous sample ([)."),
    "next_sample": ("Next sample", "Show the next sample (])."),
    "next_miss": (
        "Next miss",
        "Jump to the next loss-masked position the draft got wrong (n, F8).",
    ),
    "prev_miss": ("Previous miss", "Jump to the previous miss (N, Shift+F8)."),
    "next_flip": (
        "Next flipped position",
        "Jump to the next position whose hit/miss differs between the current and the "
        "reference wiring (f; F goes back).",
    ),
    "prev_flip": ("Previous flipped position", "Jump to the previous flipped position (F)."),
    "goto": ("Go to position", "Type a position number (g)."),
    "wiring_editor": (
        "Edit the wiring",
        "Choose the slot feeding each fc block, or a preset (w).",
    ),
    "preset('train')": ("Wiring: train preset", "Feed fc what the trainer fed it (t)."),
    "preset('serve')": (
        "Wiring: serve preset",
        "Feed fc the last N pre-norm slots, as a serving engine that captures decoder-layer "
        "outputs does (s).",
    ),
    "pin": (
        "Pin / unpin the wiring",
        "Pin the current wiring as the reference (p); pressing p on a pinned wiring unpins it.",
    ),
    "toggle_mask": (
        "Masked positions only",
        "Show and step through loss-masked positions only (m).",
    ),
    "toggle_colour": ("Colour by p(true) / hit-miss", "Switch the token colouring (c)."),
    "cycle_sort": ("Cycle the sample sort", "Sort the sample list by #, length, cur, ref, Δ (o)."),
    "export": (
        "Export the sample",
        "Write the current sample's predictions under every wiring computed so far to a JSON "
        "file in the working directory (e).",
    ),
    "doctor": ("Doctor", "Diagnose the wiring and config from a few samples (d)."),
    "help": ("Help", "Keys and metric definitions (F1, ?)."),
    "quit": ("Quit", "Leave the inspector (q)."),
}


class MainScreen(Screen):
    """Header, sample list, token strip, sparkline, position detail, slot panel, accuracy bar."""

    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-medium"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall")]

    BINDINGS = [
        Binding("left,h", "prev_pos", "pos", key_display="←", priority=True, group=POSITION),
        Binding("right,l", "next_pos", "pos", key_display="→", priority=True, group=POSITION),
        Binding("home", "first_pos", "first", show=False, priority=True),
        Binding("end", "last_pos", "last", show=False, priority=True),
        Binding("left_square_bracket", "prev_sample", "sample", key_display="[", group=SAMPLE),
        Binding("right_square_bracket", "next_sample", "sample", key_display="]", group=SAMPLE),
        Binding("n,f8", "next_miss", "miss", key_display="n", group=MISS),
        Binding("N,shift+f8", "prev_miss", "miss", key_display="N", group=MISS),
        Binding("f", "next_flip", "flip"),
        Binding("F", "prev_flip", "prev flipped", show=False),
        Binding("g", "goto", "go to", show=False),
        Binding("w", "wiring_editor", "wiring"),
        Binding("t", "preset('train')", "train"),
        Binding("s", "preset('serve')", "serve"),
        Binding("p", "pin", "pin"),
        Binding("m", "toggle_mask", "masked", show=False),
        Binding("c", "toggle_colour", "colour", show=False),
        Binding("o", "cycle_sort", "sort", show=False),
        Binding("e", "export", "export", show=False),
        Binding("d", "doctor", "doctor"),
        Binding("f1,question_mark", "help", "help", key_display="?"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.session: eng.Session | None = None
        self.status = "starting"
        self.sample = 0
        self.wiring: WiringKey | None = None
        self.pins: list[WiringKey] = []
        self.mask_only = False
        self.colour = "hit"
        self.gen = 0
        self.pending = False
        self.view: ViewState | None = None
        self.rows: dict[int, int] = {}
        self.stats: dict[tuple[int, WiringKey], list] = {}
        self.lengths: dict[int, int] = {}
        self.errors: dict[int, str] = {}
        self.totals: dict[WiringKey, SetTotals] = {}
        # Sized by the budget once loaded; what is on screen is held by `view` in any case.
        self._preds: ByteLRU[tuple[int, WiringKey], Any] = ByteLRU(0)
        self._sdata: ByteLRU[int, eng.SampleData] = ByteLRU(0)
        self.applied_gen = -1
        self.doctor_screen: Any = None
        self.messages: list[str] = []  # every notification text, for tests and the log
        self._warned: set[tuple[int, str]] = set()

    @property
    def engine(self) -> eng.Engine | None:
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
        yield Static(id="accuracy")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#samples").border_title = "samples"
        self.query_one("#strip").border_title = "tokens"
        self.query_one("#detail").border_title = "position"
        self.query_one("#slots").border_title = "slots"
        self.query_one("#accuracy").border_title = "accuracy"
        self._refresh_header()

    # --- helpers -----------------------------------------------------------------------------------
    def say(self, text: str, *, severity: str = "information", timeout: float = 5) -> None:
        self.messages.append(text)
        self.notify(text, severity=severity, timeout=timeout, markup=False)  # type: ignore[arg-type]

    @property
    def ref(self) -> WiringKey | None:
        return self.pins[-1] if self.pins else None

    def view_wirings(self) -> list[WiringKey]:
        """The current wiring first, then the pins (oldest first; the last is the reference)."""
        return [] if self.wiring is None else [self.wiring, *self.pins]

    def _distinct(self) -> list[WiringKey]:
        return list(dict.fromkeys(self.view_wirings()))

    @property
    def row(self) -> int | None:
        if self.view is None:
            return None
        return self.rows.get(self.view.sample)

    # --- engine messages -----------------------------------------------------------------------
    def on_load_progress(self, m: eng.LoadProgress) -> None:
        self.status = m.text
        self.query_one(TokenStrip).show_message(f"{m.text}…")
        self._refresh_header()

    def on_load_failed(self, m: eng.LoadFailed) -> None:
        self.status = "load failed"
        self.query_one(TokenStrip).show_message(f"could not load: {m.error}")
        self._refresh_header()
        self.say(f"could not load: {m.error}", severity="error", timeout=30)

    def on_loaded(self, m: eng.Loaded) -> None:
        s = m.session
        self.session = s
        if s.budget is not None:
            self._preds.max_bytes = s.budget.host_share("app_predictions")
            self._sdata.max_bytes = s.budget.host_share("app_samples")
        else:  # a loader without a budget (tests): a fixed 256 MB
            self._preds.max_bytes = self._sdata.max_bytes = 256 * 2**20
        self.status = ""
        self.wiring = s.initial
        self.query_one(SampleList).set_samples(len(s.files))
        for note in s.notes:
            self.say(note, severity="warning")
        if s.initial_error:
            self.say(s.initial_error, severity="error", timeout=15)
        if self.wiring is None:
            errs = "; ".join(s.preset_errors.values())
            self.query_one(TokenStrip).show_message(f"no usable wiring: {errs}")
            self.say(f"no usable wiring: {errs}", severity="error", timeout=30)
        else:
            self._request_view()

    def on_view_data(self, m: eng.ViewData) -> None:
        data = m.sample
        if data.index in self.errors:  # a retry worked (e.g. after an out-of-memory error)
            del self.errors[data.index]
            self.query_one(SampleList).clear_error(data.index)
        self._remember_sample(data)
        added = False
        for w, pred in m.preds.items():
            self._preds.put((data.index, w), pred)
            added |= self._add_stats(data.index, w, pred.metrics, data.length)
        if added:
            self._update_list_row(data.index)
        shown = False
        if m.gen == self.gen and not m.prefetch:
            shown = self._try_show()
        elif self.pending and data.index == self.sample:
            shown = self._try_show()  # a prefetch completed what the current view needs
        if shown:
            self.pending = False
            self.applied_gen = self.gen
            self._refresh_header()
        elif added:
            self._refresh_accuracy()  # set totals moved

    def on_view_failed(self, m: eng.ViewFailed) -> None:
        self._mark_error(m.sample, m.error)
        if m.gen != self.gen:
            return
        self.pending = False
        self.applied_gen = m.gen
        if m.sample == self.sample:
            self.view = None
            self.query_one(TokenStrip).show_message(f"sample #{m.sample}: {m.error}")
            self.query_one("#detail", Static).update("")
            self.query_one("#slots", Static).update("")
        self.say(m.error, severity="error", timeout=12)
        self._refresh_header()
        self._refresh_accuracy()

    def on_stats_batch(self, m: eng.StatsBatch) -> None:
        changed: set[int] = set()
        for i, w, metrics, length in m.items:
            if self._add_stats(i, w, metrics, length):
                changed.add(i)
        for i, err in m.errors:
            self._mark_error(i, err)
        for i in changed:
            self._update_list_row(i)
        if changed or m.errors:
            self._refresh_accuracy()

    def on_task_done(self, m: eng.TaskDone) -> None:
        if m.kind == "export":
            if m.error:
                self.say(f"export failed: {m.error}", severity="error", timeout=12)
            else:
                self.say(f"exported to {m.result}")
        elif m.kind == "doctor":
            if self.doctor_screen is not None:
                self.doctor_screen.show_result(m.result, m.error)
            elif m.error:
                self.say(f"doctor failed: {m.error}", severity="error")
        elif m.error:
            self.say(f"internal error: {m.error}", severity="error", timeout=20)

    # --- state changes ------------------------------------------------------------------------------
    def _remember_sample(self, data: eng.SampleData) -> None:
        self._sdata.put(data.index, data)
        self.lengths[data.index] = data.length
        for w in data.warnings:
            if (data.index, w) not in self._warned:
                self._warned.add((data.index, w))
                self.say(f"sample #{data.index}: {w}", severity="warning")

    def _add_stats(self, i: int, w: WiringKey, metrics: list, length: int) -> bool:
        from inspector.metrics import sum_steps
        from inspector.tui.view import SetTotals

        if length:
            self.lengths[i] = length
        key = (i, w)
        if key in self.stats or i in self.errors:
            return False
        self.stats[key] = metrics
        tot = self.totals.get(w)
        if tot is None:
            self.totals[w] = SetTotals(sum_steps([metrics]), 1)
        else:
            tot.steps = sum_steps([tot.steps, metrics])
            tot.n_samples += 1
        return True

    def _mark_error(self, i: int, error: str) -> None:
        if i in self.errors:
            return
        self.errors[i] = error
        self.query_one(SampleList).set_values(i, error=error)
        if i != self.sample:
            self.say(f"sample #{i} skipped: {error}", severity="error", timeout=10)
        # Metrics already counted for this sample leave the totals (as eval skips it).
        from inspector.metrics import sum_steps

        for j, w in [key for key in self.stats if key[0] == i]:
            del self.stats[(j, w)]
            tot = self.totals.get(w)
            if tot is not None:
                rest = [m for (_, ww), m in self.stats.items() if ww == w]
                tot.steps = sum_steps(rest)
                tot.n_samples = len(rest)

    def _update_list_row(self, i: int) -> None:
        if self.wiring is None:
            return
        lst = self.query_one(SampleList)
        cur = self.stats.get((i, self.wiring))
        ref = self.stats.get((i, self.ref)) if self.ref is not None else None
        lst.set_values(
            i,
            length=self.lengths.get(i),
            cur=cur[0].all_tok.acc if cur else None,
            ref=ref[0].all_tok.acc if ref else None,
            has_ref=self.ref is not None,
        )

    def _update_all_rows(self) -> None:
        if self.session is None:
            return
        with self.app.batch_update():
            for i in range(len(self.session.files)):
                self._update_list_row(i)

    def _neighbours(self) -> list[int]:
        n = len(self.session.files) if self.session else 0
        return [s for s in (self.sample + 1, self.sample - 1) if 0 <= s < n]

    def _request_view(self) -> None:
        """Show (sample, wirings) from the local cache, or ask the device thread for it."""
        engine = self.engine
        if self.session is None or self.wiring is None or engine is None:
            return
        self.gen += 1
        wirings = self._distinct()
        engine.set_fill(wirings)
        if self._try_show():
            self.pending = False
            self.applied_gen = self.gen
            todo = [
                n for n in self._neighbours() if any((n, w) not in self._preds for w in wirings)
            ]
            engine.request_prefetch(self.sample, todo, wirings)
        else:
            self.pending = True
            engine.request_view(self.gen, self.sample, wirings, self._neighbours())
            if self.view is None or self.view.sample != self.sample:
                self.query_one(TokenStrip).show_message(f"computing sample #{self.sample}…")
        self._refresh_header()

    def _try_show(self) -> bool:
        from inspector.tui.view import build_view

        data = self._sdata.get(self.sample)
        if data is None or self.wiring is None:
            return False
        preds = {}
        for w in self._distinct():
            p = self._preds.get((self.sample, w))
            if p is None:
                return False
            preds[w] = p
        pins = [(w, preds[w]) for w in self.pins]
        self.view = build_view(data, self.wiring, preds[self.wiring], pins)
        v = self.view
        if v.sample not in self.rows:
            self.rows[v.sample] = int(v.masked_rows[0]) if len(v.masked_rows) else 0
        self.rows[v.sample] = min(self.rows[v.sample], v.n_rows - 1)
        if (
            self.mask_only
            and len(v.masked_rows)
            and self.rows[v.sample] not in set(v.masked_rows.tolist())
        ):
            self._snap_to_masked()
        self._paint_view()
        return True

    def _paint_view(self) -> None:
        """Everything that depends on the view (not only the cursor)."""
        from inspector.tui.view import strip_marks

        v = self.view
        if v is None or self.session is None:
            return
        kind, pbin, show = strip_marks(v, self.mask_only)
        strip = self.query_one(TokenStrip)
        strip.mode = self.colour
        sep = "" if self.session.decoder.has_text else " "
        row = self.rows[v.sample]
        with self.app.batch_update():
            strip.set_tokens(
                v.data.texts, v.data.ends_line, kind, pbin, show, sep=sep, cursor=row + 2
            )
            self._paint_spark()
            self._paint_position()
            self._refresh_accuracy()
            self.query_one(SampleList).show_sample(self.sample)

    def _paint_spark(self) -> None:
        import numpy as np

        v = self.view
        if v is None:
            return
        p = np.nan_to_num(v.s0.p_true.astype(np.float64), nan=0.0)
        if self.mask_only and len(v.masked_rows):
            p = p[v.masked_rows]
        self.query_one(Sparkline).data = p.tolist() or [0.0]

    def _paint_position(self) -> None:
        from inspector.tui.view import detail_renderable, slots_renderable

        v = self.view
        if v is None or self.session is None:
            return
        row = self.rows[v.sample]
        self.query_one(TokenStrip).set_cursor(row + 2)
        detail = self.query_one("#detail", Static)
        width = detail.content_size.width or 48
        detail.update(detail_renderable(self.session, v, row, width))
        self.query_one("#slots", Static).update(slots_renderable(self.session, v, row))
        self._refresh_header()

    def _refresh_header(self) -> None:
        from inspector.tui.view import header_text

        v = self.view
        self.query_one("#header", Static).update(
            header_text(
                self.session,
                status=self.status,
                sample=self.sample,
                wiring=self.wiring,
                ref=self.ref,
                row=self.row if v is not None and v.sample == self.sample else None,
                n_rows=v.n_rows if v is not None else None,
                pending=self.pending,
                mask_only=self.mask_only,
                mode=self.colour,
            )
        )

    def _refresh_accuracy(self) -> None:
        from inspector.tui.view import accuracy_renderable

        if self.session is None or self.wiring is None:
            return
        v = self.view if self.view is not None and self.view.sample == self.sample else None
        sample_metrics = {w: self.stats.get((self.sample, w)) for w in self._distinct()}
        n_good = len(self.session.files) - len(self.errors)
        self.query_one("#accuracy", Static).update(
            accuracy_renderable(
                self.session,
                v,
                self.view_wirings(),
                {w: m for w, m in sample_metrics.items() if m},
                self.totals,
                n_good,
                self.row if v is not None else None,
                narrow=self.size.width < 100,
                width=max(self.query_one("#accuracy").content_size.width, 20),
            )
        )

    def on_resize(self) -> None:
        self._refresh_accuracy()
        self.call_after_refresh(self._paint_position)  # panel widths changed

    def _set_row(self, row: int) -> None:
        v = self.view
        if v is None:
            return
        row = max(0, min(int(row), v.n_rows - 1))
        if self.rows.get(v.sample) == row:
            return
        self.rows[v.sample] = row
        self._paint_position()
        if v.ref is not None:
            self._refresh_accuracy()

    def _snap_to_masked(self) -> None:
        import numpy as np

        v = self.view
        if v is None or not len(v.masked_rows):
            return
        row = self.rows[v.sample]
        i = int(np.searchsorted(v.masked_rows, row))
        self.rows[v.sample] = int(v.masked_rows[min(i, len(v.masked_rows) - 1)])

    def set_sample(self, i: int) -> None:
        if self.session is None:
            return
        n = len(self.session.files)
        i = max(0, min(int(i), n - 1))
        if i == self.sample and self.view is not None and self.view.sample == i:
            return
        self.sample = i
        self.query_one(SampleList).show_sample(i)
        self._request_view()

    def set_wiring(self, w: Sequence[int]) -> bool:
        """Validate and switch to a wiring; False (with a notification) when it is invalid."""
        if self.session is None:
            return False
        from inspector.wiring import parse_wiring

        try:
            key = parse_wiring(list(w), self.session.slot_info, self.session.n_blocks).slots
        except Exception as e:  # noqa: BLE001 - InputError, shown
            self.say(f"bad wiring: {e}", severity="error")
            return False
        if key != self.wiring:
            self.wiring = key
            self._request_view()
            self.call_after_refresh(self._update_all_rows)  # the panels paint first
        return True

    # --- bindings -----------------------------------------------------------------------------------
    def ready_for(self, action: str) -> bool:
        """Whether an action can run now (the palette asks; the keys stay live and say why not).

        Keys are not dimmed through check_action: that recomposes the footer on every state
        change, which costs a tenth of a second each time on a small CPU."""
        if action in ("help", "quit"):
            return True
        if self.session is None or self.wiring is None:
            return False
        if (
            action
            in (
                "prev_pos",
                "next_pos",
                "first_pos",
                "last_pos",
                "next_miss",
                "prev_miss",
                "goto",
                "next_flip",
                "prev_flip",
                "export",
            )
            and self.view is None
        ):
            return False
        return True

    def on_token_strip_clicked(self, m: TokenStrip.Clicked) -> None:
        if self.view is not None and m.token >= 2:
            self._set_row(m.token - 2)

    def on_data_table_header_selected(self, m: DataTable.HeaderSelected) -> None:
        """A click on a column header sorts by it."""
        modes = {"idx": 0, "len": 1, "cur": 2, "ref": 3, "delta": 4}
        mode = modes.get(str(m.column_key.value))
        if mode is not None:
            lst = self.query_one(SampleList)
            lst.sort_mode = (mode - 1) % len(SORTS)
            self.action_cycle_sort()

    def on_data_table_row_selected(self, m: DataTable.RowSelected) -> None:
        if m.row_key.value is not None:
            self.set_sample(int(m.row_key.value))

    def _step(self, delta: int) -> None:
        import numpy as np

        v = self.view
        if v is None:
            return
        row = self.rows[v.sample]
        if self.mask_only and len(v.masked_rows):
            rows = v.masked_rows
            i = int(np.searchsorted(rows, row))
            if delta > 0:
                i = i + 1 if i < len(rows) and rows[i] == row else i
            else:
                i -= 1
            self._set_row(int(rows[max(0, min(i, len(rows) - 1))]))
        else:
            self._set_row(row + delta)

    def action_prev_pos(self) -> None:
        self._step(-1)

    def action_next_pos(self) -> None:
        self._step(+1)

    def action_first_pos(self) -> None:
        v = self.view
        if v is not None:
            rows = v.masked_rows if self.mask_only and len(v.masked_rows) else None
            self._set_row(int(rows[0]) if rows is not None else 0)

    def action_last_pos(self) -> None:
        v = self.view
        if v is not None:
            rows = v.masked_rows if self.mask_only and len(v.masked_rows) else None
            self._set_row(int(rows[-1]) if rows is not None else v.n_rows - 1)

    def action_prev_sample(self) -> None:
        if self.sample > 0:
            self.set_sample(self.sample - 1)

    def action_next_sample(self) -> None:
        if self.session is not None and self.sample < len(self.session.files) - 1:
            self.set_sample(self.sample + 1)

    def _jump(self, rows: Any, forward: bool, what: str) -> None:
        import numpy as np

        v = self.view
        if v is None:
            return
        if rows is None or not len(rows):
            self.say(f"no {what} in this sample")
            return
        row = self.rows[v.sample]
        if forward:
            i = int(np.searchsorted(rows, row, side="right"))
            target = rows[i] if i < len(rows) else rows[0]
        else:
            i = int(np.searchsorted(rows, row, side="left")) - 1
            target = rows[i] if i >= 0 else rows[-1]
        self._set_row(int(target))

    def action_next_miss(self) -> None:
        self._jump(self.view.miss_rows if self.view else None, True, "misses")

    def action_prev_miss(self) -> None:
        self._jump(self.view.miss_rows if self.view else None, False, "misses")

    def action_next_flip(self) -> None:
        if not self.pins:
            self.say("pin a reference wiring first (p)")
            return
        self._jump(self.view.flipped_rows if self.view else None, True, "flipped positions")

    def action_prev_flip(self) -> None:
        if not self.pins:
            self.say("pin a reference wiring first (p)")
            return
        self._jump(self.view.flipped_rows if self.view else None, False, "flipped positions")

    def action_goto(self) -> None:
        from inspector.tui.screens.dialogs import GotoScreen

        v = self.view
        if v is None:
            return

        def done(row: int | None) -> None:
            if row is None:
                return
            if not 0 <= row < v.n_rows:
                self.say(f"position {row} is outside 0..{v.n_rows - 1}", severity="error")
                return
            self._set_row(row)

        self.app.push_screen(GotoScreen(v.n_rows, self.rows[v.sample]), done)

    def action_wiring_editor(self) -> None:
        from inspector.tui.screens.wiring import WiringEditor

        if self.session is None or self.wiring is None:
            return

        def done(w: WiringKey | None) -> None:
            if w is not None:
                self.set_wiring(w)

        self.app.push_screen(WiringEditor(self.session, self.wiring), done)

    def action_preset(self, name: str) -> None:
        if self.session is None:
            return
        w = self.session.presets.get(name)
        if w is None:
            self.say(self.session.preset_errors.get(name, f"no {name} preset"), severity="error")
            return
        self.set_wiring(w)

    def action_pin(self) -> None:
        if self.wiring is None or self.session is None:
            return
        w = self.wiring
        if w in self.pins:
            self.pins.remove(w)
            self.say(f"unpinned {self.session.wiring_label(w)}")
        else:
            self.pins.append(w)
            if len(self.pins) > 3:
                self.pins.pop(0)
            self.say(f"pinned {self.session.wiring_label(w)} as the reference")
        self._request_view()
        self.call_after_refresh(self._update_all_rows)

    def action_toggle_mask(self) -> None:
        self.mask_only = not self.mask_only
        if self.mask_only:
            self._snap_to_masked()
        self._paint_view()
        self._refresh_header()

    def action_toggle_colour(self) -> None:
        self.colour = "p" if self.colour == "hit" else "hit"
        self.query_one(TokenStrip).set_mode(self.colour)
        self._refresh_header()

    def action_cycle_sort(self) -> None:
        lst = self.query_one(SampleList)
        lst.sort_mode = (lst.sort_mode + 1) % len(SORTS)
        lst.apply_sort(self.sample)
        name, desc = SORTS[lst.sort_mode]
        lst.border_title = f"samples · {name}"
        self.say(f"samples sorted by {desc}", timeout=3)

    def export_wirings(self, i: int) -> list[WiringKey]:
        """Every wiring computed so far for sample i (current first)."""
        seen = [w for (j, w) in self.stats if j == i]
        ordered = [w for w in self._distinct() if w in seen] + [
            w for w in seen if w not in self._distinct()
        ]
        return list(dict.fromkeys(ordered))

    def action_export(self) -> None:
        s = self.session
        engine = self.engine
        if s is None or engine is None or self.view is None:
            return
        i = self.sample
        wirings = self.export_wirings(i) or self._distinct()
        labels = []
        for w in wirings:
            name = s.preset_name(w)
            labels.append((f"{name} {s.wiring_label(w)}" if name else s.wiring_label(w), w))
        ids = self.view.data.input_ids if self.view.sample == i else None
        decode = s.decoder.raw if s.decoder.has_text else None

        def job(ev: Any) -> Any:
            from inspector.export import export_sample
            from inspector.wiring import Wiring

            preds = [(label, ev.predict(i, Wiring(w))) for label, w in labels]
            return export_sample(
                preds,
                sample_index=i,
                sample_path=s.files[i],
                input_paths=s.input_paths,
                checkpoint=s.checkpoint,
                layout=s.layout,
                slot_labels=[x.label for x in s.slot_info],
                ttt_steps=s.ttt_steps,
                device=s.device,
                dtype=s.dtype,
                input_ids=ids,
                decode=decode,
            )

        engine.submit("export", job)
        self.say(f"exporting sample #{i} ({len(wirings)} wirings)…", timeout=3)

    def action_doctor(self) -> None:
        from inspector.tui.screens.doctor import DoctorScreen

        if self.session is None or self.engine is None:
            return
        self.app.push_screen(DoctorScreen(self.engine, self.session), self._doctor_done)

    def _doctor_done(self, w: WiringKey | None) -> None:
        self.doctor_screen = None
        if w is not None:
            if self.set_wiring(w) and self.session is not None:
                self.say(f"applied the doctor's wiring {self.session.wiring_label(w)}")

    def action_help(self) -> None:
        from inspector.tui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen())

    async def action_quit(self) -> None:
        self.app.exit()
