"""`eagle-inspect eval`: accuracy per wiring, as a rich table or one JSON document."""

from __future__ import annotations

import argparse
import math
import os
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from inspector.commands.common import (
    Inputs,
    open_evaluator,
    print_skips,
    warn_slot_faults,
    wirings_and_names,
)
from inspector.commands.output import (
    report_table,
    safe,
    stdout_console,
    write_json,
    write_json_spooled,
)
from inspector.evaluate import Report
from inspector.evaluate.positions import PositionSpool
from inspector.formatting import pct
from inspector.progress import progress_bar


def run_eval(args: argparse.Namespace) -> int:
    from inspector.distributed import gather_report, init_from_env
    from inspector.formats.block_config import block_draft_family

    if block_draft_family(args.checkpoint) is not None:
        from inspector.commands.eval_block import run_block_eval

        return run_block_eval(args)
    err = Console(stderr=True)
    dist_ctx, device = init_from_env(args.device)
    inputs, ev = open_evaluator(args, err, device, args.ttt_steps)
    warn_slot_faults(err, ev)
    wirings, names = wirings_and_names(ev, args.wiring)
    n = len(ev.samples) if args.limit is None else min(args.limit, len(ev.samples))
    with progress_bar(
        "evaluating", err, hidden=dist_ctx is not None and not dist_ctx.is_main
    ) as advance:
        # Positions go to a spool on disk (one process) or stay in memory for torchrun's gather.
        want = bool(args.positions and args.json)
        spool = PositionSpool(len(wirings)) if want and dist_ctx is None else None
        report = ev.run(
            wirings,
            limit=args.limit,
            positions=spool if spool is not None else want,
            names=names,
            progress=advance,
            indices=dist_ctx.shard(n) if dist_ctx else None,
        )
    if dist_ctx is not None:
        report = gather_report(dist_ctx, report)
        if report is None:  # other ranks: rank 0 prints the merged report
            return 0
    print_skips(err, report)
    if args.json:
        if spool is not None:
            replaced = write_json_spooled(report.to_dict(), spool)
            where = sorted(spool.nonfinite_samples)
            spool.close()
        else:
            replaced = write_json(report.to_dict())
            where = sorted(
                {p["sample"] for w in report.wirings for p in w.positions if _nonfinite(p)}
            )
        if replaced:
            err.print(
                f"{replaced} non-finite numbers (NaN/Inf) written as null"
                + (f"; samples {', '.join(map(str, where[:10]))}" if where else ""),
                highlight=False,
            )
    else:
        # Piped output (logs, CI) gets a wide console so the table never wraps mid-cell.
        out = stdout_console(None if sys.stdout.isatty() else 200)
        out.print(render_report(report))
        families = trainer_families(args.metrics, report.layout)
        if families and not report_has_trainer(report):
            err.print(
                f"{' and '.join(families)}' own metrics (what a training log shows) need the "
                "verifier's norm + lm_head: pass --target DIR"
                + (
                    " (or --target auto: the draft's config names it)"
                    if _names_verifier(inputs)
                    else ""
                ),
                highlight=False,
            )
        else:
            for fam in families:
                out.print(*render_trainer(report, fam))
        if args.per_sample:
            out.print(render_per_sample(report))
    return 0


def _names_verifier(inputs: Inputs) -> bool:
    from inspector.formats.verifier import verifier_name

    return verifier_name(inputs.checkpoint) is not None


def _nonfinite(position: dict) -> bool:
    values = [position.get("p_pred"), position.get("p_true"), position.get("loss")]
    values += [p for _, p in position.get("topk", [])]
    return any(isinstance(v, float) and not math.isfinite(v) for v in values)


def _pct(c) -> str:
    return pct(c.acc)


