"""`eagle-inspect compare CKPT_A CKPT_B SAMPLES`: two drafts' replays over the same samples under
the same engine settings, paired by sample (`serving.paired_drafts`), as tables or one JSON document."""

from __future__ import annotations

import argparse
import copy
import sys

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from inspector.commands.accept import bound_notes, spec_from_args
from inspector.commands.common import open_evaluator, print_skips, warn_config_wiring
from inspector.commands.gates import compare_gate, gate_exit, signed
from inspector.commands.output import report_table, safe, stdout_console, write_json
from inspector.formatting import fmt_float, pct
from inspector.progress import progress_bar


def run_compare(args: argparse.Namespace) -> int:
    from inspector.engines import parse_engine
    from inspector.serving.paired_drafts import compare

    spec = spec_from_args(args)
    engine = parse_engine(args.engine, spec.is_chain)
    err = Console(stderr=True)
    reports = []
    maps = []
    for side, ckpt, wiring in (
        ("A", args.checkpoint, args.wiring_a),
        ("B", args.checkpoint_b, args.wiring_b),
    ):
        r, d2t = _replay(args, ckpt, wiring, spec, engine, err, side)
        if engine.overlap_round and args.sglang_overlap == "off":
            r = r.without_overlap_rounds()
        reports.append(r)
        maps.append(d2t)
    moved = _moved_note(maps, args)
    if moved:
        err.print(f"note: {safe(moved)}", highlight=False, soft_wrap=True)
    for r in reports:
        print_skips(err, r)
    for line in bound_notes([r.wirings[0] for r in reports]):
        err.print(f"note: {safe(line)}", highlight=False, soft_wrap=True)
    cmp = compare(
        reports[0].wirings[0],
        reports[1].wirings[0],
        resamples=args.resamples,
        seed=args.seed,
    )
    if args.report:
        write_compare_report(args, reports, cmp)
    if args.json:
        write_json(compare_dict(reports, cmp))
    else:
        out = stdout_console(None if sys.stdout.isatty() else 200)
        out.print(render_compare(reports, cmp))
        out.print(render_breakdown(cmp))
    return gate_exit(err, compare_gate, cmp, args.fail_under)


def _replay(args, checkpoint, wiring_text, spec, engine, err, side: str):
    from inspector.serving.replay import Replayer
    from inspector.wiring import preset_name

    one = copy.copy(args)
    one.checkpoint = checkpoint
    _, ev = open_evaluator(one, err, args.device, spec.steps if spec.is_chain else 1)
    warn_config_wiring(err, ev)
    wiring = ev.wiring(wiring_text)
    with progress_bar(f"replaying {side}", err) as advance:
        report = Replayer(ev, spec, engine).run(
            [wiring], limit=args.limit, names=[preset_name(wiring_text)], progress=advance
        )
    return report, ev.draft.vocab.draft_to_target.cpu()


def _moved_note(maps, args) -> str | None:
    """A line when B's vocabulary map is not A's (a warm-start that regenerated it): how many
    draft rows moved, and the doctor command that says whether B's head followed."""
    a, b = maps
    if a.shape != b.shape:
        return f"B's draft vocabulary ({b.numel()} tokens) is not A's ({a.numel()})"
    moved = int((a != b).sum())
    if not moved:
        return None
    return (
        f"B's vocabulary map moved against A's: {moved} of {a.numel()} draft rows map to other "
        f"target tokens (`eagle-inspect doctor {args.checkpoint_b} SAMPLES --parent "
        f"{args.checkpoint}` says whether B's head followed)"
    )


def write_compare_report(args, reports, cmp) -> None:
    from inspector.commands.report_file import Report, fingerprint, from_rich, write_report

    depth, ctx, cat, lines = breakdown_tables(cmp)
    main = render_compare(reports, cmp)
    report = Report(
        title=f"compare: {reports[0].checkpoint} (A) against {reports[1].checkpoint} (B)",
        settings=compare_dict(reports, cmp)["config"]
        | {"seed": cmp.seed, "resamples": cmp.resamples},
        inputs=[
            ("A", str(args.checkpoint), fingerprint(args.checkpoint)),
            ("B", str(args.checkpoint_b), fingerprint(args.checkpoint_b)),
            *[("samples", str(s), fingerprint(s)) for s in args.samples],
        ],
        tables=[
            ("B - A", from_rich(main)),
            ("By draft depth", from_rich(depth)),
            ("By context position", from_rich(ctx)),
            *([("By category", from_rich(cat))] if cat is not None else []),
        ],
        notes=[x.strip() for x in lines],
        verdict=main.caption.rsplit(". ", 1)[-1] if main.caption else None,
    )
    write_report(args.report, report)


def compare_dict(reports, cmp) -> dict:
    a, b = reports
    return {
        "schema_version": 1,
        "config": {**a.spec.to_dict(), "mode": "replay", "engine": a.engine.value},
        "a": _side(a),
        "b": _side(b),
        **cmp.to_dict(),
    }


