"""`eagle-inspect reconcile BLOCK_DRAFT SAMPLES --engine-log LOG` on a block draft (DFlash,
DFlash2): the engine's per-request figures (or its pooled counts) against our block replay of the
same requests under each wiring the block plan shows; the verdict is
`doctor.reconcile.block.reconcile_block`'s."""

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
from inspector.errors import InputError
from inspector.formatting import fmt_float
from inspector.progress import progress_bar


def run_block_reconcile(args: argparse.Namespace, family: str) -> int:
    from inspector.commands.accept_block import (
        SEARCH_SAMPLES,
        counting_engines,
        refuse_replay_flags,
    )
    from inspector.commands.common import LazySamples, open_block_draft
    from inspector.doctor.reconcile.block import reconcile_block, replays_of
    from inspector.doctor.reconcile.pipeline import pair_requests, token_key
    from inspector.doctor.wiring.block_feeds import plan_block_wirings
    from inspector.engines import Engine
    from inspector.evaluate.block_eval import evaluate_blocks
    from inspector.formats.engine_log import read_engine_log

    if getattr(args, "prompts", None):
        raise InputError(None, "--prompts", "not on a block draft yet: pass SAMPLES")
    if getattr(args, "wiring", None):
        raise InputError(None, "--wiring", "not on a block draft yet: drop --wiring")
    refuse_replay_flags(args)
    paths = args.engine_log if isinstance(args.engine_log, list) else [args.engine_log]
    if len(paths) > 1:
        raise InputError(None, "--engine-log", "one log on a block draft")
    log = read_engine_log(paths[0], decode_log_interval=args.decode_log_interval)
    if log.accept_length is None:
        raise InputError(log.path, None, "holds no accept length (no rounds counted)")
    which = Engine(log.engine)
    counting_engines(argparse.Namespace(engine=which.value), family)
    err = Console(stderr=True)
    inputs, draft, sample_set = open_block_draft(args, err, dspark=True)
    block = draft.config.block
    assert block is not None
    steps = args.steps or log.steps or log.most_drafted or block.drafts_per_block
    # K drafts a round: K rows where the anchor's row drafts too (DSpark), else K + 1
    width = steps if block.anchor_drafts else steps + 1
    err.print(
        f"note: {safe(log.description)} from {safe(str(log.path))}: accept length "
        f"{fmt_float(log.accept_length)}; replaying blocks of {width} rows",
        highlight=False,
        soft_wrap=True,
    )
    n = len(sample_set) if args.limit is None else args.limit
    samples = LazySamples(sample_set, n, err)
    plan = plan_block_wirings(
        draft, [x for _, x in samples.head(SEARCH_SAMPLES)], inputs.target, (which,)
    )
    for line in plan.notes:
        err.print(f"note: {safe(line)}", highlight=False, soft_wrap=True)
    held = plan.held
    if not held or held[0][0].name != "configured":
        raise InputError(
            inputs.samples[0] if inputs.samples else None,
            "SAMPLES",
            f"the samples do not hold the configured layers HF {list(block.hf_layer_ids)} "
            "(capture --layers)",
        )
    tokens: list[tuple[int, bytes]] = []

    def kept():  # each sample's tokens' digest, for pairing, as the replay reads it
        for i, s in samples:
            tokens.append((i, token_key(s.input_ids.tolist())))
            yield i, s

    with progress_bar("replaying", err) as advance:
        report = evaluate_blocks(
            draft,
            kept(),
            [(row.name, w) for row, w in held],
            progress=advance,
            engines=(which,),
            width=width,
            slot_info=sample_set.slot_info,
        )
    pairs, notes = pair_requests(log, tokens)
    searched = next((row.layers for row, _ in plan.rows if row.name == "searched"), None)
    rows = [row for row, _ in held]
    result = reconcile_block(log, replays_of(report, rows, which), pairs, notes, searched)
    for line in result.notes:
        err.print(f"note: {safe(line)}", highlight=False, soft_wrap=True)
    status = for_verdict(result.verdict)
    if args.json:
        doc = {
            "config": {"engine": which.value, "steps": steps, "family": family},
            **result.to_dict(),
        }
        for w, row in zip(doc["wirings"], rows, strict=True):
            w["name"], w["layers"], w["fed_by"] = row.name, list(row.layers), list(row.fed_by)
        write_json(doc)
        return status
    out = stdout_console(None if sys.stdout.isatty() else 200)
    out.print(render_block(result, rows, VERDICT_COLOURS))
    return status


def render_block(result, rows, colours) -> Group:
    """The verdict's panel, then one row per wiring: its replay's figure against the log's."""
    verdict = result.verdict.value
    body = Text(result.summary)
    if result.fix:
        body.append("\nfix: ", style="bold")
        body.append(result.fix)
    panel = Panel(
        body,
        title=f"[{colours[verdict]}]{verdict.replace('_', ' ')}[/]",
        title_align="left",
        border_style=colours[verdict],
    )
    table = report_table(
        safe(
            f"the engine's accept length {fmt_float(result.log.accept_length)} against each "
            "wiring's block replay of the same requests"
        )
    )
    for col in ("wiring", "fc <- HF layers", "accept len", "rounds", "accepted", "requests equal"):
        table.add_column(col, no_wrap=True)
    table.add_column("fed by")
    for c, row in zip(result.checks, rows, strict=True):
        eq = "-" if c.requests_equal is None else f"{c.requests_equal}/{result.requests_matched}"
        al = c.stats.accept_length
        table.add_row(
            safe(row.name) + (" =" if c.label == result.matched else ""),
            safe(str(list(row.layers))),
            "-" if al is None else fmt_float(al),
            f"{c.stats.rounds:,}",
            f"{c.stats.accepted:,}",
            eq,
            safe(", ".join(row.fed_by)),
        )
    table.caption = "= marks the wiring whose replay the engine's figure equals"
    table.caption_justify = "left"
    return Group(panel, table)
