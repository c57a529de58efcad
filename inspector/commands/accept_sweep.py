"""`eagle-inspect accept --sweep`: a grid of engine settings replayed (one beam per topk), ranked
by accept length and by speedup under a stated cost model, with the flags to serve the best."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console, Group
from rich.text import Text

from inspector.commands.output import report_table, safe, stdout_console, write_json
from inspector.engines import default_engine
from inspector.errors import InputError
from inspector.formatting import fmt_float


def int_list(text: str) -> list[int]:
    """`1,2,4`: positive integers, ASCII digits only."""
    out = []
    for part in text.split(","):
        p = part.strip()
        if not p.isascii() or not p.isdigit() or int(p) < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers >= 1")
        out.append(int(p))
    return out


def add_sweep_args(p: argparse.ArgumentParser) -> None:
    from inspector.serving.cost import DEFAULT_STEPS, DEFAULT_TOKENS, DEFAULT_TOPK, CostModel

    def csv(xs) -> str:
        return ",".join(map(str, xs))

    c = CostModel()
    p.add_argument(
        "--sweep",
        action="store_true",
        help="replay a grid of settings (--sweep-steps x --sweep-topk x --sweep-tokens, one tree "
        "pass per topk) and rank them by accept length and by speedup under --cost",
    )
    p.add_argument(
        "--sweep-steps", type=int_list, default=list(DEFAULT_STEPS), metavar="S,..",
        help=f"--sweep: draft steps (default {csv(DEFAULT_STEPS)})",
    )  # fmt: skip
    p.add_argument(
        "--sweep-topk", type=int_list, default=list(DEFAULT_TOPK), metavar="K,..",
        help=f"--sweep: branches per node, 1 a chain (default {csv(DEFAULT_TOPK)})",
    )  # fmt: skip
    p.add_argument(
        "--sweep-tokens", type=int_list, default=list(DEFAULT_TOKENS), metavar="N,..",
        help=f"--sweep: a tree's draft tokens, root included (default {csv(DEFAULT_TOKENS)}; "
        "a chain verifies steps + 1; combinations DraftSpec refuses are skipped)",
    )  # fmt: skip
    p.add_argument(
        "--cost", metavar="SPEC",
        help="--sweep: round cost in target decode steps, e.g. "
        f"draft={c.draft:g},verify={c.verify:g},per_token={c.per_token:g} (the defaults): "
        "steps x draft + verify + per_token x (draft tokens - 1); speedup = accept len / cost",
    )  # fmt: skip


def run_sweep_command(args: argparse.Namespace) -> int:
    from inspector.commands.accept import bound_notes
    from inspector.commands.common import open_evaluator, print_skips, wirings_and_names
    from inspector.engines import Engine
    from inspector.progress import progress_bar
    from inspector.serving.cost import CostModel, sweep_grid
    from inspector.serving.settings_sweep import run_sweep

    if args.live:
        raise InputError(None, "--sweep", "replays saved samples: leave out --live")
    if args.steps is not None or args.draft_tokens is not None or args.topk != 1:
        raise InputError(
            None, "--sweep", "takes --sweep-steps/--sweep-topk/--sweep-tokens, not --steps/--topk"
        )
    cost = CostModel.parse(args.cost)
    engine = Engine(args.engine) if args.engine else None
    specs, left_out = sweep_grid(
        args.sweep_steps, args.sweep_topk, args.sweep_tokens, kv=args.kv, engine=engine
    )
    err = Console(stderr=True)
    # A chain reads the evaluator's TTT predictions, as `accept --steps S` does: each chain's
    # figure is then the one a single run gives.
    chains = [s.steps for s in specs if s.is_chain]
    _, ev = open_evaluator(args, err, args.device, max(chains, default=1))
    wirings, names = wirings_and_names(ev, args.wiring)
    with progress_bar("sweeping", err) as advance:
        report = run_sweep(
            ev,
            specs,
            wirings,
            cost=cost,
            engine=engine,
            names=names,
            limit=args.limit,
            progress=advance,
            skipped_settings=left_out,
        )
    print_skips(err, report)
    if left_out:
        err.print(
            f"note: left out {len(left_out)} combinations the engines refuse: "
            + safe("; ".join(left_out)),
            highlight=False,
            soft_wrap=True,
        )
    for line in bound_notes([r.accept for r in report.rows]):
        err.print(f"note: {safe(line)}", highlight=False, soft_wrap=True)
    if args.json:
        write_json(report.to_dict())
        return 0
    out = stdout_console(None if sys.stdout.isatty() else 200)
    out.print(render_sweep(report))
    return 0


def _length(row) -> str:
    st = row.stats
    al = st.accept_length
    return "-" if al is None else (">=" if st.is_bound else "") + fmt_float(al)


def render_sweep(report) -> Group:
    title = safe(
        f"{report.checkpoint}: {len(report.rows)} settings x wirings replayed on "
        f"{report.samples} samples, {report.device} {report.dtype_label}, best speedup first"
    )
    table = report_table(title)
    for name, just in (
        ("wiring", "left"),
        ("counted as", "left"),
        ("accept len", "right"),
        ("#len", "right"),
        ("cost", "right"),
        ("speedup", "right"),
        ("#", "right"),
        ("engine flags", "left"),
    ):
        table.add_column(name, justify=just, no_wrap=name != "engine flags")
    lines = []
    for label in report.wirings():
        rows = sorted(report.of(label), key=lambda r: r.rank_speedup)
        name = rows[0].accept.name or label
        for i, r in enumerate(rows):
            sp = r.speedup
            table.add_row(
                safe(name) if i == 0 else "",
                r.engine.display,
                _length(r),
                str(r.rank_accept),
                fmt_float(r.cost.round_cost(r.spec)),
                "-" if sp is None else f"{sp:.2f}x",
                str(r.rank_speedup),
                safe(r.spec.flags()),
            )
        table.add_section()
        best = report.best(label)
        if best is not None:
            lines.append(
                f"recommended for {safe(name)}: {safe(best.spec.flags())} "
                f"(accept len {_length(best)}, speedup {best.speedup:.2f}x)"
            )
    table.caption = (
        "accept len: 1 + accepted / rounds as the engine counts it "
        f"({default_engine(True).display} for a chain, {default_engine(False).display} for "
        "a tree unless --engine); #len / #: rank by accept length / by speedup within the wiring; "
        f"cost: {report.cost.describe()}; speedup = accept len / cost (tokens per unit of time "
        "against plain decoding)"
    )
    table.caption_justify = "left"
    return Group(table, Text(""), *(Text(line) for line in lines))
