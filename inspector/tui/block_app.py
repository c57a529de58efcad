"""The app on a block draft (DFlash, DFlash2): `BlockApp(inputs, ...)`.

One screen: the block at the cursor (per block position the draft's token against the true
one, text and id, p of the true token and its rank, the accepted prefix marked), accuracy by
block position and the accept length as each engine counts it for every wiring side by side
(the configured ids, the trained ones where the doctor's search puts them elsewhere, each
reader's feed, and any layers chosen with `c`), and the slots' norms. n/p page the samples,
←/→ the blocks, w the wirings. The figures are `evaluate.block_view`'s; the wirings
`doctor.wiring.block_feeds.plan_block_wirings`'; this module only displays them. Loading, the
blocks of the sample on screen (its forward, its slot norms) and each wiring's totals run in
worker threads; `paint` reads only what they computed, so the window stays live."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Static

from inspector.formatting import fmt_float, pct, printable
from inspector.wiring import Wiring, WiringKey

if TYPE_CHECKING:
    from inspector.evaluate.block_view import BlockBrowser
    from inspector.formats.tokenizer import TokenDecoder
    from inspector.session import Inputs

CONTEXT_TOKENS = 12  # the committed tokens shown before a block's anchor


@dataclass
class BlockWirings:
    """The wirings the app toggles over, in order, each with its name and readers; and what the
    wiring editor (`screens.wiring.WiringEditor`) asks of a session."""

    slot_info: list
    n_blocks: int
    fc_norms: list[float]
    rows: list[tuple[str, WiringKey, tuple[str, ...]]]  # (name, slots, fed by)
    presets: dict[str, WiringKey | None] = field(default_factory=dict)
    preset_errors: dict[str, str] = field(default_factory=dict)

    def wiring_label(self, w) -> str:
        return Wiring(tuple(w)).label(self.slot_info)

    def preset_name(self, w) -> str | None:
        return self.name_of(tuple(w))

    def name_of(self, w: WiringKey) -> str | None:
        return next((name for name, slots, _ in self.rows if slots == tuple(w)), None)

    def add(self, w: WiringKey) -> int:
        """The index of `w` among the rows, added as 'chosen' where it is new."""
        for i, (_, slots, _) in enumerate(self.rows):
            if slots == tuple(w):
                return i
        self.rows.append(("chosen", tuple(w), ()))
        return len(self.rows) - 1


class BlockScreenView(Vertical):
    def compose(self) -> ComposeResult:
        yield Static("loading the block draft…", id="block-header")
        with Horizontal(id="block-body"):
            yield Static(id="block-rows")
            yield Static(id="block-slots")
        yield Static(id="block-accuracy")


class BlockApp(App):
    """Browse the blocks of a DFlash draft over samples, toggle the wiring."""

    TITLE = "eagle-inspect"
    CSS_PATH = "app.tcss"
    DEFAULT_CSS = """
    #block-header { height: auto; padding: 0 1; background: $panel; }
    #block-body { height: auto; }
    #block-rows { width: 2fr; height: auto; padding: 0 1; }
    #block-slots { width: 1fr; height: auto; padding: 0 1; }
    #block-accuracy { height: auto; padding: 0 1; }
    """
    BINDINGS = [
        Binding("n", "sample(1)", "next sample"),
        Binding("p", "sample(-1)", "prev sample"),
        Binding("right,l", "block(1)", "next block"),
        Binding("left,h", "block(-1)", "prev block"),
        Binding("w", "wiring(1)", "next wiring"),
        Binding("W", "wiring(-1)", "prev wiring", show=False),
        Binding("c", "choose", "choose layers"),
        Binding("q", "quit", "quit"),
    ]

    engine = None  # `open` asks for a device thread still running; the worker threads end alone

    def __init__(
        self,
        inputs: Inputs,
        *,
        device: str = "auto",
        dtype: str = "auto",
        wiring: str | None = None,
    ) -> None:
        super().__init__()
        self.input_files = inputs
        self.device_name = device
        self.dtype_name = dtype
        self.initial_wiring = wiring
        self.browser: BlockBrowser | None = None
        self.decoder: TokenDecoder | None = None
        self.wirings: BlockWirings | None = None
        self.notes: list[str] = []
        self.sample = 0
        self.block = 0
        self.current = 0  # the index of the shown wiring among `wirings.rows`
        self.error: str | None = None
        self._pending: tuple[int, WiringKey] | None = None  # the view the worker computes

    def compose(self) -> ComposeResult:
        yield BlockScreenView()
        yield Footer()

    def on_mount(self) -> None:
        self.run_worker(self._load, thread=True, exclusive=True, group="load")

    # -- the worker: load, then every listed wiring's totals -----------------------------------

    def _load(self) -> None:
        from inspector.doctor.wiring.block_feeds import plan_block_wirings
        from inspector.errors import InputError
        from inspector.evaluate.block_eval import load_block
        from inspector.evaluate.block_view import BlockBrowser
        from inspector.session import load_decoder
        from inspector.wiring import parse_wiring

        inputs = self.input_files
        try:
            draft, sample_set = load_block(
                str(inputs.checkpoint),
                inputs.samples,
                target=str(inputs.target) if inputs.target else None,
                embed=str(inputs.embed) if inputs.embed else None,
                device=self.device_name,
                dtype=self.dtype_name,
                dspark=True,  # its drafting rows and Markov head run in predict_blocks
            )
            indices = []
            for i in range(len(sample_set)):  # each read and dropped: only the usable kept
                try:
                    sample_set[i]
                except InputError as e:
                    self.notes.append(f"skipped sample {i}: {e}")
                else:
                    indices.append(i)
            if not indices:
                raise InputError(None, None, "none of the samples could be used")
            browser = BlockBrowser(draft, sample_set, indices)
            head = [sample_set[i] for i in indices[:8]]
            plan = plan_block_wirings(draft, head, inputs.target)
            del head
            block = draft.config.block
            assert block is not None
            infos = browser.slot_info
            rows = [(row.name, w.slots, row.fed_by) for row, w in plan.held]
            train = tuple(block.hf_layer_ids)
            wirings = BlockWirings(
                infos,
                draft.config.num_fc_blocks,
                browser.fc_norms,
                rows,
                presets={"train": next((w for n, w, _ in rows if n == "configured"), None)},
                preset_errors={
                    "train": f"the samples do not hold the configured layers HF {list(train)}",
                    "serve": "a block draft: each engine's feed is a row of its own (w)",
                },
            )
            current = 0
            if self.initial_wiring:
                w = parse_wiring(self.initial_wiring, infos, wirings.n_blocks, train)
                current = wirings.add(w.slots)
            elif not rows:
                current = wirings.add(tuple(range(wirings.n_blocks)))
            decoder, notes = load_decoder(inputs)
            self.notes += [*draft.notes, *plan.notes, *notes]
        except InputError as e:
            self.call_from_thread(self._failed, str(e))
            return
        browser.prepare(0, Wiring(wirings.rows[current][1]))
        self.call_from_thread(self._loaded, browser, decoder, wirings, current)
        for _, slots, _ in list(wirings.rows):
            browser.totals(Wiring(slots))
            self.call_from_thread(self.paint)

    def _failed(self, text: str) -> None:
        self.error = text
        self.query_one("#block-header", Static).update(Text(printable(text), style="bold red"))

    def _loaded(self, browser, decoder, wirings: BlockWirings, current: int) -> None:
        self.browser, self.decoder, self.wirings, self.current = browser, decoder, wirings, current
        for line in self.notes:
            self.notify(printable(line), markup=False, timeout=8)
        self.paint()

    def _prepare(self, j: int, slots: WiringKey) -> None:
        assert self.browser is not None
        self.browser.prepare(j, Wiring(slots))
        self.call_from_thread(self._prepared, (j, slots))

    def _prepared(self, key: tuple[int, WiringKey]) -> None:
        if self._pending == key:
            self._pending = None
        self.paint()

    def _request_view(self, j: int, slots: WiringKey) -> None:
        """Have the worker compute the j-th sample's view under `slots` (a newer request
        replaces one not done)."""
        if self._pending == (j, slots):
            return
        self._pending = (j, slots)
        self.run_worker(lambda: self._prepare(j, slots), thread=True, exclusive=True, group="view")

    def _totals(self, slots: WiringKey) -> None:
        assert self.browser is not None
        self.browser.totals(Wiring(slots))
        self.call_from_thread(self.paint)

    # -- keys ---------------------------------------------------------------------------------

    @property
    def shown(self) -> Wiring | None:
        if self.wirings is None:
            return None
        return Wiring(self.wirings.rows[self.current][1])

    def action_sample(self, d: int) -> None:
        if self.browser is None:
            return
        self.sample = (self.sample + d) % len(self.browser)
        self.block = 0
        self.paint()

    def action_block(self, d: int) -> None:
        w = self.shown
        if self.browser is None or w is None:
            return
        anchors = self.browser.anchors(self.sample, w)
        n = len(anchors) if anchors is not None else 0
        if n:
            self.block = (self.block + d) % n
        self.paint()

    def action_wiring(self, d: int) -> None:
        if self.wirings is None:
            return
        self.current = (self.current + d) % len(self.wirings.rows)
        self.paint()

    def action_choose(self) -> None:
        from inspector.tui.screens.wiring import WiringEditor

        if self.wirings is None or self.shown is None:
            return

        def chosen(w: WiringKey | None) -> None:
            if w is None or self.wirings is None or self.browser is None:
                return
            self.current = self.wirings.add(w)
            self.paint()
            if not self.browser.has_totals(Wiring(tuple(w))):
                self.run_worker(lambda: self._totals(tuple(w)), thread=True, group="totals")

        self.push_screen(WiringEditor(self.wirings, self.shown.slots), chosen)  # type: ignore[arg-type]

    # -- painting -----------------------------------------------------------------------------

    def paint(self) -> None:
        b, ws, w = self.browser, self.wirings, self.shown
        if b is None or ws is None or w is None:
            return
        ready = b.ready(self.sample, w)
        if not ready:
            self._request_view(self.sample, w.slots)
        anchors = b.anchors(self.sample, w) if ready else None
        if anchors is not None:
            self.block = min(self.block, max(len(anchors) - 1, 0))
        index = b.indices[self.sample]
        name, _, fed_by = ws.rows[self.current]
        head = Text()
        head.append(f"{b.draft.name}", style="bold")
        where = "…" if anchors is None else f"{self.block + 1 if anchors else 0}/{len(anchors)}"
        head.append(
            f"  {b.block.family}, block {b.block.block_size}  sample {index} "
            f"({self.sample + 1}/{len(b)})  block {where}\n"
        )
        head.append(f"wiring {name} {ws.wiring_label(w.slots)}", style="bold")
        if fed_by:
            head.append(f"  fed by {', '.join(fed_by)}")
        if anchors is None:
            head.append("  computing this sample's blocks…", style="dim")
        else:
            head.append(f"  this sample: block accuracy {pct(b.sample_accuracy(self.sample, w))}")
        self.query_one("#block-header", Static).update(head)
        rows = Text("computing…", style="dim") if anchors is None else self._rows(anchors)
        self.query_one("#block-rows", Static).update(rows)
        self.query_one("#block-slots", Static).update(self._slots())
        self.query_one("#block-accuracy", Static).update(self._accuracy())

    def _text(self, token: int) -> str:
        if token < 0:
            return "(past the sample)"
        assert self.decoder is not None
        return printable(self.decoder.visible(token))

    def _rows(self, anchors: list[int]):
        b, w = self.browser, self.shown
        assert b is not None and w is not None
        if not anchors:
            return Text("this sample has no generated tokens: no block is drafted")
        n = anchors[self.block]
        ids = b.tokens(self.sample)
        lo = max(0, n + 1 - CONTEXT_TOKENS)
        context = Text("… " if lo else "", style="dim")
        for t in ids[lo : n + 1].tolist():
            context.append(self._text(int(t)) + " ", style="dim")
        table = Table(
            title=f"the block after position {n} (anchor {self._text(int(ids[n]))!r})",
            title_justify="left",
            header_style="bold",
            expand=False,
        )
        for col, just in (
            ("k", "right"),
            ("pos", "right"),
            ("predicted", "left"),
            ("id", "right"),
            ("true", "left"),
            ("id", "right"),
            ("p(true)", "right"),
            ("rank", "right"),
            ("", "left"),
        ):
            table.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
        for r in b.rows(self.sample, w, self.block):
            mark = "accepted" if r.accepted else ("hit" if r.hit else "miss")
            style = "green" if r.accepted else ("yellow" if r.hit else "red")
            table.add_row(
                str(r.position),
                str(r.at),
                self._text(r.pred),
                str(r.pred),
                self._text(r.true),
                str(r.true) if r.true >= 0 else "-",
                f"{r.p:.3f}",
                str(r.rank),
                Text(mark if r.scored else f"{mark} (not scored)", style=style),
            )
        return Group(context, table)

    def _slots(self) -> Table:
        b, ws, w = self.browser, self.wirings, self.shown
        assert b is not None and ws is not None and w is not None
        table = Table(title="slots", title_justify="left", header_style="bold")
        for col in ("slot", "HF", "|h| mean", "feeds", "|W_b|"):
            table.add_column(col, justify="left" if col in ("slot", "feeds") else "right")
        norms = b.slot_norms(self.sample)  # None until the worker has computed them
        for i, info in enumerate(ws.slot_info):
            blocks = [k for k, s in enumerate(w.slots) if s == i]
            table.add_row(
                printable(info.label),
                "-" if info.hf_index is None else str(info.hf_index),
                "…" if norms is None else fmt_float(norms[i]),
                ",".join(f"b{k}" for k in blocks) or "-",
                ",".join(fmt_float(ws.fc_norms[k]) for k in blocks) or "-",
                style="bold" if blocks else "dim",
            )
        return table

    def _accuracy(self) -> Table:
        from inspector.engines import engine

        b, ws = self.browser, self.wirings
        assert b is not None and ws is not None
        table = Table(
            title="the set: accuracy by block position (mean p), accept length",
            title_justify="left",
            header_style="bold",
        )
        table.add_column("block position", justify="right")
        done = []
        for i, (name, slots, _) in enumerate(ws.rows):
            mark = "▶ " if i == self.current else ""
            table.add_column(f"{mark}{name}\n{ws.wiring_label(slots)}", justify="right")
            done.append(b.cached_totals(Wiring(slots)))
        for k in range(b.block.drafts_per_block):
            cells = []
            for rep in done:
                if rep is None:
                    cells.append("…")
                    continue
                p = rep.mean_p[k]
                cells.append(pct(rep.accuracy[k]) + ("" if p is None else f" ({p:.3f})"))
            table.add_row(str(k + 1), *cells)
        table.add_section()
        table.add_row("all", *["…" if r is None else pct(r.mean_accuracy) for r in done])
        for e in b.engines:
            cells = []
            for rep in done:
                st = None if rep is None else rep.stats[e]
                if st is None or st.accept_length is None:
                    cells.append("…" if rep is None else "-")
                    continue
                bound = "+" if st.is_bound else ""
                cells.append(f"{st.accept_length:.2f}{bound} ({st.rounds} rounds)")
            table.add_row(f"accept length ({engine(e).display})", *cells)
        return table