def render_report(report: Report) -> Table:
    """Ours: what serving sees (the true next token, out-of-draft-vocab tokens count as misses)."""
    title = safe(
        f"{report.checkpoint} ({report.layout}) on {report.samples} samples "
        f"({report.sample_format}), {report.device} {report.dtype_label}"
    )
    table = report_table(title)
    table.add_column("wiring", no_wrap=True)
    table.add_column("fc <- slots", no_wrap=True)
    k_max = max((len(w.steps) for w in report.wirings), default=0)
    for k in range(k_max):
        table.add_column(f"all-tok s{k}" if k_max > 1 else "all-tok", justify="right")
    table.add_column("in-vocab", justify="right")
    table.add_column("coverage", justify="right")
    if k_max > 1:
        table.add_column("accept len", justify="right")
    for w in report.wirings:
        name = w.name or "custom"
        row = [safe(name), safe(w.wiring.label(report.slots))]
        row += [s.all_tok.fmt() for s in w.steps]
        row += [""] * (k_max - len(w.steps))
        s0 = w.steps[0] if w.steps else None
        row.append(s0.in_vocab.fmt() if s0 else "-")
        row.append(_pct(s0.coverage) if s0 else "-")
        if k_max > 1:
            al = w.acceptance_length
            bound = w.accept is not None and w.accept.is_bound
            row.append("-" if al is None else (">=" if bound else "") + f"{al:.2f}")
        table.add_row(*row)
    return table


TRAINERS = ("speculators", "specforge")


def trainer_families(choice: str, layout: str) -> list[str]:
    """Which trainers' tables to show: `--metrics`, or by default the checkpoint layout's own."""
    if choice in ("all",):
        return list(TRAINERS)
    if choice in TRAINERS:
        return [choice]
    if choice == "default" and layout in TRAINERS:
        return [layout]
    return []


def report_has_trainer(report: Report) -> bool:
    return any(w.steps and w.steps[0].has_trainer for w in report.wirings)


TRAINER_HEADINGS = {
    "speculators": (
        "speculators' own metrics, as its training log shows them: full_acc_k is cumulative "
        "(steps 0..k all match the verifier's argmax within the draft vocab), cond_acc_k is "
        "conditional on steps < k"
    ),
    "specforge": (
        "SpecForge's own metrics, as its training log shows them: acc_k per step against the "
        "target's full-vocab argmax (teacher forced), simulated_acc_len = sum_k prod_m<=k acc_m"
    ),
}


def render_trainer(report: Report, family: str) -> tuple[Text, Table]:
    """The accuracies a trainer's own log shows for these samples, per step."""
    k_max = max((len(w.steps) for w in report.wirings), default=0)
    table = Table(header_style="bold")
    table.add_column("wiring", no_wrap=True)
    for k in range(k_max):
        table.add_column(
            f"full_acc_{k}" if family == "speculators" else f"acc_{k}", justify="right"
        )
    if family == "speculators":
        for k in range(k_max):
            table.add_column(f"cond_acc_{k}", justify="right")
    else:
        table.add_column("simulated_acc_len", justify="right")
    for w in report.wirings:
        name = w.name or w.wiring.label(report.slots)
        row = [safe(name)]
        if family == "speculators":
            row += [_counts(s.spec_full) for s in w.steps] + [""] * (k_max - len(w.steps))
            row += [_counts(s.spec_cond) for s in w.steps] + [""] * (k_max - len(w.steps))
        else:
            row += [_counts(s.specforge) for s in w.steps] + [""] * (k_max - len(w.steps))
            acc_len = w.specforge_simulated_acc_len
            row.append("-" if acc_len is None else f"{acc_len:.3f}")
        table.add_row(*row)
    return Text(TRAINER_HEADINGS[family], style="bold"), table


def _counts(c) -> str:
    return "-" if c is None else c.fmt()


def render_per_sample(report: Report) -> Table:
    rows = list(zip(*(w.per_sample for w in report.wirings), strict=True))
    paths = [cells[0][1] for cells in rows]
    # Files relative to the folder they share, so nested sets (a/x.pt, b/x.pt) stay apart.
    root = os.path.commonpath([os.path.dirname(p) for p in paths]) if paths else ""
    title = "per sample, step 0 all-tok" + (f" (files under {safe(root)})" if root else "")
    table = report_table(title)
    table.add_column("#", justify="right")
    table.add_column("file")
    for w in report.wirings:
        table.add_column(safe(w.wiring.label(report.slots)), justify="right")
    for cells, path in zip(rows, paths, strict=True):
        table.add_row(
            str(cells[0][0]),
            safe(os.path.relpath(path, root) if root else path),
            *(c[2][0].all_tok.fmt() for c in cells),
        )
    return table
