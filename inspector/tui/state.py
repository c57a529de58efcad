"""The main screen's state, without Textual: what is shown, what is known about the set.

`ViewModel` holds the loaded session, the current sample, wiring and pins, the cursor row of each
sample, the per-sample metrics and the set totals, the failed samples, and the UI-side caches of
engine results. Its methods change that state and return what the screen must repaint or say; the
screen (`screens/main.py`) only wires widgets, messages and keys to it. Tests drive it directly.

Rows are the engine's positions: row j feeds x_{j+1} and predicts x_{j+2}.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from inspector.cache import ByteLRU
from inspector.tui.drafts import is_second, second_key, switched
from inspector.tui.summary import positions_of
from inspector.tui.totals import Total, Totals, pool_accepts, pool_steps

if TYPE_CHECKING:
    import numpy as np

    from inspector.evaluate import SamplePredictions
    from inspector.metrics import StepMetrics
    from inspector.serving.spec import DraftSpec
    from inspector.tui.events import SampleAccept, SampleComparison, SampleTrees
    from inspector.tui.summary import SampleData, Summary
    from inspector.tui.tau_settings import Serving
    from inspector.tui.totals import AcceptFigure
    from inspector.tui.view import ViewState
    from inspector.wiring import WiringKey

MAX_PINS = 3
# Actions that need a sample on screen (the command palette offers them only then).
NEEDS_VIEW = {"step", "edge", "jump", "goto", "export"}
FALLBACK_CACHE_BYTES = 256 * 2**20  # a loader without a memory budget (tests)

# The accuracy bar's views: ours (what serving sees) and each trainer's own metrics.
METRICS = ("ours", "speculators", "specforge")


def metrics_order(layout: str) -> tuple[str, ...]:
    """The order `v` cycles through: ours, then the checkpoint layout's trainer, then the other."""
    trainers = [m for m in METRICS[1:] if m == layout] + [m for m in METRICS[1:] if m != layout]
    return ("ours", *trainers)


def next_metrics(current: str, layout: str) -> str:
    order = metrics_order(layout)
    return order[(order.index(current) + 1) % len(order)] if current in order else order[0]


class SetTotals(Total["list[StepMetrics]"]):
    """Metrics summed over every sample scored so far under one wiring (`StepMetrics.__add__`
    sums ours and the trainers' counts alike)."""

    @property
    def steps(self) -> list[StepMetrics]:
        return self.value


class AcceptTotals(Total["AcceptFigure"]):
    """Serving replays summed over every sample replayed so far under one wiring and settings
    (`totals.pool_accepts`: rounds and emitted tokens pooled, as the engines log them)."""

    @property
    def figure(self) -> AcceptFigure:
        return self.value


class ListRow(NamedTuple):
    """One sample-list row: positions, step-0 all-tok under the current and reference wirings."""

    length: int | None
    cur: float | None
    ref: float | None
    has_ref: bool


