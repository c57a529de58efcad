"""The accuracy bar: per shown wiring, this sample's and the whole set's accuracy, then the
positions that flipped against the reference wiring.

Three views of the same predictions (`v` cycles them, see `state.metrics_order`):
- ours: what serving sees. all-tok: the draft's top-1 (mapped through d2t) equals the true next
  token, over loss-masked rows; in-vocab: the same where the true token is in the draft vocab.
- speculators: its own full_acc_k (cumulative: steps 0..k all match the verifier's argmax within the
  draft vocab) and cond_acc_k (given steps < k), with its rows (the one after the last token too).
- specforge: its own acc_k (per step, against the target's full-vocab argmax, its loss-mask rows)
  and simulated_acc_len = sum_k prod_{m<=k} acc_m.
The trainers' counts are the `StepMetrics` fields of `inspector.metrics.trainers`; they need the
verifier's norm + lm_head (`--target`), and the bar says so when it is absent.

Ours also shows τ, the accept length an engine would log (1 + accepted / rounds, as vLLM counts it,
its bonus token included, pooled over rounds) under the current engine settings (`a`): the
serving replay (`inspector.serving`) of this sample and of the set's samples replayed so far; at
a temperature, its expectation under the engine's verification rule (`tui.tau_settings`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from rich.cells import cell_len
from rich.text import Text

from inspector.formatting import fmt_float, pct
from inspector.tui.view import cell, wiring_name

if TYPE_CHECKING:
    from inspector.metrics import Counts, StepMetrics
    from inspector.tui.state import AcceptTotals, SetTotals, ViewModel
    from inspector.tui.summary import Summary
    from inspector.tui.tau_settings import Serving
    from inspector.tui.totals import AcceptFigure
    from inspector.tui.view import ViewState
    from inspector.wiring import WiringKey

TITLES = {
    "ours": "accuracy",
    "speculators": "accuracy · speculators' own: its training log's numbers",
    "specforge": "accuracy · SpecForge's own: its training log's numbers",
}
# One line under a trainer view: what its numbers count (the help screen says more).
DEFINITIONS = {
    "speculators": "full_acc_k: steps 0..k all match the verifier's argmax in the draft vocab "
    "(cumulative); cond_acc_k: given steps < k",
    "specforge": "acc_k: step k matches the target's full-vocab argmax (teacher forced); "
    "simulated_acc_len = Σ_k Π_m≤k acc_m",
}
NEEDS_TARGET = {
    "speculators": "needs --target: full_acc / cond_acc compare with the verifier's argmax (its "
    "norm + lm_head)",
    "specforge": "needs --target: acc compares with the target's argmax (its norm + lm_head)",
}


def accuracy_title(metrics: str, serving: Serving | None) -> str:
    """The bar's border title: the view, and in ours what τ replays."""
    if metrics != "ours" or serving is None:
        return TITLES[metrics]
    what = "accept len" if serving.greedy else "expected accept len"
    return f"{TITLES[metrics]} · τ: {what} of a {serving.label()} (a to change)"


def _tau(a: AcceptFigure | None) -> str:
    """τ as the engine logs it (1 + accepted / rounds; at a temperature, its expectation); ≥
    where a request's last round drafted past what its sample knows of the target's
    continuation."""
    al = a.accept_length if a is not None else None
    if al is None or a is None:
        return "…"
    return ("≥" if a.is_bound else "") + fmt_float(al)


def _counts(c: Counts | None) -> str:
    return "-" if c is None else c.fmt()


# Per view: the step-0 column headings and cells (this sample, then the set).
HEADS: dict[str, tuple[str, ...]] = {
    "ours": ("all-tok", "in-vocab"),
    "speculators": ("full_acc_0", "cond_acc_0"),
    "specforge": ("acc_0",),
}
CELLS: dict[str, Callable[[StepMetrics], list[str]]] = {
    "ours": lambda s: [s.all_tok.fmt(), s.in_vocab.fmt()],
    "speculators": lambda s: [_counts(s.spec_full), _counts(s.spec_cond)],
    "specforge": lambda s: [_counts(s.specforge)],
}


def _step_pcts(steps: Sequence[StepMetrics], counts: Callable[[StepMetrics], Counts | None]) -> str:
    return " ".join(pct(c.acc if (c := counts(s)) is not None else None, suffix="") for s in steps)


def by_step_heading(metrics: str, k_steps: int) -> str:
    last = f"s{k_steps - 1}"
    return {
        "ours": f"all-tok s0..{last}",
        "speculators": f"full_acc / cond_acc s0..{last}",
        "specforge": f"acc s0..{last}, simulated_acc_len",
    }[metrics]


