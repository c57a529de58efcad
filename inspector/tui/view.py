"""What the panels show, computed from engine results: pure functions, no widgets.

Position numbering is the engine's (and `eagle-inspect eval --positions`'): row j feeds token
x_{j+1} with the hidden states of position j and predicts token x_{j+2}. The strip's cursor sits on
token j+2, the token being predicted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len, set_cell_size
from rich.text import Text

from inspector.tui.widgets.strip import HIT, MISS, NONE, OOV, P_BINS, PROMPT

if TYPE_CHECKING:
    import numpy as np

    from inspector.tui.engine import SampleData, Session

WiringKey = tuple[int, ...]
TOKEN_WIDTH = 18


@dataclass
class ViewState:
    """One sample under the current wiring and the pinned ones, with derived position lists."""

    data: SampleData
    wiring: WiringKey
    pred: Any  # SamplePredictions
    pins: list[tuple[WiringKey, Any]] = field(default_factory=list)
    masked_rows: np.ndarray | None = None
    miss_rows: np.ndarray | None = None
    flipped_rows: np.ndarray | None = None
    flip_gain: int = 0  # miss under the reference, hit under the current wiring
    flip_loss: int = 0

    @property
    def s0(self) -> Any:
        return self.pred.steps[0]

    @property
    def n_rows(self) -> int:
        return int(self.s0.pos.size)

    @property
    def ref(self) -> tuple[WiringKey, Any] | None:
        return self.pins[-1] if self.pins else None

    @property
    def sample(self) -> int:
        return self.data.index


def build_view(
    data: SampleData, wiring: WiringKey, pred: Any, pins: Sequence[tuple[WiringKey, Any]]
) -> ViewState:
    import numpy as np

    v = ViewState(data, tuple(wiring), pred, list(pins))
    s0 = v.s0
    v.masked_rows = np.flatnonzero(s0.masked)
    v.miss_rows = np.flatnonzero(s0.masked & ~s0.hit)
    if v.ref is not None:
        r0 = v.ref[1].steps[0]
        n = min(len(r0), len(s0))
        diff = s0.masked[:n] & (s0.hit[:n] != r0.hit[:n])
        v.flipped_rows = np.flatnonzero(diff)
        v.flip_gain = int((diff & s0.hit[:n]).sum())
        v.flip_loss = int((diff & ~s0.hit[:n]).sum())
    else:
        v.flipped_rows = np.zeros(0, dtype=np.int64)
    return v


def strip_marks(v: ViewState, mask_only: bool) -> tuple[list[int], list[int], list[bool]]:
    """Per-token kind, p(true) bin and visibility for the strip (token t <- row t-2)."""
    import numpy as np

    t = v.data.length
    s0 = v.s0
    n = len(s0)
    kind = np.full(t, NONE, dtype=np.int8)
    rows_kind = np.where(
        s0.masked, np.where(s0.hit, HIT, np.where(s0.in_vocab, MISS, OOV)), PROMPT
    ).astype(np.int8)
    kind[2 : 2 + n] = rows_kind
    pbin = np.zeros(t, dtype=np.int8)
    p = np.nan_to_num(s0.p_true.astype(np.float64), nan=0.0)
    pbin[2 : 2 + n] = np.clip((p * P_BINS).astype(np.int64), 0, P_BINS - 1)
    if mask_only:
        show = np.zeros(t, dtype=bool)
        show[2 : 2 + n] = s0.masked
    else:
        show = np.ones(t, dtype=bool)
    return kind.tolist(), pbin.tolist(), show.tolist()


# --- formatting --------------------------------------------------------------------------------
def fmt_float(x: float, digits: int = 2) -> str:
    """NaN / Inf shown as such."""
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    return f"{x:.{digits}f}"


def fmt_norm(x: float) -> str:
    """4 significant digits in at most 6 cells; NaN / Inf shown as such."""
    x = float(x)
    if not math.isfinite(x):
        return fmt_float(x)
    a = abs(x)
    if a >= 1e5:
        return f"{x:.1e}".replace("e+0", "e").replace("e+", "e")
    if a >= 1000:
        return f"{x:.0f}"
    if a >= 100:
        return f"{x:.1f}"
    if a >= 10:
        return f"{x:.2f}"
    return f"{x:.3f}"


def short(text: str, width: int = TOKEN_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def tok(session: Session, target_id: int) -> str:
    return short(session.decoder.visible(int(target_id)))


def wiring_name(session: Session, w: Sequence[int]) -> str:
    name = session.preset_name(w)
    label = session.wiring_label(w)
    return f"{label} {name}" if name else label


# --- header -----------------------------------------------------------------------------------
def header_text(
    session: Session | None,
    *,
    status: str,
    sample: int,
    wiring: WiringKey | None,
    ref: WiringKey | None,
    row: int | None,
    n_rows: int | None,
    pending: bool,
    mask_only: bool,
    mode: str,
) -> Text:
    """Line 1: checkpoint, layout, device, dtype, sample. Line 2: position, wirings, state."""
    t = Text()
    t.append("eagle-inspect", style="bold")
    if session is None:
        t.append(f"  {status}")
        return t
    name = session.checkpoint.rstrip("/").rsplit("/", 1)[-1] or session.name
    t.append(f"  {name}", style="bold")
    t.append(f" ({session.layout})  {session.device} {session.dtype}  ")
    n = len(session.files)
    fname = session.files[sample].rsplit("/", 1)[-1] if 0 <= sample < n else "?"
    t.append(f"sample #{sample} of {n}", style="bold")
    t.append(f"  {fname}")
    t.append("\n")
    if row is not None and n_rows:
        t.append(f"pos {row}/{n_rows - 1}  ", style="bold")
    if wiring is not None:
        t.append("fc ← ", style="bold")
        t.append(session.wiring_label(wiring), style="bold")
        name = session.preset_name(wiring)
        if name:
            t.append(f" {name}")
    if ref is not None:
        t.append("   ref ◆ ")
        t.append(session.wiring_label(ref))
        name = session.preset_name(ref)
        if name:
            t.append(f" {name}")
    if session.ttt_steps > 1:
        t.append(f"   K={session.ttt_steps}")
    if mode == "p":
        t.append("   colour p(true)")
    if mask_only:
        t.append("   masked only")
    if pending:
        t.append("   ⋯ computing", style="bold italic")
    elif status:
        t.append(f"   {status}", style="italic")
    return t


# --- position detail ---------------------------------------------------------------------------
# The panels are plain Text with padded columns: Rich tables cost milliseconds per repaint, and a
# position move repaints the detail and slot panels on every key press.
def cell(text: str, width: int, right: bool = False) -> str:
    """text padded or cut (with …) to exactly `width` cells."""
    n = cell_len(text)
    if n > width:
        return set_cell_size(text, max(width - 1, 0)) + ("…" if width > 0 else "")
    pad = " " * (width - n)
    return pad + text if right else text + pad


def _hit_mark(t: Text, hit: bool, masked: bool) -> None:
    if not masked:
        t.append("prompt (not counted)", style="dim")
    elif hit:
        t.append("✓ hit", style="bold green")
    else:
        t.append("✗ miss", style="bold red")


def detail_renderable(session: Session, v: ViewState, row: int, width: int = 48) -> Text:
    """The position panel; token texts shrink to fit `width` cells, the numbers never do."""
    s0 = v.s0
    j = int(row)
    d = session.decoder
    tw = max(4, min(TOKEN_WIDTH, width - 31))  # token text in the input/true/pred lines
    kw = max(4, min(12, (width - 21) // 2))  # token text in the top-10 columns
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f"pos {j}", style="bold")
    t.append(f"  token {j + 2}  ")
    _hit_mark(t, bool(s0.hit[j]), bool(s0.masked[j]))

    inp = int(s0.input[j])
    t.append("\ninput ", style="bold")
    t.append(short(d.visible(inp), tw), style="bold")
    t.append(f"  id {inp}")
    true = int(s0.true[j])
    in_vocab = bool(s0.in_vocab[j])
    t.append("\ntrue  ", style="bold")
    t.append(short(d.visible(true), tw), style="bold")
    t.append(f"  target {true}  " + (f"draft {int(s0.true_draft[j])}" if in_vocab else "draft OOV"))
    pt = int(s0.pred_target[j])
    t.append("\npred  ", style="bold")
    t.append(short(d.visible(pt), tw), style="bold")
    t.append(f"  target {pt}  draft {int(s0.pred_draft[j])}")
    rank = int(s0.rank_true[j])
    t.append("\np     ", style="bold")
    t.append(
        f"pred {fmt_float(s0.p_pred[j], 3)}  true {fmt_float(s0.p_true[j], 3)}"
        f"  rank {rank if in_vocab else '-'}"
    )

    t.append("\ntop-10", style="bold")
    ids, ps = s0.topk_target[j], s0.topk_p[j]
    k = len(ids)
    half = (k + 1) // 2
    for r in range(half):
        t.append("\n")
        for c in (r, r + half):
            if c >= k:
                continue
            is_true = int(ids[c]) == true
            style = "bold green" if is_true else ""
            t.append(f"{c + 1:>2} ", style="dim")
            t.append(cell(("✓" if is_true else "") + d.visible(int(ids[c])), kw), style=style)
            t.append(f" {fmt_float(ps[c], 3):>5}", style=style)
            if c == r:
                t.append("   ")
    if in_vocab and rank > k:
        t.append(f"\ntrue token at rank {rank}", style="dim")

    if len(v.pred.steps) > 1:
        t.append("\nTTT", style="bold")
        for st in v.pred.steps[1:]:
            if j < len(st):
                mark = "✓" if bool(st.hit[j]) else "✗"
                t.append(f"  s{st.step} {mark} p(true) {fmt_float(st.p_true[j], 2)}")

    for idx, (w, pred) in enumerate(reversed(v.pins)):
        r0 = pred.steps[0]
        if j >= len(r0):
            continue
        t.append(
            "\n" + ("ref ◆ " if idx == 0 else "pin ◇ ") + wiring_name(session, w), style="bold"
        )
        rp = int(r0.pred_target[j])
        t.append(f"\n  pred {short(d.visible(rp), tw)} p {fmt_float(r0.p_pred[j], 3)} ")
        _hit_mark(t, bool(r0.hit[j]), bool(r0.masked[j]))
        t.append(
            f"  true {fmt_float(r0.p_true[j], 3)} rank "
            f"{int(r0.rank_true[j]) if bool(r0.in_vocab[j]) else '-'}"
        )
    return t


# --- slot panel ----------------------------------------------------------------------------------
def slots_renderable(session: Session, v: ViewState, row: int) -> Text:
    data = v.data
    ref = v.ref[0] if v.ref is not None else None
    j = int(row)
    rows = []
    for s, info in enumerate(session.slot_info):
        norms = data.slot_norms[s] if s < data.slot_norms.shape[0] else None
        at = fmt_norm(norms[j]) if norms is not None and j < norms.size else "-"
        mean = fmt_norm(data.slot_mean[s]) if s < data.slot_mean.size else "-"
        blocks = [b for b, slot in enumerate(v.wiring) if slot == s]
        feeds = ",".join(f"b{b}" for b in blocks) or "—"
        wn = ",".join(fmt_norm(session.fc_norms[b]) for b in blocks) or "—"
        bad = s < data.slot_nonfinite.size and int(data.slot_nonfinite[s]) > 0
        ref_feeds = ",".join(f"b{b}" for b, slot in enumerate(ref or ()) if slot == s) or "—"
        hf = "-" if info.hf_index is None else str(info.hf_index)
        rows.append(
            (info.label + (" ⚠" if bad else ""), hf, at, mean, feeds, wn, ref_feeds, bad, blocks)
        )
    head = ["slot", "HF", "|h|", "mean", "fc", "|W_b|", "ref"]
    if ref is None:
        head.pop()
    widths = [max(cell_len(str(r[c])) for r in [head, *rows]) for c in range(len(head))]
    widths[0] = min(widths[0], 16)
    right = [False, True, True, True, False, True, False]
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(" ".join(cell(h, widths[c], right[c]) for c, h in enumerate(head)), style="bold")
    for r in rows:
        label, hf, at, mean, feeds, wn, ref_feeds, bad, blocks = r
        t.append("\n")
        t.append(cell(label, widths[0]), style="bold red" if bad else ("bold" if blocks else ""))
        for c, value in enumerate((hf, at, mean, feeds, wn, ref_feeds)[: len(head) - 1], start=1):
            t.append(" ")
            t.append(
                cell(value, widths[c], right[c]),
                style="red" if value in ("NaN", "Inf", "-Inf") else "",
            )
    return t


# --- accuracy bar -------------------------------------------------------------------------------
@dataclass
class SetTotals:
    steps: list  # [StepMetrics]
    n_samples: int


def accuracy_renderable(
    session: Session,
    v: ViewState | None,
    wirings: Sequence[WiringKey],
    sample_metrics: dict[WiringKey, list],
    totals: dict[WiringKey, SetTotals],
    n_good: int,
    row: int | None,
    *,
    narrow: bool = False,
    width: int = 200,
) -> Text:
    """Rows: current wiring then the pins (newest = the reference); then the flipped positions.

    The count columns never shrink; only the wiring name gives way on a narrow screen.
    """
    from inspector.metrics import acceptance_length

    k_steps = session.ttt_steps
    rows: list[list[tuple[str, str]]] = []  # (text, style) per cell
    for idx, w in enumerate(wirings):
        mark = "●" if idx == 0 else ("◆" if idx == len(wirings) - 1 else "◇")
        sm = sample_metrics.get(w)
        tot = totals.get(w)
        name = (
            (session.preset_name(w) or session.wiring_label(w))
            if narrow
            else wiring_name(session, w)
        )
        cells = [(mark, "bold"), (name, "")]
        if sm:
            cells += [(sm[0].all_tok.fmt(), ""), (sm[0].in_vocab.fmt(), "")]
        else:
            cells += [("…", "dim"), ("…", "dim")]
        if tot is not None and tot.steps:
            style = "dim" if tot.n_samples < n_good else ""
            cells += [(tot.steps[0].all_tok.fmt(), style), (tot.steps[0].in_vocab.fmt(), style)]
        else:
            cells += [("…", "dim"), ("…", "dim")]
        if k_steps > 1:
            src = tot.steps if tot is not None and tot.steps else (sm or [])
            if src:
                by_step = " ".join(
                    f"{100 * s.all_tok.acc:.1f}" if s.all_tok.acc is not None else "-" for s in src
                )
                cells.append((f"{by_step}%  τ {acceptance_length(src):.2f}", ""))
            else:
                cells.append(("…", "dim"))
        rows.append(cells)
    done = min((t.n_samples for w in wirings if (t := totals.get(w)) is not None), default=0)
    sample_title = f"#{v.sample}" if v is not None else "sample"
    set_title = f"all {n_good}" if done >= n_good else f"{done}/{n_good} samples"
    headers = [
        "",
        "wiring",
        f"{sample_title} all-tok",
        "in-vocab",
        f"{set_title} all-tok",
        "in-vocab",
    ]
    if k_steps > 1:
        headers.append(f"all-tok s0..s{k_steps - 1}, τ")
    widths = [
        max([cell_len(headers[c])] + [cell_len(r[c][0]) for r in rows]) for c in range(len(headers))
    ]
    gaps = [0, 1] + [2] * (len(widths) - 2)  # before each column
    others = sum(widths) - widths[1] + sum(gaps)
    widths[1] = max(6, min(widths[1], width - others))
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(
        "".join(" " * gaps[c] + cell(h, widths[c], c > 1) for c, h in enumerate(headers)),
        style="bold",
    )
    for r in rows:
        t.append("\n")
        for c, (text, style) in enumerate(r):
            t.append(" " * gaps[c])
            t.append(cell(text, widths[c], c > 1), style=style)
    if v is not None and v.ref is not None:
        flips = v.flipped_rows
        t.append("\n")
        t.append(f"flipped vs ◆ {len(flips)}", style="bold")
        t.append(f" (✓→✗ {v.flip_loss}, ✗→✓ {v.flip_gain})  f: ")
        if len(flips):
            import numpy as np

            at = int(np.searchsorted(flips, row)) if row is not None else 0
            start = max(0, min(at - 3, len(flips) - 12))
            shown = flips[start : start + 12]
            if start:
                t.append("… ")
            for p in shown:
                style = "reverse" if row is not None and int(p) == row else ""
                t.append(str(int(p)), style=style)
                t.append(" ")
            if start + 12 < len(flips):
                t.append("…")
        else:
            t.append("none")
    elif v is not None:
        t.append(
            "\np pins the current wiring as the reference; flipped positions then show here",
            style="dim",
        )
    return t
