"""`eagle-inspect eval`: accuracy per wiring, as a rich table or one JSON document."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from inspector.commands.common import load_evaluator, resolve_inputs
from inspector.evaluate import Report


def run_eval(args: argparse.Namespace) -> int:
    from inspector.distributed import gather_report, init_from_env

    inputs = resolve_inputs(args)
    err = Console(stderr=True)
    dist_ctx, device = init_from_env(args.device)
    ev = load_evaluator(inputs, device=device, dtype=args.dtype, ttt_steps=args.ttt_steps)
    specs = args.wiring or ["train", "serve"]
    wirings = [ev.wiring(s) for s in specs]
    labels = [
        f"{s} {w.label(ev.slot_info)}" if s in ("train", "serve") else w.label(ev.slot_info)
        for s, w in zip(specs, wirings, strict=True)
    ]
    n = len(ev.samples) if args.limit is None else min(args.limit, len(ev.samples))
    with Progress(
        TextColumn("evaluating"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal or (dist_ctx is not None and not dist_ctx.is_main),
    ) as progress:
        task = progress.add_task("eval", total=n)
        report = ev.run(
            wirings,
            limit=args.limit,
            positions=args.positions and args.json,
            labels=labels,
            progress=lambda done, total: progress.update(task, completed=done, total=total),
            indices=dist_ctx.shard(n) if dist_ctx else None,
        )
    if dist_ctx is not None:
        report = gather_report(dist_ctx, report)
        if report is None:  # other ranks: rank 0 prints the merged report
            return 0
    for e in report.errors:
        err.print(
            f"[yellow]skipped sample {e.index}[/]: {escape(e.message)}",
            highlight=False,
            soft_wrap=True,  # one line per skipped file, however narrow the terminal
        )
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=1, allow_nan=False, default=_json_default)
        sys.stdout.write("\n")
    else:
        # Piped output (logs, CI) gets a wide console so the table never wraps mid-cell.
        out = Console() if sys.stdout.isatty() else Console(width=200)
        out.print(render_report(report))
        if args.per_sample:
            out.print(render_per_sample(report))
    return 0 if report.samples else 1


def _json_default(o: object) -> object:
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _pct(c) -> str:
    return "-" if c.acc is None else f"{100 * c.acc:.1f}%"


def render_report(report: Report) -> Table:
    title = escape(
        f"{report.checkpoint} ({report.layout}) on {report.samples} samples "
        f"({report.sample_format}), {report.device} {report.dtype}"
    )
    table = Table(title=title, title_justify="left", header_style="bold")
    table.add_column("wiring", no_wrap=True)
    table.add_column("fc <- slots", no_wrap=True)
    k_max = max((len(w.steps) for w in report.wirings), default=0)
    for k in range(k_max):
        table.add_column(f"all-tok s{k}" if k_max > 1 else "all-tok", justify="right")
    table.add_column("in-vocab", justify="right")
    table.add_column("coverage", justify="right")
    has_verifier = any(w.steps and w.steps[0].verifier_a is not None for w in report.wirings)
    if has_verifier:
        table.add_column("verifier (spec/eagle)", justify="right")
    if k_max > 1:
        table.add_column("accept len", justify="right")
    for w in report.wirings:
        name = w.label.split(" [")[0] if " [" in w.label else "custom"
        row = [name, escape(w.wiring.label(report.slots))]
        row += [f"{s.all_tok.hits}/{s.all_tok.total} {_pct(s.all_tok)}" for s in w.steps]
        row += [""] * (k_max - len(w.steps))
        s0 = w.steps[0] if w.steps else None
        row.append(f"{s0.in_vocab.hits}/{s0.in_vocab.total} {_pct(s0.in_vocab)}" if s0 else "-")
        row.append(_pct(s0.coverage) if s0 else "-")
        if has_verifier:
            row.append(
                f"{_pct(s0.verifier_a)} / {_pct(s0.verifier_b)}" if s0 and s0.verifier_a else "-"
            )
        if k_max > 1:
            row.append(f"{w.acceptance_length:.2f}")
        table.add_row(*row)
    return table


def render_per_sample(report: Report) -> Table:
    table = Table(title="per sample, step 0 all-tok", title_justify="left", header_style="bold")
    table.add_column("#", justify="right")
    table.add_column("file")
    for w in report.wirings:
        table.add_column(escape(w.wiring.label(report.slots)), justify="right")
    rows = zip(*(w.per_sample for w in report.wirings), strict=True)
    for cells in rows:
        idx, path = cells[0][0], cells[0][1]
        table.add_row(
            str(idx),
            escape(path.rsplit("/", 1)[-1]),
            *(
                f"{c[2][0].all_tok.hits}/{c[2][0].all_tok.total} {_pct(c[2][0].all_tok)}"
                for c in cells
            ),
        )
    return table