class ViewModel:
    """State of the main screen (see the module docstring)."""

    def __init__(self) -> None:
        self.session: Summary | None = None
        self.sample = 0
        self.wiring: WiringKey | None = None
        self.pins: list[WiringKey] = []  # oldest first; the last is the reference
        # `open --compare`: each draft's key when it was last switched away from ("A", "B";
        # `drafts`), which `B` returns to
        self.left: dict[str, WiringKey] = {}
        self.gen = 0  # generation of the latest view request
        self.applied_gen = -1  # generation of the view on screen
        self.pending = False  # a view request is out and nothing newer is shown
        self.view: ViewState | None = None
        self.rows: dict[int, int] = {}  # cursor row per sample
        self.lengths: dict[int, int] = {}
        self.errors: dict[int, str] = {}
        # The set totals: step metrics per (sample, wiring), replays per (sample, (wiring,
        # settings)), each pooled per group (`totals.Totals`: one add, one drop).
        self.scores: Totals[WiringKey, list[StepMetrics]] = Totals(pool_steps, SetTotals)
        self.replays: Totals[tuple[WiringKey, Serving], AcceptFigure] = Totals(
            pool_accepts, AcceptTotals
        )
        # Sized by the budget once loaded; what is on screen is held by `view` in any case.
        self.preds: ByteLRU[tuple[int, WiringKey], SamplePredictions] = ByteLRU(0)
        self.samples: ByteLRU[int, SampleData] = ByteLRU(0)
        # The serving replays: the settings τ replays under (`tui.tau_settings`) and each sample's
        # rounds (the arrays the engine's Replayer cache holds too; pooled in `replays`).
        self.serving: Serving | None = None
        self.accepts: ByteLRU[tuple[int, WiringKey, Serving], SampleAccept] = ByteLRU(0)
        # The draft trees of every row (the tree panel), per (sample, wiring, drafting settings):
        # the same at any temperature.
        self.trees: ByteLRU[tuple[int, WiringKey, DraftSpec], SampleTrees] = ByteLRU(0)
        # A sample under both drafts (`open --compare`), per (sample, A's wiring, settings).
        self.comparisons: ByteLRU[tuple[int, WiringKey, DraftSpec], SampleComparison] = ByteLRU(0)
        self.warned: set[tuple[int, str]] = set()

    # --- session ------------------------------------------------------------------------------
    def load(self, session: Summary) -> list[tuple[int, str]]:
        """Take a loaded session; returns the samples already known to be unusable."""
        self.session = session
        if session.budget is not None:
            self.preds.max_bytes = session.budget.host_share("app_predictions")
            self.samples.max_bytes = session.budget.host_share("app_samples")
            self.accepts.max_bytes = session.budget.host_share("replays")
            self.trees.max_bytes = session.budget.host_share("replays")
            self.comparisons.max_bytes = session.budget.host_share("replays")
        else:
            self.preds.max_bytes = self.samples.max_bytes = FALLBACK_CACHE_BYTES
            self.accepts.max_bytes = self.trees.max_bytes = FALLBACK_CACHE_BYTES
            self.comparisons.max_bytes = FALLBACK_CACHE_BYTES
        self.serving = session.serving_default()
        self.wiring = session.initial
        self.sample = session.first_sample
        return [(i, e) for i, e in session.skipped if self.mark_error(i, e)]

    @property
    def n_samples(self) -> int:
        return len(self.session.files) if self.session is not None else 0

    @property
    def n_good(self) -> int:
        return self.n_samples - len(self.errors)

    @property
    def stats(self) -> dict[tuple[int, WiringKey], list[StepMetrics]]:
        """Each sample's step metrics per wiring counted in the totals."""
        return self.scores.by_sample

    @property
    def totals(self) -> dict[WiringKey, SetTotals]:
        """The set totals per wiring."""
        return self.scores.pools  # type: ignore[return-value]  # made as SetTotals

    @property
    def ref(self) -> WiringKey | None:
        return self.pins[-1] if self.pins else None

    def view_wirings(self) -> list[WiringKey]:
        """The current wiring first, then the pins (oldest first; the last is the reference)."""
        return [] if self.wiring is None else [self.wiring, *self.pins]

    def distinct(self) -> list[WiringKey]:
        return list(dict.fromkeys(self.view_wirings()))

    @property
    def shown(self) -> ViewState | None:
        """The view, when it is of the current sample (not a stale one kept while computing)."""
        v = self.view
        return v if v is not None and v.sample == self.sample else None

    @property
    def row(self) -> int | None:
        return None if self.view is None else self.rows.get(self.view.sample)

    def neighbours(self) -> list[int]:
        return [s for s in (self.sample + 1, self.sample - 1) if 0 <= s < self.n_samples]

    def missing(self, samples: Sequence[int]) -> list[int]:
        """Those of `samples` without predictions for every shown wiring in the UI cache."""
        ws = self.distinct()
        return [s for s in samples if any((s, w) not in self.preds for w in ws)]

    # --- results from the device thread ----------------------------------------------------------
    def remember_sample(self, data: SampleData) -> list[str]:
        """Cache a sample's data; returns its warnings not shown before."""
        self.samples.put(data.index, data)
        self.lengths[data.index] = data.length
        new = [w for w in data.warnings if (data.index, w) not in self.warned]
        self.warned.update((data.index, w) for w in new)
        return new

    def add_stats(self, i: int, w: WiringKey, metrics: list[StepMetrics], length: int) -> bool:
        """Count sample i under w in the set totals (once; never a failed sample)."""
        if length:
            self.lengths[i] = length
        return i not in self.errors and self.scores.add(i, w, metrics)

    def add_accept(self, a: SampleAccept) -> bool:
        """Keep a sample's serving replay and count it in its totals (once; never a failed
        sample); True when the totals moved."""
        if a.index in self.errors:
            return False
        self.accepts.put((a.index, a.wiring, a.serving), a)
        return self.replays.add(a.index, (a.wiring, a.serving), a.figure)

    @property
    def spec(self) -> DraftSpec | None:
        """The drafting settings τ replays (those of `serving`)."""
        return None if self.serving is None else self.serving.spec

    def sample_accept(self, w: WiringKey, i: int | None = None) -> AcceptFigure | None:
        """Sample i's (the current one's) replay under w and the current settings, if known."""
        if self.serving is None:
            return None
        return self.replays.get(self.sample if i is None else i, (w, self.serving))

    def set_accept(self, w: WiringKey) -> AcceptTotals | None:
        """The set's pooled replay under w and the current settings so far."""
        if self.serving is None:
            return None
        return self.replays.total((w, self.serving))  # type: ignore[return-value]  # AcceptTotals

    def current_accept(self) -> SampleAccept | None:
        """The shown sample's replay under the current wiring and settings (the rounds line)."""
        v = self.view
        if v is None or self.serving is None:
            return None
        return self.accepts.get((v.sample, v.wiring, self.serving))

    def set_serving(self, serving: Serving) -> bool:
        """New settings for τ; False when they are the current ones."""
        if serving == self.serving:
            return False
        self.serving = serving
        return True

    def stepped_serving(self, delta: int) -> Serving | None:
        """The settings with `delta` more draft steps (at least 1; a tree's draft tokens clamped
        to what its beam can propose; the sampling kept); None when nothing would change."""
        from inspector.serving.spec import DraftSpec

        if self.serving is None:
            return None
        s = self.serving.spec
        if s.steps + delta < 1:
            return None
        steps = s.steps + delta
        if s.is_chain:
            return self.serving.with_spec(DraftSpec(steps))
        most = DraftSpec(steps, s.topk, 2).candidates + 1  # the root and every candidate
        return self.serving.with_spec(DraftSpec(steps, s.topk, min(s.draft_tokens or most, most)))

    def missing_accepts(self) -> list[WiringKey]:
        """The shown wirings whose replay of the current sample (current settings) is not here."""
        if self.serving is None or self.sample in self.errors:
            return []
        return [w for w in self.distinct() if (self.sample, w, self.serving) not in self.accepts]

    def trees_key(self) -> tuple[int, WiringKey, DraftSpec] | None:
        """The key of the trees the tree panel shows: the view's sample and wiring, the
        current drafting settings."""
        v = self.shown
        if v is None or self.spec is None:
            return None
        return (v.sample, v.wiring, self.spec)

    def compare_key(self) -> tuple[int, WiringKey, DraftSpec] | None:
        """The key of the comparison the compare screen shows: the view's sample and wiring,
        the current drafting settings (None without a second draft)."""
        v = self.shown
        if v is None or self.spec is None or self.session is None or not self.session.compare:
            return None
        a = v.wiring if not is_second(v.wiring) else self.other_draft()  # A: the first draft
        return None if a is None else (v.sample, a, self.spec)

    def mark_error(self, i: int, error: str) -> bool:
        """Sample i failed: it leaves the totals (as eval skips it), and its replays the cache (a
        retry that works asks for them again). False if known."""
        if i in self.errors:
            return False
        self.errors[i] = error
        self.scores.drop(i)
        self.replays.drop(i)
        self.accepts.pop_where(lambda k: k[0] == i)
        return True

    def clear_error(self, i: int) -> bool:
        """A retry of sample i worked (e.g. after an out-of-memory error)."""
        return self.errors.pop(i, None) is not None

    def add_predictions(self, data: SampleData, preds: dict[WiringKey, SamplePredictions]) -> bool:
        """Cache predictions of a sample; True when the set totals moved."""
        added = False
        for w, pred in preds.items():
            self.preds.put((data.index, w), pred)
            added |= self.add_stats(data.index, w, pred.metrics, data.length)
        return added

    def list_row(self, i: int) -> ListRow | None:
        if self.wiring is None:
            return None
        cur = self.stats.get((i, self.wiring))
        ref = self.stats.get((i, self.ref)) if self.ref is not None else None
        tokens = self.lengths.get(i)
        return ListRow(
            None if tokens is None else positions_of(tokens),
            cur[0].all_tok.acc if cur else None,
            ref[0].all_tok.acc if ref else None,
            self.ref is not None,
        )

    def sample_metrics(self) -> dict[WiringKey, list[StepMetrics]]:
        """Step metrics of the current sample under each shown wiring computed so far."""
        out = {}
        for w in self.distinct():
            m = self.stats.get((self.sample, w))
            if m:
                out[w] = m
        return out

    def scored(self) -> int:
        """Samples counted in the totals of every shown wiring (the bar's 'k/n samples')."""
        return min(
            (t.n_samples for w in self.view_wirings() if (t := self.totals.get(w))), default=0
        )

    # --- the view ---------------------------------------------------------------------------------
    def build_view(self, mask_only: bool) -> bool:
        """Build the view of the current sample from the UI cache; False if something is missing."""
        from inspector.tui.view import build_view

        data = self.samples.get(self.sample)
        if data is None or self.wiring is None:
            return False
        preds = {}
        for w in self.distinct():
            p = self.preds.get((self.sample, w))
            if p is None:
                return False
            preds[w] = p
        v = build_view(data, self.wiring, preds[self.wiring], [(w, preds[w]) for w in self.pins])
        self.view = v
        if v.sample not in self.rows:
            self.rows[v.sample] = int(v.masked_rows[0]) if len(v.masked_rows) else 0
        self.rows[v.sample] = min(self.rows[v.sample], v.n_rows - 1)
        if mask_only:
            self.snap_to_masked()
        return True

    def request(self) -> int:
        """A new view request: its generation number."""
        self.gen += 1
        return self.gen

    def applied(self) -> None:
        self.pending = False
        self.applied_gen = self.gen

    # --- the cursor ---------------------------------------------------------------------------------
    def set_row(self, row: int) -> bool:
        """Move the cursor (clamped); False when it did not move."""
        v = self.view
        if v is None:
            return False
        row = max(0, min(int(row), v.n_rows - 1))
        if self.rows.get(v.sample) == row:
            return False
        self.rows[v.sample] = row
        return True

    def _stops(self, mask_only: bool) -> np.ndarray | None:
        v = self.view
        return v.masked_rows if v is not None and mask_only and len(v.masked_rows) else None

    def snap_to_masked(self) -> None:
        """Move the cursor onto the nearest loss-masked row at or after it."""
        import numpy as np

        v = self.view
        if v is None or not len(v.masked_rows):
            return
        row = self.rows[v.sample]
        i = int(np.searchsorted(v.masked_rows, row))
        self.rows[v.sample] = int(v.masked_rows[min(i, len(v.masked_rows) - 1)])

    def step_target(self, delta: int, mask_only: bool) -> int | None:
        """The row one step left (delta < 0) or right, over masked rows only with mask_only."""
        import numpy as np

        v = self.view
        if v is None:
            return None
        row = self.rows[v.sample]
        rows = self._stops(mask_only)
        if rows is None:
            return row + delta
        i = int(np.searchsorted(rows, row))
        if delta > 0:
            i = i + 1 if i < len(rows) and rows[i] == row else i
        else:
            i -= 1
        return int(rows[max(0, min(i, len(rows) - 1))])

    def edge_target(self, last: bool, mask_only: bool) -> int | None:
        v = self.view
        if v is None:
            return None
        rows = self._stops(mask_only)
        if rows is None:
            return v.n_rows - 1 if last else 0
        return int(rows[-1] if last else rows[0])

    def jump_target(self, rows: np.ndarray | None, forward: bool) -> int | None:
        """The next (or previous) of `rows` from the cursor, wrapping; None when there is none."""
        import numpy as np

        v = self.view
        if v is None or rows is None or not len(rows):
            return None
        row = self.rows[v.sample]
        if forward:
            i = int(np.searchsorted(rows, row, side="right"))
            return int(rows[i] if i < len(rows) else rows[0])
        i = int(np.searchsorted(rows, row, side="left")) - 1
        return int(rows[i] if i >= 0 else rows[-1])

    def ready_for(self, action: str) -> bool:
        """Whether an action (its name, without arguments) can run now."""
        if action in ("help", "quit"):
            return True
        if self.session is None or self.wiring is None:
            return False
        return action not in NEEDS_VIEW or self.view is not None

    # --- sample and wiring -------------------------------------------------------------------------
    def select_sample(self, i: int) -> bool:
        """Make sample i (clamped) current; False when it already is and is shown."""
        if self.session is None:
            return False
        i = max(0, min(int(i), self.n_samples - 1))
        if i == self.sample and self.shown is not None:
            return False
        self.sample = i
        return True

    def parse_wiring(self, w: Sequence[int], second: bool | None = None) -> WiringKey:
        """Slots `w` validated against the slots and fc blocks of a draft (InputError when they
        do not fit), as its key: the second's (`second`), else the first's; None: the draft
        shown now."""
        from inspector.wiring import parse_wiring

        assert self.session is not None
        if second is None:
            second = self.wiring is not None and is_second(self.wiring)
        s = self.session.second if second else self.session
        assert s is not None, "the second draft's keys exist once it is loaded"
        slots = parse_wiring(list(w), s.slot_info, s.n_blocks).slots
        return second_key(slots) if second else slots

    def switch_draft(self) -> WiringKey | None:
        """Show the other draft (`open --compare`) under the wiring it was last shown with (the
        second's first time: its --compare-wiring); its key, None while the second draft is not
        loaded."""
        s = self.session
        if s is None or self.wiring is None:
            return None
        b = None if s.second is None else s.second.initial
        target = switched(self.left, self.wiring, s.initial, b)
        if target is not None:
            self.wiring = target
        return target

    def other_draft(self) -> WiringKey | None:
        """The first draft's key while the second is shown: the one it was left at."""
        return self.left.get("A", None if self.session is None else self.session.initial)

    def toggle_pin(self) -> bool | None:
        """Pin the current wiring as the reference, or unpin it; True when pinned, None if none."""
        w = self.wiring
        if w is None:
            return None
        if w in self.pins:
            self.pins.remove(w)
            return False
        self.pins.append(w)
        if len(self.pins) > MAX_PINS:
            self.pins.pop(0)
        return True

    def export_wirings(self, i: int) -> list[WiringKey]:
        """Every wiring computed so far for sample i (the shown ones first); the shown ones if none."""
        seen = [w for (j, w) in self.stats if j == i]
        shown = self.distinct()
        ordered = [w for w in shown if w in seen] + [w for w in seen if w not in shown]
        return list(dict.fromkeys(ordered)) or shown