def by_step(metrics: str, steps: Sequence[StepMetrics]) -> str:
    """Every TTT step's accuracy in one cell, and the view's acceptance figure."""
    from inspector.metrics import simulated_acc_len

    if metrics == "speculators":
        full = _step_pcts(steps, lambda s: s.spec_full)
        cond = _step_pcts(steps, lambda s: s.spec_cond)
        return f"{full}% / {cond}%"
    if metrics == "specforge":
        sim = simulated_acc_len([s.specforge.acc if s.specforge else None for s in steps])
        sim_text = "-" if sim is None else fmt_float(sim, 3)
        return f"{_step_pcts(steps, lambda s: s.specforge)}%  {sim_text}"
    return f"{_step_pcts(steps, lambda s: s.all_tok)}%"


def accuracy_text(
    st: ViewModel, *, metrics: str, narrow: bool, width: int, looking: str | None = None
) -> Text | None:
    """The bar for the main screen's state; None before a session and a wiring. `looking`: how
    far the doctor's search for the trained wiring got, while it runs (`first_look`)."""
    if st.session is None or st.wiring is None:
        return None
    v = st.shown
    return accuracy_renderable(
        st.session,
        v,
        st.view_wirings(),
        st.sample_metrics(),
        st.totals,
        st.n_good,
        st.row if v is not None else None,
        accepts={w: (st.sample_accept(w), st.set_accept(w)) for w in st.distinct()},
        metrics=metrics,
        narrow=narrow,
        width=width,
        looking=looking,
    )


def accuracy_renderable(
    session: Summary,
    v: ViewState | None,
    wirings: Sequence[WiringKey],
    sample_metrics: dict[WiringKey, list[StepMetrics]],
    totals: dict[WiringKey, SetTotals],
    n_good: int,
    row: int | None,
    *,
    accepts: dict[WiringKey, tuple[AcceptFigure | None, AcceptTotals | None]] | None = None,
    metrics: str = "ours",
    narrow: bool = False,
    width: int = 200,
    looking: str | None = None,
) -> Text:
    """Rows: current wiring then the pins (newest = the reference); then the flipped positions
    and, in a trainer view, what its numbers count (or that they need --target).

    The count columns never shrink; only the wiring name gives way on a narrow screen. In ours,
    each group ends with τ, the replayed accept length (`accepts`: this sample's, the set's); a
    narrow screen drops this sample's in-vocab to keep it. With a reference pinned, ours adds the
    gap row (Δ ● − ◆: points and τ) and, once the trained wiring is known (`looking`: the search
    still runs), one line saying what to press next.
    """
    k_steps = session.ttt_steps
    heads, cells_of = HEADS[metrics], CELLS[metrics]
    tau = metrics == "ours" and accepts is not None
    # A narrow screen keeps τ by dropping this sample's in-vocab (the set's stays).
    sample_heads, sample_cells = heads, cells_of
    if tau and narrow:
        sample_heads, sample_cells = heads[:1], (lambda s, f=cells_of: f(s)[:1])
    dim = ("…", "dim")
    rows: list[list[tuple[str, str]]] = []  # (text, style) per cell
    # per row, the figures behind its count cells (ours: accuracy as a fraction, τ), for the gap
    figures: list[list[Figure]] = []
    for idx, w in enumerate(wirings):
        mark = "●" if idx == 0 else ("◆" if idx == len(wirings) - 1 else "◇")
        sm = sample_metrics.get(w)
        tot = totals.get(w)
        name = (
            (session.name_of(w) or session.wiring_label(w)) if narrow else wiring_name(session, w)
        )
        cells = [(mark, "bold"), (name, "")]
        cells += [(c, "") for c in sample_cells(sm[0])] if sm else [dim] * len(sample_heads)
        figs: list[Figure] = _accs(sm[0] if sm else None, len(sample_heads))
        a_sample, a_set = accepts.get(w, (None, None)) if accepts is not None else (None, None)
        if tau:
            cells.append((_tau(a_sample), "bold"))
            figs.append(_tau_figure(a_sample))
        if tot is not None and tot.steps:
            style = "dim" if tot.n_samples < n_good else ""
            cells += [(c, style) for c in cells_of(tot.steps[0])]
        else:
            cells += [dim] * len(heads)
        figs += _accs(tot.steps[0] if tot is not None and tot.steps else None, len(heads))
        if tau:
            if a_set is None:
                cells.append(dim)
            else:
                style = "dim" if a_set.n_samples < n_good else "bold"
                cells.append((_tau(a_set.figure), style))
            figs.append(_tau_figure(a_set.figure if a_set is not None else None))
        if k_steps > 1:
            src = tot.steps if tot is not None and tot.steps else (sm or [])
            cells.append((by_step(metrics, src), "") if src else dim)
            figs.append(None)
        rows.append(cells)
        figures.append(figs)
    if metrics == "ours" and len(wirings) > 1 and wirings[0] != wirings[-1]:
        gap = _gap_row(figures[0], figures[-1])
        if k_steps > 1:
            gap[-1] = ("", "")  # the by-step cell: its steps differ in their own ways
        rows.append(gap)
    done = min((t.n_samples for w in wirings if (t := totals.get(w)) is not None), default=0)
    sample_title = f"#{v.sample}" if v is not None else "sample"
    set_title = f"all {n_good}" if done >= n_good else f"{done}/{n_good} samples"
    taus = ["τ"] if tau else []
    headers = ["", "wiring", f"{sample_title} {heads[0]}", *sample_heads[1:], *taus]
    headers += [f"{set_title} {heads[0]}", *heads[1:], *taus]
    if k_steps > 1:
        headers.append(by_step_heading(metrics, k_steps))
    t = _table(headers, rows, width)
    _flips_line(t, v, row)
    if metrics != "ours":
        needs = not session.has_verifier
        t.append("\n")
        t.append(NEEDS_TARGET[metrics] if needs else DEFINITIONS[metrics], style="dim")
    elif v is not None and v.ref is None:
        t.append(
            "\np pins the current wiring as the reference; flipped positions then show here",
            style="dim",
        )
    if metrics == "ours":
        _next_line(t, session, looking)
    if tau and session.logged is not None:
        t.append("\n")
        t.append(session.logged.line(), style="bold")
        t.append(
            " beside τ, this draft's replay of these samples: `eagle-inspect reconcile` says "
            "which wiring gives it",
            style="dim",
        )
    return t


