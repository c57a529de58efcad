"""The position panel and the slot panel: plain `Text` with padded columns, from a `ViewState`.

Rich tables cost milliseconds per repaint, and a position move repaints both panels on every key
press. Rows are the engine's positions (row j predicts token j+2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.text import Text

from inspector.formatting import fmt_float, fmt_norm
from inspector.tui.drafts import slots_of
from inspector.tui.view import TOKEN_WIDTH, cell, short, wiring_name

if TYPE_CHECKING:
    from inspector.tui.summary import Summary
    from inspector.tui.view import ViewState


# --- position detail ---------------------------------------------------------------------------
def _hit_mark(t: Text, hit: bool, masked: bool) -> None:
    if not masked:
        t.append("prompt (not counted)", style="dim")
    elif hit:
        t.append("✓ hit", style="bold green")
    else:
        t.append("✗ miss", style="bold red")


def detail_renderable(session: Summary, v: ViewState, row: int, width: int = 48) -> Text:
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
def slots_renderable(session: Summary, v: ViewState, row: int) -> Text:
    data = v.data
    ref = slots_of(v.ref[0]) if v.ref is not None else None
    wiring, fc_norms = slots_of(v.wiring), session.of_draft(v.wiring).fc_norms
    j = int(row)
    rows = []
    for s, info in enumerate(session.slot_info):
        norms = data.slot_norms[s] if s < data.slot_norms.shape[0] else None
        at = fmt_norm(norms[j]) if norms is not None and j < norms.size else "-"
        mean = fmt_norm(data.slot_mean[s]) if s < data.slot_mean.size else "-"
        blocks = [b for b, slot in enumerate(wiring) if slot == s]
        feeds = ",".join(f"b{b}" for b in blocks) or "—"
        wn = ",".join(fmt_norm(fc_norms[b]) for b in blocks) or "—"
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


# --- draft tree panel ------------------------------------------------------------------------------
def tree_renderable(
    session: Summary, v: ViewState, trees: Any, row: int, width: int = 36, height: int = 15
) -> Text:
    """The draft tree of the round whose first drafted token is the cursor's (row j: token j+2),
    from a `SampleTrees` (None while it is computed): each node's token and cumulative probability,
    indented by depth, ✓ on the path the sample's own continuation takes, then where it falls
    off (the true token no child drafted) or that every step was accepted."""
    t = Text(no_wrap=True, overflow="ellipsis")
    j = int(row)
    if trees is None:
        t.append("computing the draft tree…", style="dim italic")
        return t
    if j >= len(trees.accepted):
        t.append(f"pos {j}: no round drafts here", style="dim")
        return t
    d = session.decoder
    ids = v.data.input_ids
    a = int(trees.accepted[j])
    steps = trees.spec.steps
    t.append(f"pos {j}", style="bold")
    t.append(f"  token {j + 2}  accepts ")
    t.append(f"{a}", style="bold green" if a else "bold red")
    t.append(f" of {steps}")
    parent = trees.parent[j].tolist()
    children: dict[int, list[int]] = {}
    for n, p in enumerate(parent):
        children.setdefault(int(p), []).append(n)
    order: list[int] = []
    stack = list(reversed(children.get(-1, [])))
    while stack:
        n = stack.pop()
        order.append(n)
        stack.extend(reversed(children.get(n, [])))
    on_path = trees.on_path[j]
    room = max(1, height - 3)
    hidden = 0
    if len(order) > room:  # the path and the alternatives at each of its steps first
        keep = [n for n in order if parent[n] < 0 or bool(on_path[parent[n]])]
        hidden = len(order) - len(keep)
        order = keep[:room]
        hidden += len(keep) - len(order)
    depth, prob, tokens = trees.depth[j], trees.prob[j], trees.tokens[j]
    for n in order:
        indent = "  " * (int(depth[n]) - 1)
        hit = bool(on_path[n])
        mark = "✓" if hit else "·"
        text = d.visible(int(tokens[n]))
        tw = max(3, width - len(indent) - 9)
        t.append("\n" + indent)
        t.append(mark + " ", style="bold green" if hit else "dim")
        t.append(cell(text, tw), style="bold" if hit else "")
        t.append(f" {fmt_float(prob[n], 3):>5}", style="" if hit else "dim")
    if hidden:
        t.append(f"\n… {hidden} more nodes", style="dim")
    nxt = j + 2 + a
    t.append("\n" + "  " * a)
    if a >= steps:
        t.append("all accepted (+ bonus)", style="green")
    elif nxt >= len(ids):
        t.append("the sample ends here", style="dim")
    else:
        t.append("✗ ", style="bold red")
        t.append(short(d.visible(int(ids[nxt])), 12), style="bold")
        t.append(" (true) is not drafted here", style="red")
    return t
