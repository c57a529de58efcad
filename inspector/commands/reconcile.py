"""`eagle-inspect reconcile CKPT --engine-log FILE [SAMPLES | --prompts INPUT --target T]`: what a
serving engine logged, held against the replay of the same requests under the draft's configured
wiring and the alternatives, and what the difference means.

The view: the flags make a `ReconcileRequest`, `doctor.reconcile.entry` runs it (the loading through
this module's loaders, its notes printed on stderr, its passes under progress bars), and the outcome
is printed as tables or one JSON document; the exit status is the worst verdict's."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from inspector.commands.exit_codes import for_verdict
from inspector.commands.output import (
    VERDICT_COLOURS,
    report_table,
    safe,
    stdout_console,
    write_json,
)
from inspector.commands.reconcile_runs import render_runs
from inspector.doctor.reconcile.request import (
    LivePaths,
    LoadedSamples,
    ReconcileHooks,
    ReconcileRequest,
    engine_flags,
)
from inspector.formatting import fmt_float, pct
from inspector.progress import progress_bar, stage_progress_bar


def run_reconcile(args: argparse.Namespace) -> int:
    """Parse, run `doctor.reconcile.entry` (a block draft: `reconcile_block`), print."""
    from inspector.doctor.reconcile.entry import run_reconcile_request
    from inspector.formats.block_config import block_draft_family

    family = block_draft_family(args.checkpoint)
    if family is not None:
        from inspector.commands.reconcile_block import run_block_reconcile

        return run_block_reconcile(args, family)
    err = Console(stderr=True)

    def note(line: str) -> None:
        err.print(f"note: {safe(line)}", highlight=False, soft_wrap=True)

    hooks = ReconcileHooks(
        note=note,
        bar=lambda label: progress_bar(label, err),
        stages=lambda: stage_progress_bar(err),
    )
    outcome = run_reconcile_request(reconcile_request(args), _Load(args, err), hooks=hooks)
    status = max(for_verdict(r.verdict) for r in outcome.results)
    if args.json:
        write_json(outcome.to_dict())
        return status
    out = stdout_console(None if sys.stdout.isatty() else 200)
    if not outcome.many:
        out.print(render(outcome.results[0], outcome.reports[0]))
        return status
    n = len(outcome.results)
    runs = zip(outcome.labels, outcome.results, outcome.reports, strict=True)
    for i, (label, result, rep) in enumerate(runs):
        out.print(Text(f"run {i + 1} of {n}: {label} ({result.log.path})", style="bold"))
        out.print(render(result, rep))
    out.print(render_runs(outcome.comparison, outcome.results))
    return status


def reconcile_request(args: argparse.Namespace) -> ReconcileRequest:
    """The request the flags make."""
    paths = args.engine_log if isinstance(args.engine_log, list) else [args.engine_log]
    return ReconcileRequest(
        engine_logs=tuple(paths),
        samples=tuple(args.samples or ()),
        prompts=args.prompts,
        decode_log_interval=args.decode_log_interval,
        steps=args.steps,
        topk=args.topk,
        draft_tokens=args.draft_tokens,
        wiring=tuple(args.wiring) if args.wiring is not None else None,
        limit=args.limit,
        device=args.device,
        engine_dtype=args.engine_dtype,
        adaptive=args.adaptive,
        synthetic_rates=args.synthetic_rates,
        simulated_accept_len=args.simulated_accept_len,
        overlap=args.sglang_overlap,
        max_new=args.max_new,
        dtype=args.dtype,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        verify=args.verify,
        threshold_single=args.threshold_single,
        threshold_acc=args.threshold_acc,
    )


class _Load:
    """The inputs as the flags name them (`ReconcileLoad`): CKPT and SAMPLES through the session
    (its notes printed), or the live loop's draft, --target and --prompts."""

    def __init__(self, args: argparse.Namespace, err: Console) -> None:
        self.args, self.err = args, err

    def samples(self, device: str, ttt_steps: int) -> LoadedSamples:
        from inspector.commands.common import open_evaluator

        inputs, ev = open_evaluator(self.args, self.err, device, ttt_steps)
        return LoadedSamples(ev, inputs.target)

    def live(self) -> LivePaths:
        from inspector.commands.accept_live import live_inputs

        draft, target, prompts = live_inputs(
            argparse.Namespace(**{**vars(self.args), "samples": []})
        )
        return LivePaths(draft, target, prompts)


def render(result, report) -> Group:
    from inspector.doctor.reconcile.words import expected_text

    verdict = result.verdict.value
    body = Text(result.summary)
    if result.fix:
        body.append("\nfix: ", style="bold")
        body.append(result.fix)
    for f in result.faults:
        body.append("\n- ", style="dim")
        body.append(f)
    panel = Panel(
        body,
        title=f"[{VERDICT_COLOURS[verdict]}]{verdict.replace('_', ' ')}[/]",
        title_align="left",
        border_style=VERDICT_COLOURS[verdict],
    )
    log = result.log
    table = report_table(
        safe(
            f"the engine's figure against each wiring's {report.mode} of the same requests "
            f"({engine_flags(report.spec, report.engine)})"
        )
    )
    table.add_column("", no_wrap=True)
    table.add_column("accept len", justify="right")
    table.add_column("rounds", justify="right")
    table.add_column("accepted", justify="right")
    table.add_column("requests equal", justify="right")
    sampled = any(c.expected is not None for c in result.checks)
    if sampled:
        table.add_column("expected (95% CI)", justify="right")
        table.add_column("z by depth", justify="right")
    table.add_column("", no_wrap=True)
    table.add_row(
        safe(log.description),
        fmt_float(log.accept_length) if log.accept_length is not None else "-",
        "-" if log.rounds is None else f"{log.rounds:,}",
        "-" if log.accepted is None else f"{log.accepted:,}",
        "",
        *([_logged_shares(log), ""] if sampled else []),
        "logged",
    )
    for c in result.checks:
        st = c.stats
        al = (
            "-"
            if st.accept_length is None
            else (">=" if st.is_bound else "") + fmt_float(st.accept_length)
        )
        eq = "" if c.requests_equal is None else f"{c.requests_equal}/{result.requests_matched}"
        # at a temperature the engine's figure is within the noise of a wiring's, never equal;
        # under an adaptive draft length it is at most a wiring's fixed-K replay
        fits = "consistent" if sampled else ("within bound" if result.bound else "equal")
        best = "trained" if result.trained is not None else "best"
        marks = [m for m, on in ((fits, c.equal), (best, c.label == result.best)) if on]
        extra = []
        if sampled:
            e = c.expected
            extra = [
                "-" if e is None else expected_text(e).removeprefix("expected "),
                " ".join(f"{p.z:+.1f}" for p in c.positions or []) or "-",
            ]
        row = [safe(c.label), al, f"{st.rounds:,}", f"{st.accepted:,}", eq, *extra]
        table.add_row(*row, ", ".join(marks))
    if sampled:
        table.caption = (
            "at a temperature: accept len, rounds and accepted are the live loop's own random "
            "run; expected: the rule's expectation on its rounds; z by depth: the engine's "
            "logged share of rounds accepting >= k against the expected share (|z| <= 4: "
            "consistent); the logged row's last column: its shares by depth"
        )
        table.caption_justify = "left"
    return Group(panel, table)


def _logged_shares(log) -> str:
    if log.accepted_per_pos is None or not log.rounds:
        return "-"
    return " ".join(pct(c / log.rounds) for c in log.accepted_per_pos)