GAP_MARK = "Δ ● − ◆"
# A count cell's figure for the gap row: (value, is τ) — accuracy as a fraction, or τ; None
# where the cell shows no figure (not computed yet, a by-step cell, a trainer's view).
Figure: TypeAlias = "tuple[float, bool] | None"


def _accs(s: StepMetrics | None, n: int) -> list[Figure]:
    """Ours' all-tok and in-vocab accuracy of a step (the first `n` of them)."""
    if s is None:
        return [None] * n
    return [(c.acc, False) if c.acc is not None else None for c in (s.all_tok, s.in_vocab)][:n]


def _tau_figure(a: AcceptFigure | None) -> Figure:
    al = a.accept_length if a is not None else None
    return None if al is None else (float(al), True)


def _gap_row(cur: list[Figure], ref: list[Figure]) -> list[tuple[str, str]]:
    """The current row minus the reference's, cell by cell: accuracy in points ('+49.5 pts'),
    τ in tokens ('+1.44'); a cell either row does not know yet stays '…'."""
    out: list[tuple[str, str]] = [("", ""), (GAP_MARK, "bold")]
    for a, b in zip(cur, ref, strict=True):
        if a is None or b is None:
            out.append(("…", "dim"))
            continue
        d = a[0] - b[0]
        text = f"{d:+.2f}" if a[1] else f"{100 * d:+.1f} pts"
        out.append((text, "bold green" if d > 0 else "bold red" if d < 0 else "bold"))
    return out


def _next_line(t: Text, session: Summary, looking: str | None) -> None:
    """What to press next: while the doctor's search runs, that it runs; once it answered, the
    doctor's verdict (d) and the keys that show either wiring alone."""
    look = session.first_look
    if looking is not None:
        t.append("\n")
        t.append(
            f"finding the wiring the weights were trained on (the doctor's search: {looking})",
            style="italic",
        )
        return
    if look is None:
        return
    t.append("\n")
    if look.gap:
        t.append("next: ", style="bold")
        t.append("d", style="bold reverse")
        t.append(" the doctor's verdict and fix  ")
        t.append("f", style="bold reverse")
        t.append(" a flipped position  ")
        t.append("?", style="bold reverse")
        t.append(" every key")
    else:
        t.append(f"the engine feeds the trained wiring ({look.fed_words()}); ", style="dim")
        t.append("d", style="bold reverse")
        t.append(" the doctor's other checks")


def _table(headers: list[str], rows: list[list[tuple[str, str]]], width: int) -> Text:
    """Padded columns; the wiring column (1) gives way when the bar is narrow."""
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
    return t


def _flips_line(t: Text, v: ViewState | None, row: int | None) -> None:
    """'flipped vs ◆ 12 (✓→✗ 9, ✗→✓ 3)  f: 4 17 …', the cursor's flip highlighted."""
    if v is None or v.ref is None:
        return
    flips = v.flipped_rows
    t.append("\n")
    t.append(f"flipped vs ◆ {len(flips)}", style="bold")
    t.append(f" (✓→✗ {v.flip_loss}, ✗→✓ {v.flip_gain})  f: ")
    if flips is None or not len(flips):
        t.append("none")
        return
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
