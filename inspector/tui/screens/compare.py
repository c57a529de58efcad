"""The compare screen (`b`, with `open --compare CKPT_B`): the shown sample under both drafts.

The head says what is compared (A: the app's draft under the current wiring; B: the second draft
under its own) and each one's τ and all-tok on this sample; the list holds the rows where they
part: one hits and the other misses, or the round drafted there accepts a different count. Each
line gives the true token, each draft's top-1 (✓ / ✗), p(true) and what its round accepts. Enter closes
the screen on the highlighted row (the main screen's cursor goes there); Esc closes it.

The numbers come from the device thread (`second_draft.SampleComparison`); this screen only
formats them. The set's figure with its interval is `eagle-inspect compare`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from inspector.formatting import fmt_float, pct, printable
from inspector.tui.drafts import second_key
from inspector.tui.screens.dialogs import Dialog
from inspector.tui.tau_settings import spec_label
from inspector.tui.view import cell, short

if TYPE_CHECKING:
    from inspector.tui.events import SampleComparison
    from inspector.tui.summary import Summary

TOKEN = 12  # token text width in a row's line


class CompareScreen(Dialog[int]):
    BINDINGS = [Binding("escape,q", "close", "close")]

    def __init__(self, session: Summary, comparison: SampleComparison | None = None) -> None:
        super().__init__()
        self.session = session
        self.comparison: SampleComparison | None = None
        self._given = comparison
        self.rows: list[int] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="compare-box", classes="dialog"):
            yield Label("compare two drafts", id="compare-title")
            yield Static("computing the sample under both drafts…", id="compare-status")
            yield OptionList(id="compare-rows")
            yield Label(
                "↑↓ row  Enter go to it  Esc close · the set: eagle-inspect compare A B SAMPLES",
                id="compare-keys",
            )

    def on_mount(self) -> None:
        if self._given is not None:
            self.show(self._given)

    def failed(self, error: str) -> None:
        status = self.query_one("#compare-status", Static)
        status.update(Text(f"compare failed: {printable(error)}", style="bold red"))

    def show(self, c: SampleComparison) -> None:
        self.comparison = c
        s = self.session
        # (the labels lead with the draft's letter)
        a_name, b_name = s.wiring_label(c.wiring), s.wiring_label(second_key(c.wiring_b))
        self.query_one("#compare-title", Label).update(
            printable(
                f"sample #{c.index} · {spec_label(c.spec)} · {a_name} {s.checkpoint} · "
                f"{b_name} {c.checkpoint_b}"
            )
        )
        head = Text()
        for name, st, pred in (("A", c.stats_a, c.a), ("B", c.stats_b, c.b)):
            hits, total = int((pred.hit & pred.masked).sum()), int(pred.masked.sum())
            al = st.accept_length
            head.append(f"{name} ", style="bold")
            head.append(f"τ {'-' if al is None else fmt_float(al)}", style="bold")
            head.append(f"  all-tok {hits}/{total} {pct(hits / total if total else None)}   ")
        a_al, b_al = c.stats_a.accept_length, c.stats_b.accept_length
        if a_al is not None and b_al is not None:
            head.append(f"B − A {b_al - a_al:+.2f}", style="bold")
        a_only = int((c.a.hit[c.hit_rows]).sum())
        head.append(
            f"\n{c.hit_rows.size} rows where one hits and the other misses (A only {a_only}, B "
            f"only {c.hit_rows.size - a_only}); {c.accept_rows.size} where the round accepts a "
            "different count"
        )
        self.query_one("#compare-status", Static).update(head)
        self.rows = [int(r) for r in c.rows]
        ol = self.query_one(OptionList)
        ol.clear_options()
        ol.add_options([Option(self._line(c, r)) for r in self.rows])
        if self.rows:
            ol.highlighted = 0
            ol.focus()

    def _line(self, c: SampleComparison, j: int) -> Text:
        d = self.session.decoder
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"pos {j:>5}  ", style="bold")
        t.append("true ")
        t.append(cell(short(d.visible(int(c.a.true[j])), TOKEN), TOKEN), style="bold")
        for name, pred, by_start in (("A", c.a, c.a_by_start), ("B", c.b, c.b_by_start)):
            hit = bool(pred.hit[j])
            t.append(f"   {name} ")
            t.append("✓ " if hit else "✗ ", style="bold green" if hit else "bold red")
            t.append(cell(short(d.visible(int(pred.pred_target[j])), TOKEN), TOKEN))
            t.append(f" p(true) {fmt_float(pred.p_true[j], 3)}")
            n = j + 1  # the round drafting x_{j+2} starts after x_{j+1}
            a = int(by_start[n]) if n < by_start.size else 0
            t.append(f"  accepts {a}")
        return t

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        i = event.option_index
        if 0 <= i < len(self.rows):
            self.close(self.rows[i])

    def action_close(self) -> None:
        self.close(None)