def _side(report) -> dict:
    w = report.wirings[0]
    return {
        "checkpoint": str(report.checkpoint),
        "wiring": list(w.wiring.slots),
        "label": w.label,
        "samples": report.samples,
        "accept_length_is_lower_bound": w.stats.is_bound,
    }


def _al(x: float | None) -> str:
    return "-" if x is None else fmt_float(x, 4)


def _ci(d) -> str:
    if d.low is None or d.high is None:
        return "-"
    return f"[{signed(d.low)}, {signed(d.high)}]"


def _diff(d) -> str:
    return "-" if d.diff is None else signed(d.diff)


def render_compare(reports, cmp) -> Table:
    a, b = reports
    spec = a.spec
    al = cmp.accept_length
    title = safe(
        f"B - A: accept length per round as {a.engine.display} counts it ({spec.mode}: "
        f"{spec.flags()}) on {len(cmp.indices)} samples; {al.level:.0%} paired bootstrap over "
        f"requests, {cmp.resamples} resamples, seed {cmp.seed}"
    )
    table = report_table(title)
    for col in ("", "checkpoint", "wiring", "accept len", "rounds"):
        table.add_column(col, no_wrap=col != "checkpoint", justify="left")
    table.columns[3].justify = table.columns[4].justify = "right"
    rounds_of = cmp.to_dict()["rounds"]
    for side, rep, x in (("A", a, cmp.accept_length_a), ("B", b, cmp.accept_length_b)):
        w = rep.wirings[0]
        bound = ">=" if w.stats.is_bound and x is not None else ""
        rounds = rounds_of[side.lower()]
        table.add_row(side, safe(rep.checkpoint), safe(w.label), bound + _al(x), f"{rounds:,}")
    table.add_row("B - A", "", "", _diff(al), _ci(al))
    verdict = (
        "the interval excludes 0: B is " + ("better" if (al.diff or 0) > 0 else "worse")
        if al.excludes_zero
        else "the interval holds 0: no difference shown"
    )
    table.caption = (
        "accept len: 1 + accepted / rounds, pooled over every round as the engines log it; the "
        "last row: B - A and its percentile interval (requests resampled with replacement, the "
        f"same draw for both drafts). {verdict}"
    )
    table.caption_justify = "left"
    return table


def render_breakdown(cmp) -> Group:
    depth, ctx, cat, lines = breakdown_tables(cmp)
    parts = [Text(""), depth, Text(""), ctx]
    if cat is not None:
        parts += [Text(""), cat]
    return Group(*parts, Text(""), Text("\n".join(lines)))


def breakdown_tables(cmp) -> tuple[Table, Table, Table | None, list[str]]:
    """The by-depth, by-context and by-category (None: no categories) tables and the
    disagreement lines."""
    depth = report_table(
        "acceptance rate by draft depth (share of rounds accepting at least k tokens)"
    )
    for col in ("depth", "A", "B", "B - A", "interval"):
        depth.add_column(col, justify="right")
    for k, d in enumerate(cmp.per_depth, start=1):
        depth.add_row(
            f">={k}",
            "-" if d.a is None else pct(d.a),
            "-" if d.b is None else pct(d.b),
            _diff(d),
            _ci(d),
        )
    ctx = report_table("accept length by context position (round start)")
    for col in ("tokens", "A", "B", "B - A", "interval"):
        ctx.add_column(col, justify="right", no_wrap=True)
    from inspector.metrics.rounds import BUCKET_TOKENS

    for start, d in cmp.by_bucket:
        ctx.add_row(
            f"{start:,}-{start + BUCKET_TOKENS:,}",
            _al(None if d.a is None else 1 + d.a),
            _al(None if d.b is None else 1 + d.b),
            _diff(d),
            _ci(d),
        )
    cat = None
    if cmp.by_category:
        cat = report_table("accept length by category")
        for col in ("category", "requests", "A", "B", "B - A", "interval"):
            cat.add_column(col, justify="left" if col == "category" else "right", no_wrap=True)
        for name, n, d in cmp.by_category:
            cat.add_row(
                safe(name),
                f"{n:,}",
                _al(None if d.a is None else 1 + d.a),
                _al(None if d.b is None else 1 + d.b),
                _diff(d),
                _ci(d),
            )
    dis = cmp.disagreements
    lines = [
        f"round starts where A accepts more: {dis.a_more:,}; where B accepts more: {dis.b_more:,}",
        "  first A > B (sample, position): " + _positions(dis.first_a_more),
        "  first B > A (sample, position): " + _positions(dis.first_b_more),
    ]
    return depth, ctx, cat, lines


def _positions(ps: list[tuple[int, int]]) -> str:
    return ", ".join(f"({s}, {p})" for s, p in ps) or "none"
